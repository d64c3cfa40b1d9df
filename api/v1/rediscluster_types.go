package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultVersion is the Redis version a RedisCluster runs when spec.version is not given.
const DefaultVersion = "7.2"

// RedisClusterSpec is what the user wants: how many Redis nodes, of which version.
type RedisClusterSpec struct {
	// Replicas is the number of Redis nodes: one primary and replicas-1 read replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Replicas int32 `json:"replicas"`

	// Version is the Redis version, major.minor or major.minor.patch (6.0 or newer).
	// It selects the image redis:<version> unless image is set.
	// +kubebuilder:default="7.2"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^([6-9]|[1-9][0-9]+)[.]')",message="Redis 6.0 or newer is required"
	// +optional
	Version string `json:"version,omitempty"`

	// Image overrides the Redis container image (for a mirror registry); it must run the Redis of spec.version.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$`
	// +optional
	Image string `json:"image,omitempty"`
}

// RedisClusterStatus is what the operator observed.
type RedisClusterStatus struct {
	// ReadyReplicas is the number of Redis pods that pass their readiness probe.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// ObservedGeneration is the generation of the spec that the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing and Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RedisCluster is a highly available Redis: one primary and its replicas.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=redis;rdc,categories=all;redis
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: it names the StatefulSet and its Services"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names Services"
type RedisCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   RedisClusterSpec   `json:"spec"`
	Status RedisClusterStatus `json:"status,omitempty"`
}

// RedisClusterList is a list of RedisClusters.
// +kubebuilder:object:root=true
type RedisClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedisCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RedisCluster{}, &RedisClusterList{})
}
