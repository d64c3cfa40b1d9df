// Package replication is replication mode: one primary and its replicas in one StatefulSet,
// whose nodes it keeps one primary and its replicas. Its phases are functions of a
// scope.Cluster and its own State and Memory: apply the StatefulSet, observe the nodes, fail
// over, take one rollout step, label the pods; internal/topology decides each and carries it
// out, and these phases turn the steps into Events and the outcome into the status (Status).
// None of them reads Redis's own fields: they ask the View.
package replication

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

// State is what a reconcile in replication mode learns and does.
type State struct {
	StatefulSet *appsv1.StatefulSet
	// View is what the Redis nodes said, judged against the primary: the one source of who
	// serves. Its Primary is the primary to record.
	View topology.View
	// Stats is what the nodes said of their load, when this reconcile asked.
	Stats map[string]topology.Stats
	// Round is the failover decision and what it did.
	Round topology.Round
	// Move is the change of primary this reconcile started (failover or switchover).
	Move *Move
	// PrimaryMoved is true when this reconcile made another node primary: View was observed
	// before, and no longer says who serves.
	PrimaryMoved bool
	// Rolled is true when this reconcile replaced a pod or switched the primary over.
	Rolled bool
}

// NewState is the state of a reconcile of rc before it observed anything: the primary is the
// recorded one.
func NewState(rc *cachev1.RedisCluster) State {
	return State{View: topology.View{Primary: rc.Status.Primary}}
}

// Serves is true when node serves as the primary: a restore into it is done.
func (s *State) Serves(node string) bool {
	o, ok := s.View.Find(node)
	return ok && s.View.Primary == node && o.IsPrimary()
}

// Observed is true when this reconcile asked the nodes.
func (s *State) Observed() bool { return len(s.View.Nodes) > 0 }

