package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// DefaultUnreachableTimeout is how long a primary may not answer before a replica replaces it.
const DefaultUnreachableTimeout = 5 * time.Second

// announceTimeout bounds the status write that announces a failover: the failover goes on
// without it.
const announceTimeout = time.Second

// maxSwitchoverPause bounds how long writes are held on the old primary during a switchover.
const maxSwitchoverPause = 5 * time.Second

// replicationState is what a reconcile in replication mode learns and does.
type replicationState struct {
	statefulSet *appsv1.StatefulSet
	// view is what the Redis nodes said, judged against the primary: the one source of who
	// serves. Its Primary is the primary to record.
	view topology.View
	// stats is what the nodes said of their load, when this reconcile asked (statsInterval).
	stats map[string]topology.Stats
	// round is the failover decision and what it did.
	round topology.Round
	// move is the change of primary this reconcile started (failover or switchover).
	move *primaryMove
	// primaryMoved is true when this reconcile made another node primary: view was observed
	// before, and no longer says who serves.
	primaryMoved bool
}

// The phases in this file act on what internal/topology decides: observe the nodes, fail over,
// take one rollout step, label the pods. None of them reads Redis's own fields: they ask the
// View.

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete

// observeNodes lists the RedisCluster's pods and asks each one's Redis what it is.
func (r *RedisClusterReconciler) observeNodes(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	if err := r.listPods(ctx, rc, state); err != nil {
		return err
	}
	if len(state.Members) > 0 {
		state.replication.view = observeReplication(ctx, rc, state)
		state.replication.stats = metrics.ReadStats(ctx, &state.kept.metrics, state.Dial, []topology.View{state.replication.view})
	}
	return nil
}

// observeReplication asks every node what it is, judged against the recorded primary; a replica
// vouches for a primary the operator cannot reach when it heard from it within its ping period.
func observeReplication(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) topology.View {
	v := topology.Observe(ctx, state.Dial, state.Members, state.replication.view.Primary)
	// One second of slack over the ping period: Redis counts whole seconds, from a clock it
	// updates ten times a second, so a live primary's replica may say 2 with pings every second;
	// a check without a witness takes the primary out of its Service. (With the period alone,
	// the partition suite's operator-cut scenario twice showed 1.3 s without an acknowledged
	// write under minReplicasToWrite; with the slack, 0 s in the one run since.)
	v.HeardWithin = resources.ReplicaPingPeriod(rc) + 1
	return v
}

// reconcileFailover chooses the primary and makes every other node its replica: bootstrap,
// and failover when the primary is gone (internal/topology decides; this records it).
func (r *RedisClusterReconciler) reconcileFailover(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	if len(state.replication.view.Nodes) == 0 {
		return nil
	}
	exec := topology.Executor{Dial: state.Dial}
	policy := topology.Policy{FailoverTimeout: unreachableTimeout(rc)}
	if state.Restore != nil && state.Restore.CompletedAt == nil {
		policy.Bootstrap = restoredNode(rc)
	}
	announce := func(plan topology.Plan) error {
		// Best effort, and bounded: Redis needs a primary even when the API server cannot
		// write (its etcd down). The status says it at the end of this reconcile, or of a
		// later one once the API server answers.
		actx, cancel := context.WithTimeout(ctx, announceTimeout)
		defer cancel()
		move := &primaryMove{reason: cachev1.ReasonFailover, message: plan.Reason, from: plan.Previous, to: plan.Primary}
		if err := r.announce(actx, rc, state, move); err != nil {
			log.FromContext(ctx).Info("Failing over without having written the FailingOver condition first", "error", err.Error())
		}
		return nil
	}
	round, err := exec.Reconcile(ctx, state.replication.view, &r.clusterState(rc).downtime, policy, announce)
	state.replication.round = round
	r.recordSteps(rc, round.Steps)
	if round.Plan.Lost > 0 && round.Primary() == round.Plan.Primary {
		state.Lost = lostData(rc, round)
		r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventDataLost, "Failover", "%s", state.Lost)
		metrics.DataLost(rc)
	}
	// A promotion stands even if repointing a replica failed afterwards: record it.
	primaryChanged(state, round.Primary())
	if err != nil {
		return err
	}
	if state.replication.move != nil && state.replication.view.Primary == state.replication.move.to {
		state.replication.move.done = true
		r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventFailedOver, "Failover",
			"%s replaced %s as primary: %s", round.Plan.Primary, round.Plan.Previous, round.Plan.Reason)
	}
	return nil
}

