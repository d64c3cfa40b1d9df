package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/placement"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// setStatus is the one writer of the RedisCluster's status: it turns what the phases recorded
// into the counts, the primary, the nodes and one condition each from a small function below.
// Messages hold no volatile values, so an unchanged world gives an unchanged status.
// modeStatus, the mode's own (mode.status), sets the mode's fields and says its conditions.
func setStatus(rc *cachev1.RedisCluster, state *reconcileState, modeStatus func(*cachev1.RedisCluster, *reconcileState) []*metav1.Condition) {
	if state.restore != nil {
		rc.Status.Restore = state.restore
	}
	if state.backupScheduled != nil {
		rc.Status.Backup = &cachev1.BackupStatus{LastScheduleTime: state.backupScheduled}
	}
	setCondition(rc, restoredCondition(rc, state))
	if state.lost != "" {
		// A loss again: its time is now, not the first one's.
		meta.RemoveStatusCondition(&rc.Status.Conditions, cachev1.ConditionDataLost)
	}
	setCondition(rc, dataLostCondition(state))
	setCondition(rc, outOfMemoryCondition(rc, state))
	for _, c := range modeStatus(rc, state) {
		setCondition(rc, c)
	}
	// After the mode's fields: it reads the primaries they name.
	setCondition(rc, resilientCondition(rc, state.Pods))
	if state.err == nil {
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
		persistentCondition(rc),
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
		return condition(cachev1.ConditionFailingOver, metav1.ConditionTrue, move.reason, move.message)
	case move != nil:
		return condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s replaced %s as primary", move.to, move.from))
	case existing == nil:
		return condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonStable, "The primary has not changed")
	case existing.Status == metav1.ConditionTrue && state.replication.round.Plan.Idle() && !state.rolled:
		// A change of primary that an error or a restart cut short was finished by a later reconcile.
		return condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s is the primary", state.replication.view.Primary))
	}
	return nil
}

// progressingCondition is True while the StatefulSet rolls out a change or a phase waits; nil
// (unchanged) when the reconcile failed.
func progressingCondition(state *reconcileState) *metav1.Condition {
	switch {
	case state.err != nil:
		return nil
	case state.wait != nil:
		return condition(cachev1.ConditionProgressing, metav1.ConditionTrue, state.wait.Reason, state.wait.Message)
	case state.wroteStatefulSet() || !rolledOut(state.replication.statefulSet):
		return condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
			"The StatefulSet is rolling out the current spec")
	}
	return condition(cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
		"The StatefulSet runs the current spec")
}

// degradedCondition is True when a phase failed or replication itself is broken, as opposed
// to still forming.
func degradedCondition(rc *cachev1.RedisCluster, state *reconcileState) *metav1.Condition {
	if c := outcomeDegraded(state); c != nil {
		return c
	}
	plan := state.replication.round.Plan
	switch {
	case len(state.replication.view.Nodes) > 0 && plan.Primary == "" && state.restore != nil && state.restore.CompletedAt == nil:
		// Not degraded: the first primary waits for the node that restores the data.
		return condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonRestoring, plan.Reason)
	case len(state.replication.view.Nodes) > 0 && plan.Primary == "":
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonNoPrimary,
			"No Redis node answers; no primary can be chosen")
	case plan.Wait > 0 && plan.Witness != "":
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonPrimaryUnreachable, fmt.Sprintf(
			"Primary %s does not answer the operator, but its replica %s hears from it: the operator's link to it is cut, and it is not replaced while a replica hears from it", plan.Primary, plan.Witness))
	case plan.Wait > 0:
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonPrimaryUnreachable, fmt.Sprintf(
			"Primary %s does not answer; a replica replaces it if it does not answer within %s", plan.Primary, unreachableTimeout(rc)))
	}
	return condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")
}

// outcomeDegraded is Degraded as both modes say it from how the phases ended: True when one
// failed or a node's Redis keeps exiting, False when one waits (a wait is not a failure:
// Progressing and Ready say what for); nil leaves it to the mode.
func outcomeDegraded(state *reconcileState) *metav1.Condition {
	switch {
	case state.err != nil:
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, state.err.Reason, state.err.Error())
	case state.exited != nil:
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, state.exited.reason, state.exited.message)
	case state.wait != nil:
		return condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected,
			fmt.Sprintf("Nothing failed; phase %s waits", state.wait.Phase))
	}
	return nil
}

