// Package v1 contains the cache.example.com/v1 API: the RedisCluster resource.
// +kubebuilder:object:generate=true
// +groupName=cache.example.com
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v1"}

	// SchemeBuilder registers the types of this group-version.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &RedisCluster{}, &RedisClusterList{}, &RedisBackup{}, &RedisBackupList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