// lostData says, for the DataLost condition and Event, what a round that promoted a node
// holding no data lost, and why no node held it.
func lostData(rc *cachev1.RedisCluster, round topology.Round) string {
	why := "Without spec.storage a node keeps nothing across a restart: a RedisCluster with spec.storage keeps each node's data on a volume of its own."
	if rc.Spec.Storage != nil {
		why = "Their volumes held none of it."
	}
	return fmt.Sprintf("%s was made primary holding no data: every node that answered had restarted without its data, and the %d keys %s held as primary are lost. %s",
		round.Plan.Primary, round.Plan.Lost, round.View.Primary, why)
}

// reconcileRollout takes the one disruptive step internal/topology chooses, when the failover
// changed nothing: a switchover off a pod that scale-in removes, or the replacement of an
// outdated pod.
func (r *RedisClusterReconciler) reconcileRollout(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	// DecideRollout moves a serving node only when every node serves, which an unsettled
	// failover plan never leaves.
	if len(state.replication.view.Nodes) == 0 || state.replication.round.Changed() {
		return nil
	}
	step := topology.DecideRollout(state.replication.view, rolloutInput(rc, state))
	switch step.Action {
	case topology.RolloutSwitchover:
		return r.switchover(ctx, rc, state, step)
	case topology.RolloutReplacePod:
		return r.replacePod(ctx, rc, state, step)
	}
	return nil
}

// rolloutInput is what the rollout decision needs to know of the pods and the StatefulSet.
func rolloutInput(rc *cachev1.RedisCluster, state *reconcileState) topology.RolloutInput {
	sts := state.replication.statefulSet
	in := topology.RolloutInput{
		Replicas: int(rc.Spec.Replicas),
		// Until the StatefulSet controller has seen the current template, its updateRevision is
		// the old one, and a pod it just recreated would look outdated.
		RevisionKnown: scope.StatefulSetObserved(sts) && sts.Status.UpdateRevision != "" &&
			len(state.Pods) == int(rc.Spec.Replicas) && !state.WroteStatefulSet(),
	}
	for _, p := range state.Pods {
		in.Pods = append(in.Pods, topology.Pod{
			Name:        p.Name,
			Outdated:    sts != nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision,
			Terminating: p.DeletionTimestamp != nil,
			Failing:     scope.CrashLoops(p),
		})
	}
	return in
}

func (r *RedisClusterReconciler) switchover(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, step topology.RolloutStep) error {
	from, to := step.From.Name, step.To.Name
	msg := fmt.Sprintf("switching the primary from %s to %s: %s", from, to, step.Reason)
	if err := r.announce(ctx, rc, state, &primaryMove{reason: cachev1.ReasonSwitchover, message: msg, from: from, to: to}); err != nil {
		return err
	}
	exec := topology.Executor{Dial: state.Dial}
	steps, err := exec.Switchover(ctx, step.From, step.To, state.replication.view, maxSwitchoverPause)
	r.recordSteps(rc, steps)
	promoted := slices.ContainsFunc(steps, func(s topology.Step) bool { return s.Action == topology.ActionPromoted && s.Node == to })
	if !promoted {
		return fmt.Errorf("switchover from %s to %s: %w", from, to, err)
	}
	// Once the target is promoted the switchover has happened, even if another replica was not
	// repointed yet (it timed out, or its pod is going): the next round repoints it.
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventSwitchedOver, "Switchover", "%s", strings.ToUpper(msg[:1])+msg[1:])
	state.replication.move.done = true
	state.rolled = true
	// What a loss of the new primary loses, until it is seen serving (a switchover off a pod being
	// deleted may be followed at once by the loss of every node: the DataLost report counts on it).
	r.clusterState(rc).downtime.Promoted(to, step.To.Info.Keys)
	primaryChanged(state, to)
	if err != nil {
		return fmt.Errorf("after the switchover from %s to %s: %w", from, to, err)
	}
	return nil
}

