package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/placement"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// setStatus is the one writer of the RedisCluster's status: it turns what the phases recorded
// into the counts, the primary, the nodes and one condition each from a small function below.
// Messages hold no volatile values, so an unchanged world gives an unchanged status.
// modeStatus, the mode's own (mode.status), sets the mode's fields and says its conditions.
func setStatus(rc *cachev1.RedisCluster, state *reconcileState, modeStatus func(*cachev1.RedisCluster, *reconcileState) []*metav1.Condition) {
	if state.Restore != nil {
		rc.Status.Restore = state.Restore
	}
	if state.backupScheduled != nil {
		rc.Status.Backup = &cachev1.BackupStatus{LastScheduleTime: state.backupScheduled}
	}
	scope.SetCondition(rc, restoredCondition(rc, state))
	if state.Lost != "" {
		// A loss again: its time is now, not the first one's.
		meta.RemoveStatusCondition(&rc.Status.Conditions, cachev1.ConditionDataLost)
	}
	scope.SetCondition(rc, dataLostCondition(state))
	scope.SetCondition(rc, outOfMemoryCondition(rc, state))
	for _, c := range modeStatus(rc, state) {
		scope.SetCondition(rc, c)
	}
	// After the mode's fields: it reads the primaries they name.
	scope.SetCondition(rc, resilientCondition(rc, state.Pods))
	if state.Failed == nil {
		// observedGeneration moves when the spec was carried out, or is being (a phase waits:
		// Progressing says for what); not when a phase failed.
		rc.Status.ObservedGeneration = rc.Generation
	}
}

// setReplicatedStatus sets the status fields of one primary and its replicas, and returns its
// conditions.
func setReplicatedStatus(rc *cachev1.RedisCluster, state *reconcileState) []*metav1.Condition {
	if sts := state.replication.statefulSet; sts != nil {
		rc.Status.ReadyReplicas = sts.Status.ReadyReplicas
	}
	rc.Status.Primary = state.replication.view.Primary
	if len(state.replication.view.Nodes) > 0 {
		rc.Status.Nodes = nodeStatuses(state.replication.view)
	}
	degraded := degradedCondition(rc, state)
	return []*metav1.Condition{
		scope.PersistentCondition(rc),
		failingOverCondition(rc, state),
		progressingCondition(state),
		degraded,
		readyCondition(rc, state, degraded),
	}
}

// nodeStatuses is what status.nodes says: each node's role and whether it serves. Nothing that
// changes every second (offsets, addresses) goes in, so a steady cluster's status is steady.
func nodeStatuses(v topology.View) []cachev1.NodeStatus {
	var out []cachev1.NodeStatus
	for _, o := range v.Nodes {
		n := cachev1.NodeStatus{Name: o.Name, Role: cachev1.RoleUnknown, State: cachev1.NodeUnreachable}
		if o.Reachable() {
			n.State = cachev1.NodeSyncing
			switch {
			case o.IsPrimary():
				n.Role = cachev1.RolePrimary
			case o.IsReplica():
				n.Role = cachev1.RoleReplica
			}
			if v.Serving(o) {
				n.State = cachev1.NodeServing
			}
		}
		out = append(out, n)
	}
	return out
}

// failingOverCondition is True from the announcement of a change of primary until it is done;
// nil keeps what the status says.
func failingOverCondition(rc *cachev1.RedisCluster, state *reconcileState) *metav1.Condition {
	existing := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionFailingOver)
	switch move := state.replication.move; {
	case move != nil && !move.done:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionTrue, move.reason, move.message)
	case move != nil:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s replaced %s as primary", move.to, move.from))
	case existing == nil:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonStable, "The primary has not changed")
	case existing.Status == metav1.ConditionTrue && state.replication.round.Plan.Idle() && !state.rolled:
		// A change of primary that an error or a restart cut short was finished by a later reconcile.
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s is the primary", state.replication.view.Primary))
	}
	return nil
}

// progressingCondition is True while the StatefulSet rolls out a change or a phase waits; nil
// (unchanged) when the reconcile failed.
func progressingCondition(state *reconcileState) *metav1.Condition {
	switch {
	case state.Failed != nil:
		return nil
	case state.Waiting != nil:
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, state.Waiting.Reason, state.Waiting.Message)
	case state.WroteStatefulSet() || !scope.RolledOut(state.replication.statefulSet):
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
			"The StatefulSet is rolling out the current spec")
	}
	return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
		"The StatefulSet runs the current spec")
}