// Memory is what replication mode remembers of one RedisCluster between reconciles: how long
// its primary has not answered (the failure detector).
type Memory struct {
	Downtime topology.Downtime
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete

// Nodes asks each pod's Redis (the pods are listed) what it is, and reads their load when due.
func Nodes(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	if len(c.Members) > 0 {
		s.View = observe(ctx, c, s)
		s.Stats = metrics.ReadStats(ctx, c.Metrics, c.Dial, []topology.View{s.View})
	}
	return nil
}

// Observe asks every node again what it is, once a phase changed what they take.
func Observe(ctx context.Context, c *scope.Cluster, s *State) {
	s.View = observe(ctx, c, s)
}

// observe asks every node what it is, judged against the recorded primary; a replica vouches for
// a primary the operator cannot reach when it heard from it within its ping period.
func observe(ctx context.Context, c *scope.Cluster, s *State) topology.View {
	rc := c.RC
	v := topology.Observe(ctx, c.Dial, c.Members, s.View.Primary)
	// One second of slack over the ping period: Redis counts whole seconds, from a clock it
	// updates ten times a second, so a live primary's replica may say 2 with pings every second;
	// a check without a witness takes the primary out of its Service. (With the period alone,
	// the partition suite's operator-cut scenario twice showed 1.3 s without an acknowledged
	// write under minReplicasToWrite; with the slack, 0 s in the one run since.)
	v.HeardWithin = resources.ReplicaPingPeriod(rc) + 1
	return v
}

// Failover chooses the primary and makes every other node its replica: bootstrap,
// and failover when the primary is gone (internal/topology decides; this records it).
func Failover(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	rc := c.RC
	if len(s.View.Nodes) == 0 {
		return nil
	}
	exec := topology.Executor{Dial: c.Dial}
	policy := topology.Policy{FailoverTimeout: unreachableTimeout(rc)}
	if c.Restore != nil && c.Restore.CompletedAt == nil {
		policy.Bootstrap = resources.FirstNodeName(rc, 0)
	}
	announce := func(plan topology.Plan) error {
		// Best effort, and bounded: Redis needs a primary even when the API server cannot
		// write (its etcd down). The status says it at the end of this reconcile, or of a
		// later one once the API server answers.
		actx, cancel := context.WithTimeout(ctx, announceTimeout)
		defer cancel()
		move := &Move{Reason: cachev1.ReasonFailover, Message: plan.Reason, From: plan.Previous, To: plan.Primary}
		if err := announce(actx, c, s, move); err != nil {
			log.FromContext(ctx).Info("Failing over without having written the FailingOver condition first", "error", err.Error())
		}
		return nil
	}
	round, err := exec.Reconcile(ctx, s.View, &m.Downtime, policy, announce)
	s.Round = round
	recordSteps(c, round.Steps)
	if round.Plan.Lost > 0 && round.Primary() == round.Plan.Primary {
		c.Lost = lostData(rc, round)
		c.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventDataLost, "Failover", "%s", c.Lost)
		metrics.DataLost(rc)
	}
	// A promotion stands even if repointing a replica failed afterwards: record it.
	primaryChanged(s, round.Primary())
	if err != nil {
		return err
	}
	if s.Move != nil && s.View.Primary == s.Move.To {
		s.Move.Done = true
		c.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventFailedOver, "Failover",
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

// Rollout takes the one disruptive step internal/topology chooses, when the failover
// changed nothing: a switchover off a pod that scale-in removes, or the replacement of an
// outdated pod.
func Rollout(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	rc := c.RC
	// DecideRollout moves a serving node only when every node serves, which an unsettled
	// failover plan never leaves.
	if len(s.View.Nodes) == 0 || s.Round.Changed() {
		return nil
	}
	step := topology.DecideRollout(s.View, rolloutInput(rc, c, s))
	switch step.Action {
	case topology.RolloutSwitchover:
		return switchover(ctx, c, m, s, step)
	case topology.RolloutReplacePod:
		return replacePod(ctx, c, s, step)
	}
	return nil
}

// rolloutInput is what the rollout decision needs to know of the pods and the StatefulSet.
func rolloutInput(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) topology.RolloutInput {
	sts := s.StatefulSet
	in := topology.RolloutInput{
		Replicas: int(rc.Spec.Replicas),
		// Until the StatefulSet controller has seen the current template, its updateRevision is
		// the old one, and a pod it just recreated would look outdated.
		RevisionKnown: scope.StatefulSetObserved(sts) && sts.Status.UpdateRevision != "" &&
			len(c.Pods) == int(rc.Spec.Replicas) && !c.WroteStatefulSet(),
	}
	for _, p := range c.Pods {
		in.Pods = append(in.Pods, topology.Pod{
			Name:        p.Name,
			Outdated:    sts != nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision,
			Terminating: p.DeletionTimestamp != nil,
			Failing:     scope.CrashLoops(p),
		})
	}
	return in
}

func switchover(ctx context.Context, c *scope.Cluster, m *Memory, s *State, step topology.RolloutStep) error {
	from, to := step.From.Name, step.To.Name
	msg := fmt.Sprintf("switching the primary from %s to %s: %s", from, to, step.Reason)
	if err := announce(ctx, c, s, &Move{Reason: cachev1.ReasonSwitchover, Message: msg, From: from, To: to}); err != nil {
		return err
	}
	exec := topology.Executor{Dial: c.Dial}
	steps, err := exec.Switchover(ctx, step.From, step.To, s.View, maxSwitchoverPause)
	recordSteps(c, steps)
	promoted := slices.ContainsFunc(steps, func(s topology.Step) bool { return s.Action == topology.ActionPromoted && s.Node == to })
	if !promoted {
		return fmt.Errorf("switchover from %s to %s: %w", from, to, err)
	}
	// Once the target is promoted the switchover has happened, even if another replica was not
	// repointed yet (it timed out, or its pod is going): the next round repoints it.
	c.Recorder.Eventf(c.RC, nil, corev1.EventTypeNormal, cachev1.EventSwitchedOver, "Switchover", "%s", strings.ToUpper(msg[:1])+msg[1:])
	s.Move.Done = true
	s.Rolled = true
	// What a loss of the new primary loses, until it is seen serving (a switchover off a pod being
	// deleted may be followed at once by the loss of every node: the DataLost report counts on it).
	m.Downtime.Promoted(to, step.To.Info.Keys)
	primaryChanged(s, to)
	if err != nil {
		return fmt.Errorf("after the switchover from %s to %s: %w", from, to, err)
	}
	return nil
}

func replacePod(ctx context.Context, c *scope.Cluster, s *State, step topology.RolloutStep) error {
	pod := scope.PodByName(c.Pods, step.Pod)
	if pod == nil {
		return nil
	}
	if err := c.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return outcome.Fail(cachev1.ReasonApplyFailed, fmt.Errorf("replacing pod %s: %w", pod.Name, err))
	}
	c.Recorder.Eventf(c.RC, nil, corev1.EventTypeNormal, cachev1.EventReplacingPod, "RollOut",
		"Replacing pod %s (%s) to roll out the current spec", pod.Name, step.Role)
	s.Rolled = true
	return nil
}

// primaryChanged records primary as the primary of this reconcile.
func primaryChanged(s *State, primary string) {
	if primary != s.View.Primary && primary != "" {
		s.PrimaryMoved = true
	}
	s.View = s.View.WithPrimary(primary)
}

// announce records a change of primary before it starts and writes FailingOver at once, so
// that the user sees it while it happens.
func announce(ctx context.Context, c *scope.Cluster, s *State, move *Move) error {
	move.Started = time.Now()
	s.Move = move
	scope.SetCondition(c.RC, failingOverCondition(c.RC, s))
	if err := c.WriteStatus(ctx); err != nil {
		return outcome.Fail(cachev1.ReasonApplyFailed, err)
	}
	log.FromContext(ctx).Info("Changing the primary", "reason", move.Reason, "from", move.From, "to", move.To, "detail", move.Message)
	return nil
}

// stepEvents are the Event reasons of the topology's steps.
var stepEvents = map[topology.Action]string{
	topology.ActionPromoted:  cachev1.EventPromoted,
	topology.ActionRepointed: cachev1.EventRepointed,
	topology.ActionPaused:    cachev1.EventPaused,
}

func recordSteps(c *scope.Cluster, steps []topology.Step) {
	for _, s := range steps {
		c.Recorder.Eventf(c.RC, nil, corev1.EventTypeNormal, stepEvents[s.Action], "Topology", "%s", s.Message)
	}
}

// RoleLabels labels the primary pod primary and each caught-up replica replica, and
// removes the label from every other pod, so that the Services follow the primary. Removals go
// first: two pods are never labelled primary.
//
// After a change of primary in this reconcile it asks the nodes again: judged against the view
// from before the change, no node serves, and every pod would lose its label (the Services their
// endpoints) until the next reconcile, which an operator stopping right after a switchover (its
// pod evicted by the same drain) never ran: 3 s without a primary in the e2e drain.
func RoleLabels(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	view := s.View
	if s.PrimaryMoved {
		view = observe(ctx, c, s)
	}
	desired := desiredRoleLabels(view)
	var removals, additions []corev1.Pod
	for _, p := range c.Pods {
		have, want := p.Labels[resources.LabelRole], desired[p.Name]
		switch {
		case have == want:
		case want == "" || have == resources.RolePrimary:
			removals = append(removals, p)
		default:
			additions = append(additions, p)
		}
	}
	if labelsNewPrimary(additions, desired) {
		recordPrimary(ctx, c, s)
	}
	for _, p := range append(removals, additions...) {
		value := "null"
		if want := desired[p.Name]; want != "" {
			value = strconv.Quote(want)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, resources.LabelRole, value)
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		if err := c.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// labelsNewPrimary is whether additions label a pod primary.
func labelsNewPrimary(additions []corev1.Pod, desired map[string]string) bool {
	return slices.ContainsFunc(additions, func(p corev1.Pod) bool { return desired[p.Name] == resources.RolePrimary })
}

// recordPrimary writes the new primary to the status before its pod is labelled primary: the
// status names a primary before any Service sends clients to it, so a client never writes to a
// node that is not the primary of record (the node-loss e2e tests check it, polling the status).
// Written at the end of the reconcile only, it came after the labels, and after a round of
// dials that waits on a node that is gone: the clients wrote to the new primary for a fraction
// of a second the status did not name. Best effort and bounded, as the announcement of the move
// is: without the API server the labels cannot move either.
func recordPrimary(ctx context.Context, c *scope.Cluster, s *State) {
	if c.RC.Status.Primary == s.View.Primary {
		return
	}
	c.RC.Status.Primary = s.View.Primary
	wctx, cancel := context.WithTimeout(ctx, announceTimeout)
	defer cancel()
	if err := c.WriteStatus(wctx); err != nil {
		log.FromContext(ctx).Info("Labelling the new primary before the status names it", "primary", s.View.Primary, "error", err.Error())
	}
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

// Move is a change of primary: announced (FailingOver True) before it starts, done once the
// new primary took over.
type Move struct {
	// Reason is ReasonFailover or ReasonSwitchover.
	Reason, Message string
	From, To        string
	Done            bool
	// Started is when it was decided.
	Started time.Time
}
