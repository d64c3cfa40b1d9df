package scope

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
)

// ApplyStatefulSet applies a StatefulSet, or only reads it (its status is needed, for the
// RedisCluster's) while the children are known to match; nil when it does not exist yet.
func ApplyStatefulSet(ctx context.Context, c *Cluster, desired *appsv1ac.StatefulSetApplyConfiguration) (*appsv1.StatefulSet, error) {
	live := &appsv1.StatefulSet{}
	if c.ChildrenKnown {
		if err := c.Client.Get(ctx, c.NameOf(*desired.Name), live); err != nil {
			return nil, fmt.Errorf("reading StatefulSet %s: %w", *desired.Name, err)
		}
		return live, nil
	}
	if err := Apply(ctx, c, "StatefulSet", Child[*appsv1.StatefulSet, *appsv1ac.StatefulSetApplyConfiguration]{
		Desired: desired, Name: c.NameOf(*desired.Name), Live: live, Extract: extractStatefulSet,
	}); err != nil {
		return nil, err
	}
	if live.UID == "" {
		return nil, nil
	}
	return live, nil
}

// extractStatefulSet is what our field manager owns of a StatefulSet, without the status the
// API server gives each claim template (phase Pending): the templates are an atomic list, so
// that status is counted as ours, though no apply sets it.
func extractStatefulSet(live *appsv1.StatefulSet, fieldManager string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	owned, err := appsv1ac.ExtractStatefulSet(live, fieldManager)
	if err != nil || owned.Spec == nil {
		return owned, err
	}
	for i := range owned.Spec.VolumeClaimTemplates {
		owned.Spec.VolumeClaimTemplates[i].Status = nil
	}
	return owned, nil
}
