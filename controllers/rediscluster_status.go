package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// setStatus derives the RedisCluster's status from what this reconcile observed. Messages
// hold no volatile values, so an unchanged world gives an unchanged status.
func setStatus(rc *cachev1.RedisCluster, state *reconcileState) {
	sts := state.statefulSet
	if sts != nil {
		rc.Status.ReadyReplicas = sts.Status.ReadyReplicas
	}

	if state.applyErr != nil {
		msg := state.applyErr.Error()
		setCondition(rc, cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonApplyFailed, msg)
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonApplyFailed, msg)
		// observedGeneration moves only when the spec was carried out.
		return
	}
	setCondition(rc, cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")

	if state.changed || !rolledOut(sts) {
		setCondition(rc, cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
			"The StatefulSet is rolling out the current spec")
	} else {
		setCondition(rc, cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
			"The StatefulSet runs the current spec")
	}

	ready := rc.Status.ReadyReplicas
	if !state.changed && observed(sts) && ready >= rc.Spec.Replicas {
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
			fmt.Sprintf("%d of %d Redis nodes are ready", ready, rc.Spec.Replicas))
	} else {
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d Redis nodes are ready", ready, rc.Spec.Replicas))
	}
	rc.Status.ObservedGeneration = rc.Generation
}

// observed is true when the StatefulSet controller has seen the StatefulSet's current spec,
// so that its status counts describe it.
func observed(sts *appsv1.StatefulSet) bool {
	return sts != nil && sts.Status.ObservedGeneration >= sts.Generation
}

// rolledOut is true when every pod of the StatefulSet runs its current template.
func rolledOut(sts *appsv1.StatefulSet) bool {
	if !observed(sts) {
		return false
	}
	s := sts.Status
	return s.UpdatedReplicas >= ptr.Deref(sts.Spec.Replicas, 1) && s.CurrentRevision == s.UpdateRevision
}

func setCondition(rc *cachev1.RedisCluster, condType string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: rc.Generation,
	})
}

// patchStatus writes the status only when it changed: a converged RedisCluster costs no write.
func (r *RedisClusterReconciler) patchStatus(ctx context.Context, original, rc *cachev1.RedisCluster) error {
	if equality.Semantic.DeepEqual(original.Status, rc.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, rc, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("writing status of RedisCluster %s: %w", rc.Name, err)
	}
	return nil
}
