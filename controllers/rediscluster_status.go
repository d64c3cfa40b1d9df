package controllers

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
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
	if rc.Spec.Expose == nil {
		meta.RemoveStatusCondition(&rc.Status.Conditions, cachev1.ConditionExposed)
	} else {
		scope.SetCondition(rc, exposedCondition(rc, state.Outside, state.creds.Certificate()))
	}
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

// exposedCondition says whether clients outside can use every address spec.expose gives them:
// each known, and with spec.tls each one tls.crt is valid for (auth.Uncovered keeps the rule:
// the host a client dials, IP or name, is what it verifies). nil, keeping what the condition
// said, when no phase read the external Services in this reconcile, or with spec.tls when the
// TLS Secret was not read.
func exposedCondition(rc *cachev1.RedisCluster, outside []resources.OutsideAddress, cert *x509.Certificate) *metav1.Condition {
	if outside == nil || (rc.Spec.TLS != nil && cert == nil) {
		return nil
	}
	var pending, anyNode, hosts, dialled []string
	for _, a := range outside {
		switch {
		case a.AnyNode:
			anyNode = append(anyNode, a.Service)
		case a.Host == "":
			pending = append(pending, a.Service)
		default:
			if !slices.Contains(hosts, a.Host) {
				hosts = append(hosts, a.Host)
			}
			dialled = append(dialled, a.Service+" at "+a.Host)
		}
	}
	if len(pending) > 0 {
		return scope.Condition(cachev1.ConditionExposed, metav1.ConditionFalse, cachev1.ReasonAddressPending,
			"No outside address yet for "+listed(pending)+": the load balancer gives one (for a NodePort in cluster mode, once the node port is allocated and the pod placed on a Kubernetes node; a load balancer that gives only a name cannot be announced)")
	}
	if cert != nil {
		if missing := auth.Uncovered(cert, hosts); len(missing) > 0 {
			return scope.Condition(cachev1.ConditionExposed, metav1.ConditionFalse, cachev1.ReasonCertificateMissesAddress,
				fmt.Sprintf("tls.crt of Secret %s is not valid for %s, which clients outside dial: a client that verifies the address it dials refuses it there. Add them to its subject alternative names (addresses as IP SANs), or have the clients verify a name it holds",
					rc.Spec.TLS.SecretName, listed(missing)))
		}
	}
	var parts []string
	if len(dialled) > 0 {
		parts = append(parts, listed(dialled))
	}
	if len(anyNode) > 0 {
		parts = append(parts, listed(anyNode)+" at every Kubernetes node's address, on its node port")
	}
	msg := "Clients outside dial " + strings.Join(parts, "; ")
	if cert != nil && len(hosts) > 0 {
		msg += "; tls.crt is valid for each address"
	}
	return scope.Condition(cachev1.ConditionExposed, metav1.ConditionTrue, cachev1.ReasonAddressesAssigned, msg)
}

// listed lists items for a message, the first eight and how many more: a cluster of many nodes
// has as many Services.
func listed(items []string) string {
	const shown = 8
	if len(items) <= shown {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:shown], ", "), len(items)-shown)
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
	// A certificate that clients outside would refuse, when it becomes so (or misses others).
	was = meta.FindStatusCondition(before.Status.Conditions, cachev1.ConditionExposed)
	now = meta.FindStatusCondition(after.Status.Conditions, cachev1.ConditionExposed)
	if now != nil && now.Reason == cachev1.ReasonCertificateMissesAddress && (was == nil || was.Reason != now.Reason || was.Message != now.Message) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, cachev1.EventCertificateMissesAddress, "Observe", "%s", now.Message)
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
