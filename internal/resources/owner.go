package resources

import (
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// ownerReference makes the RedisCluster the controller of a child, so that deleting it
// garbage-collects the child and the child's events requeue it.
func ownerReference(rc *cachev1.RedisCluster) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(cachev1.GroupVersion.String()).
		WithKind("RedisCluster").
		WithName(rc.Name).
		WithUID(rc.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}
