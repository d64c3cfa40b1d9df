package replication

import (
	"context"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch

// StatefulSet applies the StatefulSet whose pods run the nodes.
func StatefulSet(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	rc := c.RC
	desired := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{
		Replicas:      statefulSetReplicas(rc),
		ConfigHash:    resources.ConfigHash(rc),
		OperatorImage: c.OperatorImage,
		Restore:       c.Restore,
		RedisImages:   c.RedisImages,
	})
	live, err := scope.ApplyStatefulSet(ctx, c, desired)
	if err != nil {
		return err
	}
	s.StatefulSet = live
	if !c.ChildrenKnown {
		// The last child: every one of them matched the spec at this version of the RedisCluster.
		c.ChildrenMatched()
	}
	return nil
}

// statefulSetReplicas is spec.replicas, except that the primary's pod is kept until a
// switchover has moved the primary to a pod that stays.
func statefulSetReplicas(rc *cachev1.RedisCluster) int32 {
	ordinal, ok := resources.PodOrdinal(rc.Status.Primary)
	if !ok || int32(ordinal) < rc.Spec.Replicas {
		return rc.Spec.Replicas
	}
	return int32(ordinal) + 1
}