// readyCondition is True when every node is ready and serves, and nothing is degraded.
func readyCondition(rc *cachev1.RedisCluster, state *reconcileState, degraded *metav1.Condition) *metav1.Condition {
	ready := rc.Status.ReadyReplicas
	switch {
	case state.err != nil || state.exited != nil:
		// Said first: counting ready pods would hide why they are not.
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case state.wait != nil:
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, state.wait.Reason, state.wait.Message)
	case state.wroteStatefulSet() || !stsObserved(state.replication.statefulSet) || ready < rc.Spec.Replicas:
		return replicasNotReady(ready, rc.Spec.Replicas, state.stranded)
	case degraded.Status == metav1.ConditionTrue:
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case !replicationServing(rc):
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicationNotReady,
			"Not every replica has caught up with the primary")
	}
	return condition(cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
		fmt.Sprintf("%d of %d Redis nodes are ready; %s is the primary", ready, rc.Spec.Replicas, rc.Status.Primary))
}

// replicasNotReady is Ready False while fewer nodes are ready than wanted (both modes), naming
// the pods whose machines are not ready, and what lets a pod deleted there go.
func replicasNotReady(ready, want int32, stranded []strandedPod) *metav1.Condition {
	counted := fmt.Sprintf("%d of %d Redis nodes are ready", ready, want)
	if len(stranded) == 0 {
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicasNotReady, counted)
	}
	reason := cachev1.ReasonNodeCordoned
	var says []string
	for _, s := range stranded {
		if !s.cordoned {
			reason = cachev1.ReasonNodeNotReady
		}
		switch {
		case s.cordoned:
			says = append(says, fmt.Sprintf("%s waits for its volume (claim %s) on node %s, which is cordoned: it starts when %s is uncordoned, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted", s.pod, s.claim, s.node, s.node))
		case s.claim != "":
			says = append(says, fmt.Sprintf("%s waits for its volume (claim %s) on node %s, which is not ready: it starts when %s comes back, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted", s.pod, s.claim, s.node, s.node))
		case s.terminating:
			says = append(says, fmt.Sprintf("%s is on node %s, which is not ready; its pod is being deleted, and stays until %s comes back or is marked out of service (taint node.kubernetes.io/out-of-service), when it starts again on another node", s.pod, s.node, s.node))
		default:
			says = append(says, fmt.Sprintf("%s is on node %s, which is not ready", s.pod, s.node))
		}
	}
	return condition(cachev1.ConditionReady, metav1.ConditionFalse, reason, counted+": "+strings.Join(says, "; "))
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

// persistentCondition says whether the nodes' data survives their pods.
func persistentCondition(rc *cachev1.RedisCluster) *metav1.Condition {
	if rc.Spec.Storage != nil {
		return condition(cachev1.ConditionPersistent, metav1.ConditionTrue, cachev1.ReasonPersistentVolumeClaims,
			"Each Redis node keeps its data on its own PersistentVolumeClaim")
	}
	return condition(cachev1.ConditionPersistent, metav1.ConditionFalse, cachev1.ReasonEmptyDir,
		"Data lives in emptyDir volumes and is lost when a pod is deleted or moves; set spec.storage to keep it")
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
		return condition(cachev1.ConditionResilient, metav1.ConditionFalse, cachev1.ReasonNodesShared, risk.Message)
	}
	return condition(cachev1.ConditionResilient, metav1.ConditionTrue, cachev1.ReasonSpreadOverNodes,
		"Losing any one node keeps every shard's data on another node")
}

// dataLostCondition says what this reconcile lost, in either mode (a promotion of a node holding
// no data, shards given their slots again empty); nil when it lost nothing: the
// condition keeps what it said of an earlier loss.
func dataLostCondition(state *reconcileState) *metav1.Condition {
	if state.lost == "" {
		return nil
	}
	return condition(cachev1.ConditionDataLost, metav1.ConditionTrue, cachev1.ReasonNodesRestartedWithoutData, state.lost)
}

// stsObserved is true when the StatefulSet controller has seen the StatefulSet's current spec,
// so that its status counts describe it.
func stsObserved(sts *appsv1.StatefulSet) bool {
	return sts != nil && sts.Status.ObservedGeneration >= sts.Generation
}

// rolledOut is true when every pod of the StatefulSet runs its current template.
func rolledOut(sts *appsv1.StatefulSet) bool {
	if !stsObserved(sts) {
		return false
	}
	s := sts.Status
	return s.UpdatedReplicas >= ptr.Deref(sts.Spec.Replicas, 1) && s.CurrentRevision == s.UpdateRevision
}

func condition(condType string, status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
	return &metav1.Condition{Type: condType, Status: status, Reason: reason, Message: msg}
}

// setCondition sets c, when not nil, at the RedisCluster's generation.
func setCondition(rc *cachev1.RedisCluster, c *metav1.Condition) {
	if c == nil {
		return
	}
	c.ObservedGeneration = rc.Generation
	meta.SetStatusCondition(&rc.Status.Conditions, *c)
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
