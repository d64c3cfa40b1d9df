package testenv

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetStatefulSetReady writes the status the StatefulSet controller would write once every pod
// runs the current template and `ready` of them pass their readiness probe. envtest runs no
// StatefulSet controller, so tests stand in for it.
func SetStatefulSetReady(ctx context.Context, c client.Client, sts *appsv1.StatefulSet, ready int32) error {
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	sts.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation,
		Replicas:           replicas,
		ReadyReplicas:      ready,
		AvailableReplicas:  ready,
		CurrentReplicas:    replicas,
		UpdatedReplicas:    replicas,
		CurrentRevision:    sts.Name + "-1",
		UpdateRevision:     sts.Name + "-1",
	}
	return c.Status().Update(ctx, sts)
}

// StandInStatefulSetController marks every StatefulSet in namespace ready, over and over, until
// ctx ends: the part of the StatefulSet controller that tests without pods need.
func StandInStatefulSetController(ctx context.Context, c client.Client, namespace string) {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		list := &appsv1.StatefulSetList{}
		if err := c.List(ctx, list, client.InNamespace(namespace)); err == nil {
			for i := range list.Items {
				sts := &list.Items[i]
				replicas := ptr.Deref(sts.Spec.Replicas, 1)
				if sts.Status.ObservedGeneration != sts.Generation || sts.Status.ReadyReplicas != replicas {
					_ = SetStatefulSetReady(ctx, c, sts, replicas)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
