package controllers

import (
	"context"
	"errors"
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
	if state.observed != nil {
		rc.Status.Nodes = nodeStatuses(state.observed, rc.Status.Primary)
	}
	setPersistent(rc)
	switch {
	case meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionFailingOver) == nil:
		setCondition(rc, cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonStable, "The primary has not changed")
	case meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionFailingOver) && topologySettled(state):
		// A change of primary that an error or a restart cut short was finished by a later reconcile.
		setCondition(rc, cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s is the primary", rc.Status.Primary))
	}

	if state.applyErr != nil {
		reason := cachev1.ReasonApplyFailed
		if errors.Is(state.applyErr, errSecret) {
			reason = cachev1.ReasonSecretNotFound
		}
		msg := state.applyErr.Error()
		setCondition(rc, cachev1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, reason, msg)
		// observedGeneration moves only when the spec was carried out.
		return
	}
	rc.Status.ObservedGeneration = rc.Generation

	if state.changed || !rolledOut(sts) {
		setCondition(rc, cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
			"The StatefulSet is rolling out the current spec")
	} else {
		setCondition(rc, cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
			"The StatefulSet runs the current spec")
	}

	degraded, reason, msg := replicationProblem(rc, state)
	if degraded {
		setCondition(rc, cachev1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	} else {
		setCondition(rc, cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")
	}

	ready := rc.Status.ReadyReplicas
	switch {
	case state.changed || !observed(sts) || ready < rc.Spec.Replicas:
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d Redis nodes are ready", ready, rc.Spec.Replicas))
	case degraded:
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, reason, msg)
	case !replicationServing(rc):
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicationNotReady,
			"Not every replica has caught up with the primary")
	default:
		setCondition(rc, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
			fmt.Sprintf("%d of %d Redis nodes are ready; %s is the primary", ready, rc.Spec.Replicas, rc.Status.Primary))
	}
}

// topologySettled is true when this reconcile found a primary and nothing to change.
func topologySettled(state *reconcileState) bool {
	p := state.plan
	return p.Primary != "" && !p.Promote && len(p.Repoint) == 0 && p.Wait == 0 && !state.topologyChanged
}

// replicationProblem says whether replication itself is broken, as opposed to still forming.
func replicationProblem(rc *cachev1.RedisCluster, state *reconcileState) (bool, string, string) {
	switch {
	case state.authErr != nil:
		return true, cachev1.ReasonAuthenticationFailed, state.authErr.Error()
	case len(state.observed) > 0 && state.plan.Primary == "":
		return true, cachev1.ReasonNoPrimary, "No Redis node answers; no primary can be chosen"
	case state.plan.Wait > 0:
		return true, cachev1.ReasonPrimaryUnreachable, fmt.Sprintf(
			"Primary %s does not answer; a replica replaces it if it does not answer within %s", rc.Status.Primary, unreachableTimeout(rc))
	}
	return false, "", ""
}

// replicationServing is true when the status shows every node serving: the primary and
// caught-up replicas.
func replicationServing(rc *cachev1.RedisCluster) bool {
	if rc.Status.Primary == "" || len(rc.Status.Nodes) < int(rc.Spec.Replicas) {
		return false
	}
	for _, n := range rc.Status.Nodes {
		if n.State != cachev1.NodeServing {
			return false
		}
	}
	return true
}

func setPersistent(rc *cachev1.RedisCluster) {
	if rc.Spec.Storage != nil {
		setCondition(rc, cachev1.ConditionPersistent, metav1.ConditionTrue, cachev1.ReasonPersistentVolumeClaims,
			"Each Redis node keeps its data on its own PersistentVolumeClaim")
		return
	}
	setCondition(rc, cachev1.ConditionPersistent, metav1.ConditionFalse, cachev1.ReasonEmptyDir,
		"Data lives in emptyDir volumes and is lost when a pod is deleted or moves; set spec.storage to keep it")
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
