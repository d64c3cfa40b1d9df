package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// DefaultUnreachableTimeout is how long a primary may not answer before a replica replaces it.
const DefaultUnreachableTimeout = 5 * time.Second

// maxSwitchoverPause bounds how long writes are held on the old primary during a switchover.
const maxSwitchoverPause = 5 * time.Second

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete

// reconcileTopology makes the Redis nodes one primary and its replicas: it observes every pod's
// Redis, decides (internal/topology), fails over when the primary is gone, moves the primary off
// a pod that is going away, replaces outdated pods replicas first, and labels the pods so that
// the Services follow the primary.
func (r *RedisClusterReconciler) reconcileTopology(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(rc.Namespace), client.MatchingLabels(resources.SelectorLabels(rc))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	state.pods = pods.Items
	members := membersOf(pods.Items)
	if len(members) == 0 {
		return nil
	}
	exec := topology.Executor{Dial: r.Dial(state.creds.password)}
	observed := topology.Observe(ctx, exec.Dial, members)
	if r.rotatePasswords(ctx, rc, state, observed) {
		observed = topology.Observe(ctx, exec.Dial, members)
	}
	state.observed = observed
	for _, o := range observed {
		if errors.Is(o.Err, redis.ErrAuth) {
			// A node we cannot log in to is neither up nor down: decide nothing on half a view.
			state.authErr = fmt.Errorf("redis on %s refused the password from Secret %s: %w", o.Name, passwordSecretName(rc), o.Err)
			r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventAuthenticationFailed, "Connect", "%s", state.authErr.Error())
			return nil
		}
	}

	current := rc.Status.Primary
	answered := false
	for _, o := range observed {
		answered = answered || (o.Name == current && o.Reachable())
	}
	downFor := r.clusterState(rc).downtime.Observe(current, answered, time.Now())
	plan := topology.Decide(observed, current, downFor, topology.Policy{FailoverTimeout: unreachableTimeout(rc)})
	state.plan = plan
	if plan.Primary == "" {
		return nil
	}

	if plan.Promote || len(plan.Repoint) > 0 {
		if plan.Failover() {
			if err := r.announce(ctx, rc, state, cachev1.ReasonFailover, plan.Reason); err != nil {
				return err
			}
		}
		steps, err := exec.Apply(ctx, plan, observed)
		r.recordSteps(rc, steps)
		if err != nil {
			if promoted(steps, plan.Primary) {
				// The promotion stands even if repointing a replica failed: record it.
				rc.Status.Primary = plan.Primary
			}
			return err
		}
		if plan.Failover() {
			r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventFailedOver, "Failover",
				"%s replaced %s as primary: %s", plan.Primary, plan.Previous, plan.Reason)
			setCondition(rc, cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
				fmt.Sprintf("%s replaced %s as primary", plan.Primary, plan.Previous))
		}
	}
	rc.Status.Primary = plan.Primary
	state.topologyChanged = plan.Promote || len(plan.Repoint) > 0

	if !state.topologyChanged && plan.Wait == 0 {
		if err := r.moveOrRollPods(ctx, rc, state, exec); err != nil {
			return err
		}
	}
	return r.labelRoles(ctx, rc, state)
}

// rotatePasswords gives the current password to the nodes that refuse it but take the previous
// one: the password Secret changed under running nodes. The change is live (CONFIG SET), so no
// pod restarts for it, and a node that restarts reads the new password file. It says whether it
// changed a node.
func (r *RedisClusterReconciler) rotatePasswords(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, observed []topology.Observed) bool {
	if state.creds.previous == "" {
		return false
	}
	previous := r.Dial(state.creds.previous)
	rotated := false
	for _, o := range observed {
		if !errors.Is(o.Err, redis.ErrAuth) {
			continue
		}
		n := previous(o.Addr)
		if _, err := n.Replication(ctx); err == nil {
			if err := n.SetPassword(ctx, state.creds.password); err == nil {
				rotated = true
				r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventPasswordChanged, "Rotate",
					"%s now takes the password from Secret %s", o.Name, passwordSecretName(rc))
			}
		}
		n.Close()
	}
	return rotated
}