// degradedCondition is True when a phase failed or replication itself is broken, as opposed
// to still forming.
func degradedCondition(rc *cachev1.RedisCluster, state *reconcileState) *metav1.Condition {
	if c := state.OutcomeDegraded(); c != nil {
		return c
	}
	plan := state.replication.round.Plan
	switch {
	case len(state.replication.view.Nodes) > 0 && plan.Primary == "" && state.Restore != nil && state.Restore.CompletedAt == nil:
		// Not degraded: the first primary waits for the node that restores the data.
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonRestoring, plan.Reason)
	case len(state.replication.view.Nodes) > 0 && plan.Primary == "":
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonNoPrimary,
			"No Redis node answers; no primary can be chosen")
	case plan.Wait > 0 && plan.Witness != "":
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonPrimaryUnreachable, fmt.Sprintf(
			"Primary %s does not answer the operator, but its replica %s hears from it: the operator's link to it is cut, and it is not replaced while a replica hears from it", plan.Primary, plan.Witness))
	case plan.Wait > 0:
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonPrimaryUnreachable, fmt.Sprintf(
			"Primary %s does not answer; a replica replaces it if it does not answer within %s", plan.Primary, unreachableTimeout(rc)))
	}
	return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")
}

// readyCondition is True when every node is ready and serves, and nothing is degraded.
func readyCondition(rc *cachev1.RedisCluster, state *reconcileState, degraded *metav1.Condition) *metav1.Condition {
	ready := rc.Status.ReadyReplicas
	switch {
	case state.Failed != nil || state.Exited != nil:
		// Said first: counting ready pods would hide why they are not.
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case state.Waiting != nil:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, state.Waiting.Reason, state.Waiting.Message)
	case state.WroteStatefulSet() || !scope.StatefulSetObserved(state.replication.statefulSet) || ready < rc.Spec.Replicas:
		return scope.ReplicasNotReady(ready, rc.Spec.Replicas, state.Stranded)
	case degraded.Status == metav1.ConditionTrue:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case !replicationServing(rc):
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicationNotReady,
			"Not every replica has caught up with the primary")
	}
	return scope.Condition(cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
		fmt.Sprintf("%d of %d Redis nodes are ready; %s is the primary", ready, rc.Spec.Replicas, rc.Status.Primary))
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

// resilientCondition says what losing one machine would do, from the nodes the pods run on
// (placement.Decide keeps the rule); nil before any pod has a node, or when every pod has
// one only in part (the scheduler is still placing them).
func resilientCondition(rc *cachev1.RedisCluster, pods []corev1.Pod) *metav1.Condition {
	primaries := map[string]bool{rc.Status.Primary: rc.Status.Primary != ""}
	for _, sh := range rc.Status.Shards {
		primaries[sh.Primary] = sh.Primary != ""
	}
	var placed []placement.Pod
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			return nil
		}
		shard, _ := resources.ShardOf(p.Labels)
		placed = append(placed, placement.Pod{Name: p.Name, Node: p.Spec.NodeName, Shard: shard, Primary: primaries[p.Name]})
	}
	if len(placed) == 0 {
		return nil
	}
	if risk := placement.Decide(placed, rc.Spec.Cluster != nil); risk.Node != "" {
		return scope.Condition(cachev1.ConditionResilient, metav1.ConditionFalse, cachev1.ReasonNodesShared, risk.Message)
	}
	return scope.Condition(cachev1.ConditionResilient, metav1.ConditionTrue, cachev1.ReasonSpreadOverNodes,
		"Losing any one node keeps every shard's data on another node")
}

// dataLostCondition says what this reconcile lost, in either mode (a promotion of a node holding
// no data, shards given their slots again empty); nil when it lost nothing: the
// condition keeps what it said of an earlier loss.
func dataLostCondition(state *reconcileState) *metav1.Condition {
	if state.Lost == "" {
		return nil
	}
	return scope.Condition(cachev1.ConditionDataLost, metav1.ConditionTrue, cachev1.ReasonNodesRestartedWithoutData, state.Lost)
}

// recordStatusEvents tells, once, what the status now says and did not before: a node's
// Redis that fails to start or was killed (the failed phases record their own Events).
func (r *RedisClusterReconciler) recordStatusEvents(before, after *cachev1.RedisCluster) {
	was := meta.FindStatusCondition(before.Status.Conditions, cachev1.ConditionDegraded)
	now := meta.FindStatusCondition(after.Status.Conditions, cachev1.ConditionDegraded)
	events := map[string]string{cachev1.ReasonRedisFailedToStart: cachev1.EventRedisFailedToStart, cachev1.ReasonRedisKilled: cachev1.EventRedisKilled}
	if now != nil && events[now.Reason] != "" && (was == nil || was.Reason != now.Reason) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, events[now.Reason], "Observe", "%s", now.Message)
	}
	// A placement that one machine's loss would take down, when it becomes so (or names
	// another machine): the pods were scheduled so, or a failover put primaries together.
	was = meta.FindStatusCondition(before.Status.Conditions, cachev1.ConditionResilient)
	now = meta.FindStatusCondition(after.Status.Conditions, cachev1.ConditionResilient)
	if now != nil && now.Status == metav1.ConditionFalse && (was == nil || was.Status != now.Status || was.Message != now.Message) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, cachev1.EventNodesShared, "Observe", "%s", now.Message)
	}
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
