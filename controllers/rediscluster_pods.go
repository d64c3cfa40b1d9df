package controllers

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// The RedisCluster's pods, in both modes: which are its own, where their Redis nodes are and how
// to reach them, and which fail to start.

// podOwnerIndex indexes the cached pods by the RedisCluster they run (their instance label):
// a label selector would test every pod of the namespace, every second, for every RedisCluster.
const podOwnerIndex = "redisCluster"

func indexPodOwner(obj client.Object) []string {
	if name := obj.GetLabels()[resources.LabelInstance]; name != "" {
		return []string{name}
	}
	return nil
}

// listPods records the RedisCluster's pods, which of them fail to start, their addresses, and
// the dialer that reaches them (both modes).
func listPods(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	pods := &corev1.PodList{}
	// The cache's own pods, not copies: every phase only reads them (writes go through new
	// objects), and copying every pod every second was a tenth of the health check's CPU.
	if err := state.Client.List(ctx, pods, client.InNamespace(rc.Namespace), client.MatchingFields{podOwnerIndex: rc.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	state.Pods = pods.Items
	state.Exited = exitedNode(pods.Items)
	stranded, err := strandedPods(ctx, state, pods.Items)
	if err != nil {
		return err
	}
	state.Stranded = stranded
	state.Members = membersOf(pods.Items)
	state.Dial = dialer(state)
	return nil
}

// dialer reaches the members with the current password (and TLS): through the held connections, which
// it keeps to exactly the members, or through connections of their own without them.
func dialer(state *reconcileState) topology.Dialer {
	held := state.settings.Connections
	if held == nil {
		return state.DialAs(state.creds.Login())
	}
	var addrs []string
	for _, m := range state.Members {
		if m.Addr != "" {
			addrs = append(addrs, m.Addr)
		}
	}
	return held.Hold(client.ObjectKeyFromObject(state.RC), state.creds.Login(), addrs)
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// selectedNode is the annotation the scheduler puts on a claim of a WaitForFirstConsumer class:
// the node of the first pod that used it, where a local volume was made.
const selectedNode = "volume.kubernetes.io/selected-node"

// nodeState is what the pods' status says of a node: ready, and cordoned (unschedulable).
type nodeState struct{ ready, cordoned bool }

// strandedPods are the pods on nodes that are not ready (or no longer exist), read from the
// cache of nodes, by pod name, and the pods not yet scheduled whose claim's volume is on such
// a node or on a cordoned one.
func strandedPods(ctx context.Context, state *reconcileState, pods []corev1.Pod) ([]scope.StrandedPod, error) {
	if !state.settings.NodesReadable {
		return nil, nil
	}
	var out []scope.StrandedPod
	nodes := map[string]nodeState{}
	nodeNamed := func(name string) (nodeState, error) {
		if seen, ok := nodes[name]; ok {
			return seen, nil
		}
		node := &corev1.Node{}
		err := state.Client.Get(ctx, client.ObjectKey{Name: name}, node)
		if client.IgnoreNotFound(err) != nil {
			return nodeState{}, fmt.Errorf("reading node %s: %w", name, err)
		}
		nodes[name] = nodeState{ready: err == nil && nodeReady(node), cordoned: err == nil && node.Spec.Unschedulable}
		return nodes[name], nil
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			waits, err := waitsForVolume(ctx, state.APIReader, &p, nodeNamed)
			if err != nil {
				return nil, err
			}
			if waits != nil {
				out = append(out, *waits)
			}
			continue
		}
		node, err := nodeNamed(p.Spec.NodeName)
		if err != nil {
			return nil, err
		}
		if !node.ready {
			out = append(out, scope.StrandedPod{Pod: p.Name, Node: p.Spec.NodeName, Terminating: p.DeletionTimestamp != nil})
		}
	}
	return out, nil
}

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// waitsForVolume says whether a pod the scheduler could not place uses a claim whose volume is
// on a node that is not ready or is cordoned. The claim is read only then (uncached: the
// operator does not watch claims).
func waitsForVolume(ctx context.Context, apiReader client.Reader, p *corev1.Pod, nodeNamed func(string) (nodeState, error)) (*scope.StrandedPod, error) {
	if !unschedulable(p) {
		return nil, nil
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		claim := &corev1.PersistentVolumeClaim{}
		err := apiReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, claim)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading claim %s of pod %s: %w", v.PersistentVolumeClaim.ClaimName, p.Name, err)
		}
		name := claim.Annotations[selectedNode]
		if name == "" || claim.Status.Phase != corev1.ClaimBound {
			continue
		}
		node, err := nodeNamed(name)
		if err != nil {
			return nil, err
		}
		if !node.ready || node.cordoned {
			return &scope.StrandedPod{Pod: p.Name, Node: name, Claim: claim.Name, Cordoned: node.ready && node.cordoned}, nil
		}
	}
	return nil, nil
}

// unschedulable is true when the scheduler tried the pod and found no node for it.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// exitedNode says, for the first pod whose container waits out a restart back-off
// (CrashLoopBackOff), why its Redis is down: killed (by a signal, or out of memory: the
// container's termination reason, exit code, restarts and back-off), or refusing to start (the
// end of what Redis wrote, which the kubelet kept as the termination message). Nil when every
// container runs.
func exitedNode(pods []corev1.Pod) *scope.NodeExit {
	sorted := append([]corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, p := range sorted {
		c, ok := scope.CrashLoopingContainer(p)
		if !ok {
			continue
		}
		t := c.LastTerminationState.Terminated
		if killed(t) {
			return &scope.NodeExit{Reason: cachev1.ReasonRedisKilled, Message: fmt.Sprintf(
				"Redis on %s was killed (%s, exit code %d) and has restarted %d times; the kubelet starts it again after its restart back-off (%s)",
				p.Name, t.Reason, t.ExitCode, c.RestartCount, backOff(c.State.Waiting.Message))}
		}
		why := "it exits, and is restarted with back-off"
		if t != nil && strings.TrimSpace(t.Message) != "" {
			why = strings.Join(strings.Fields(strings.ReplaceAll(t.Message, "\n", " | ")), " ")
		}
		return &scope.NodeExit{Reason: cachev1.ReasonRedisFailedToStart, Message: fmt.Sprintf("Redis on %s keeps exiting: %s", p.Name, why)}
	}
	return nil
}

// killed is true when the container ended by a signal (exit code 128+n: 137 for SIGKILL) or
// out of memory, rather than by Redis's own exit: what Redis wrote last says nothing of why.
func killed(t *corev1.ContainerStateTerminated) bool {
	return t != nil && (t.Reason == "OOMKilled" || t.Signal != 0 || t.ExitCode > 128)
}

// backOff is the back-off the kubelet states in a waiting container's message ("back-off 40s
// restarting failed container=..."): "back-off 40s".
func backOff(waiting string) string {
	if before, _, ok := strings.Cut(waiting, " restarting"); ok && strings.HasPrefix(before, "back-off") {
		return before
	}
	return "back-off"
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