func (r *RedisClusterReconciler) replacePod(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, step topology.RolloutStep) error {
	pod := scope.PodByName(state.Pods, step.Pod)
	if pod == nil {
		return nil
	}
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return outcome.Fail(cachev1.ReasonApplyFailed, fmt.Errorf("replacing pod %s: %w", pod.Name, err))
	}
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventReplacingPod, "RollOut",
		"Replacing pod %s (%s) to roll out the current spec", pod.Name, step.Role)
	state.rolled = true
	return nil
}

// primaryChanged records primary as the primary of this reconcile.
func primaryChanged(state *reconcileState, primary string) {
	if primary != state.replication.view.Primary && primary != "" {
		state.replication.primaryMoved = true
	}
	state.replication.view = state.replication.view.WithPrimary(primary)
}

// announce records a change of primary before it starts and writes FailingOver at once, so
// that the user sees it while it happens.
func (r *RedisClusterReconciler) announce(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, move *primaryMove) error {
	move.started = time.Now()
	state.replication.move = move
	scope.SetCondition(rc, failingOverCondition(rc, state))
	if err := r.patchStatus(ctx, state.written, rc); err != nil {
		return outcome.Fail(cachev1.ReasonApplyFailed, err)
	}
	state.written = rc.DeepCopy()
	log.FromContext(ctx).Info("Changing the primary", "reason", move.reason, "from", move.from, "to", move.to, "detail", move.message)
	return nil
}

// stepEvents are the Event reasons of the topology's steps.
var stepEvents = map[topology.Action]string{
	topology.ActionPromoted:  cachev1.EventPromoted,
	topology.ActionRepointed: cachev1.EventRepointed,
	topology.ActionPaused:    cachev1.EventPaused,
}

func (r *RedisClusterReconciler) recordSteps(rc *cachev1.RedisCluster, steps []topology.Step) {
	for _, s := range steps {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, stepEvents[s.Action], "Topology", "%s", s.Message)
	}
}

// reconcileRoleLabels labels the primary pod primary and each caught-up replica replica, and
// removes the label from every other pod, so that the Services follow the primary. Removals go
// first: two pods are never labelled primary.
//
// After a change of primary in this reconcile it asks the nodes again: judged against the view
// from before the change, no node serves, and every pod would lose its label (the Services their
// endpoints) until the next reconcile, which an operator stopping right after a switchover (its
// pod evicted by the same drain) never ran: 3 s without a primary in the e2e drain.
func (r *RedisClusterReconciler) reconcileRoleLabels(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	view := state.replication.view
	if state.replication.primaryMoved {
		view = observeReplication(ctx, rc, state)
	}
	desired := desiredRoleLabels(view)
	var removals, additions []corev1.Pod
	for _, p := range state.Pods {
		have, want := p.Labels[resources.LabelRole], desired[p.Name]
		switch {
		case have == want:
		case want == "" || have == resources.RolePrimary:
			removals = append(removals, p)
		default:
			additions = append(additions, p)
		}
	}
	for _, p := range append(removals, additions...) {
		value := "null"
		if want := desired[p.Name]; want != "" {
			value = strconv.Quote(want)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, resources.LabelRole, value)
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		if err := r.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// desiredRoleLabels is the role label each serving node's pod should carry.
func desiredRoleLabels(v topology.View) map[string]string {
	desired := map[string]string{}
	for _, o := range v.Nodes {
		switch {
		case !v.Serving(o):
		case o.Name == v.Primary:
			desired[o.Name] = resources.RolePrimary
		default:
			desired[o.Name] = resources.RoleReplica
		}
	}
	return desired
}

func unreachableTimeout(rc *cachev1.RedisCluster) time.Duration {
	if f := rc.Spec.Failover; f != nil && f.UnreachableTimeout != nil {
		return f.UnreachableTimeout.Duration
	}
	return DefaultUnreachableTimeout
}

// primaryMove is a change of primary: announced (FailingOver True) before it starts, done once
// the new primary took over.
type primaryMove struct {
	reason, message string
	from, to        string
	done            bool
	// started is when it was decided.
	started time.Time
}
