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
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/placement"
	"github.com/org/redis-operator/internal/resources"
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
	scope.SetCondition(rc, redisbackup.RestoredCondition(rc, &state.Cluster))
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