// moveOrRollPods does at most one disruptive step per reconcile, and only when every node
// serves: a switchover off a pod that scale-in removes, or the replacement of one outdated pod,
// replicas first, the primary after a switchover.
func (r *RedisClusterReconciler) moveOrRollPods(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, exec topology.Executor) error {
	if !allServing(state.observed, rc.Status.Primary) {
		return nil
	}
	for _, p := range state.pods {
		if p.DeletionTimestamp != nil {
			// A pod is still going away (its Redis may answer a little longer): one step at a time.
			return nil
		}
	}
	primary := findObserved(state.observed, rc.Status.Primary)
	if primary.Ordinal >= int(rc.Spec.Replicas) {
		target, ok := bestReplica(state.observed, primary, func(o topology.Observed) bool { return o.Ordinal < int(rc.Spec.Replicas) })
		if !ok {
			return nil
		}
		return r.switchover(ctx, rc, state, exec, primary, target,
			fmt.Sprintf("scale-in to %d removes %s", rc.Spec.Replicas, primary.Name))
	}

	sts := state.statefulSet
	// Until the StatefulSet controller has seen the current template, its updateRevision is the
	// old one, and a pod it just recreated would look outdated.
	if !observed(sts) || sts.Status.UpdateRevision == "" || len(state.pods) != int(rc.Spec.Replicas) || state.changed {
		return nil
	}
	outdated := map[string]bool{}
	for _, p := range state.pods {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
			outdated[p.Name] = true
		}
	}
	if len(outdated) == 0 {
		return nil
	}
	// Replicas first, highest ordinal first.
	for i := len(state.observed) - 1; i >= 0; i-- {
		o := state.observed[i]
		if o.Name != primary.Name && outdated[o.Name] {
			return r.replacePod(ctx, rc, state, o.Name, "replica")
		}
	}
	// Only the primary is outdated: hand its role to an up-to-date replica, then replace it.
	target, ok := bestReplica(state.observed, primary, func(o topology.Observed) bool { return !outdated[o.Name] })
	if !ok {
		return r.replacePod(ctx, rc, state, primary.Name, "the only node; writes pause until it is back")
	}
	return r.switchover(ctx, rc, state, exec, primary, target, "rolling out the new spec, replicas are done")
}

func (r *RedisClusterReconciler) switchover(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState,
	exec topology.Executor, from, to topology.Observed, why string) error {
	msg := fmt.Sprintf("switching the primary from %s to %s: %s", from.Name, to.Name, why)
	if err := r.announce(ctx, rc, state, cachev1.ReasonSwitchover, msg); err != nil {
		return err
	}
	steps, err := exec.Switchover(ctx, from, to, state.observed, maxSwitchoverPause)
	r.recordSteps(rc, steps)
	if err != nil {
		return fmt.Errorf("switchover from %s to %s: %w", from.Name, to.Name, err)
	}
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventSwitchedOver, "Switchover", "%s", strings.ToUpper(msg[:1])+msg[1:])
	setCondition(rc, cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
		fmt.Sprintf("%s replaced %s as primary", to.Name, from.Name))
	rc.Status.Primary = to.Name
	state.topologyChanged = true
	// The labels follow on the next reconcile, from what the nodes then say.
	return nil
}

func (r *RedisClusterReconciler) replacePod(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, name, role string) error {
	for i := range state.pods {
		pod := &state.pods[i]
		if pod.Name != name {
			continue
		}
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replacing pod %s: %w", name, err)
		}
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventReplacingPod, "RollOut",
			"Replacing pod %s (%s) to roll out the current spec", name, role)
		state.topologyChanged = true
	}
	return nil
}

// announce sets FailingOver before a change of primary and writes it at once, so that the user
// sees it while it happens.
func (r *RedisClusterReconciler) announce(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, reason, msg string) error {
	before := rc.DeepCopy()
	setCondition(rc, cachev1.ConditionFailingOver, metav1.ConditionTrue, reason, msg)
	if err := r.patchStatus(ctx, before, rc); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Changing the primary", "reason", reason, "detail", msg)
	return nil
}

// stepEvents are the Event reasons of the topology's steps.
var stepEvents = map[topology.Action]string{
	topology.ActionPromoted:  cachev1.EventPromoted,
	topology.ActionRepointed: cachev1.EventRepointed,
	topology.ActionPaused:    cachev1.EventPaused,
}

func promoted(steps []topology.Step, node string) bool {
	for _, s := range steps {
		if s.Action == topology.ActionPromoted && s.Node == node {
			return true
		}
	}
	return false
}

func (r *RedisClusterReconciler) recordSteps(rc *cachev1.RedisCluster, steps []topology.Step) {
	for _, s := range steps {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, stepEvents[s.Action], "Topology", "%s", s.Message)
	}
}

// labelRoles labels the primary pod primary and each caught-up replica replica, and removes the
// label from every other pod. Removals go first: two pods are never labelled primary.
func (r *RedisClusterReconciler) labelRoles(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	desired := map[string]string{}
	primary := findObserved(state.observed, rc.Status.Primary)
	for _, o := range state.observed {
		switch {
		case o.Name == rc.Status.Primary && o.Reachable() && o.Info.Role == redis.RolePrimary:
			desired[o.Name] = resources.RolePrimary
		case o.Name != rc.Status.Primary && o.Reachable() && o.Info.Role == redis.RoleReplica &&
			o.Info.LinkUp && o.Info.PrimaryAddr() == primary.Addr:
			desired[o.Name] = resources.RoleReplica
		}
	}
	var removals, additions []corev1.Pod
	for _, p := range state.pods {
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
		if err := r.Patch(ctx, &p, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// membersOf turns the RedisCluster's pods into topology members, by ordinal.
func membersOf(pods []corev1.Pod) []topology.Member {
	var members []topology.Member
	for _, p := range pods {
		ordinal, ok := resources.PodOrdinal(p.Name)
		if !ok {
			continue
		}
		m := topology.Member{Name: p.Name, Ordinal: ordinal}
		if p.Status.PodIP != "" {
			m.Addr = p.Status.PodIP + ":" + strconv.Itoa(resources.RedisPort)
		}
		members = append(members, m)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Ordinal < members[j].Ordinal })
	return members
}

func findObserved(observed []topology.Observed, name string) topology.Observed {
	for _, o := range observed {
		if o.Name == name {
			return o
		}
	}
	return topology.Observed{}
}

// allServing is true when the primary answers as primary and every other node is its caught-up replica.
func allServing(observed []topology.Observed, primary string) bool {
	p := findObserved(observed, primary)
	if !p.Reachable() || p.Info.Role != redis.RolePrimary {
		return false
	}
	for _, o := range observed {
		if o.Name == primary {
			continue
		}
		if !o.Reachable() || o.Info.Role != redis.RoleReplica || !o.Info.LinkUp || o.Info.PrimaryAddr() != p.Addr {
			return false
		}
	}
	return true
}

// bestReplica is the caught-up replica holding the most data among those ok accepts.
func bestReplica(observed []topology.Observed, primary topology.Observed, ok func(topology.Observed) bool) (topology.Observed, bool) {
	var best topology.Observed
	found := false
	for _, o := range observed {
		if o.Name == primary.Name || !o.Reachable() || !o.Info.LinkUp || !ok(o) {
			continue
		}
		if !found || o.Info.Offset > best.Info.Offset {
			best, found = o, true
		}
	}
	return best, found
}

func unreachableTimeout(rc *cachev1.RedisCluster) time.Duration {
	if f := rc.Spec.Failover; f != nil && f.UnreachableTimeout != nil {
		return f.UnreachableTimeout.Duration
	}
	return DefaultUnreachableTimeout
}

func passwordSecretName(rc *cachev1.RedisCluster) string {
	name, _ := resources.PasswordSource(rc)
	return name
}

// nodeStatuses is what status.nodes says: each node's role and whether it serves. Nothing that
// changes every second (offsets, addresses) goes in, so a steady cluster's status is steady.
func nodeStatuses(observed []topology.Observed, primary string) []cachev1.NodeStatus {
	p := findObserved(observed, primary)
	var out []cachev1.NodeStatus
	for _, o := range observed {
		n := cachev1.NodeStatus{Name: o.Name, Role: cachev1.RoleUnknown, State: cachev1.NodeUnreachable}
		if o.Reachable() {
			n.State = cachev1.NodeSyncing
			switch o.Info.Role {
			case redis.RolePrimary:
				n.Role = cachev1.RolePrimary
				if o.Name == primary {
					n.State = cachev1.NodeServing
				}
			case redis.RoleReplica:
				n.Role = cachev1.RoleReplica
				if o.Info.LinkUp && o.Info.PrimaryAddr() == p.Addr {
					n.State = cachev1.NodeServing
				}
			}
		}
		out = append(out, n)
	}
	return out
}
