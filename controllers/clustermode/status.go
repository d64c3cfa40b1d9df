package clustermode

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Status sets the status fields of cluster mode (the shards, each node's role), and returns its
// conditions: Ready, Progressing, Degraded and Persistent (the reconciler's status writer sets
// them).
func Status(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) []*metav1.Condition {
	var ready int32
	for _, sts := range s.StatefulSets {
		ready += sts.Status.ReadyReplicas
	}
	rc.Status.ReadyReplicas = ready
	if s.Plan != nil {
		rc.Status.Shards = shardStatuses(rc, *s.Plan)
		rc.Status.Nodes = shardNodeStatuses(s.Members, *s.Plan)
	}
	degraded := shardsDegradedCondition(rc, c, s)
	return []*metav1.Condition{
		scope.PersistentCondition(rc),
		shardsProgressingCondition(rc, c, s),
		degraded,
		shardsReadyCondition(rc, c, s, degraded),
	}
}

func shardStatuses(rc *cachev1.RedisCluster, plan shards.Plan) []cachev1.ShardStatus {
	var out []cachev1.ShardStatus
	for _, sh := range plan.Shards {
		st := cachev1.ShardStatus{Name: resources.ShardStatefulSetName(rc, sh.Index), Primary: sh.Primary, Replicas: sh.Replicas}
		for _, r := range sh.Slots {
			st.Slots = append(st.Slots, r.String())
		}
		out = append(out, st)
	}
	return out
}

// shardNodeStatuses: a shard's primary serving slots and its attached replicas serve; a node
// that answers but has no part yet is syncing.
func shardNodeStatuses(members []shards.Member, plan shards.Plan) []cachev1.NodeStatus {
	role := map[string]cachev1.NodeRole{}
	for _, sh := range plan.Shards {
		if sh.Primary != "" && len(sh.Slots) > 0 {
			role[sh.Primary] = cachev1.RolePrimary
		}
		for _, r := range sh.Replicas {
			role[r] = cachev1.RoleReplica
		}
	}
	var out []cachev1.NodeStatus
	for _, m := range members {
		n := cachev1.NodeStatus{Name: m.Pod, Role: cachev1.RoleUnknown, State: cachev1.NodeUnreachable}
		if _, ok := m.Self(); ok {
			n.State = cachev1.NodeSyncing
			if r, ok := role[m.Pod]; ok {
				n.Role, n.State = r, cachev1.NodeServing
			}
		}
		out = append(out, n)
	}
	return out
}

// shardsProgressingCondition is True while slots move between shards, or a shard's
// StatefulSet rolls out a change.
func shardsProgressingCondition(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) *metav1.Condition {
	if c.Failed != nil {
		return nil
	}
	if w := c.Waiting; w != nil {
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, w.Reason, w.Message)
	}
	if plan := s.Plan; plan != nil && slotsMoving(rc, *plan) != "" {
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonSlotsMoving, slotsMoving(rc, *plan))
	}
	for _, sts := range s.StatefulSets {
		if c.Applied.Changed || !scope.RolledOut(sts) {
			msg := "The StatefulSets are rolling out the current spec, or the cluster is forming"
			if why := s.Rollout.Why; why != "" {
				msg = "Rolling out the current spec: " + why
			}
			return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress, msg)
		}
	}
	return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
		"The StatefulSets run the current spec")
}

// shardsDegradedCondition is True when a phase failed, a node's Redis keeps exiting, or a node
// says the cluster does not serve every slot once it had them all.
func shardsDegradedCondition(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) *metav1.Condition {
	if c := c.OutcomeDegraded(); c != nil {
		return c
	}
	switch {
	case s.ClusterDown != "" && len(rc.Status.Shards) > 0 && clusterWasServing(rc):
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonClusterDown,
			fmt.Sprintf("%s says the cluster does not serve every slot (cluster_state:fail)", s.ClusterDown))
	}
	return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")
}

// clusterWasServing is true once the cluster was Ready: a forming cluster is not degraded.
func clusterWasServing(rc *cachev1.RedisCluster) bool {
	for _, c := range rc.Status.Conditions {
		if c.Type == cachev1.ConditionReady && (c.Status == metav1.ConditionTrue || c.Reason == cachev1.ReasonClusterDown) {
			return true
		}
	}
	return false
}

// shardsReadyCondition is True when every node is ready, every shard's primary serves its slots
// with its replicas attached, and every node says the cluster serves every slot.
func shardsReadyCondition(rc *cachev1.RedisCluster, c *scope.Cluster, s *State, degraded *metav1.Condition) *metav1.Condition {
	want := rc.Spec.Replicas * rc.Spec.Cluster.Shards
	plan := s.Plan
	switch {
	case c.Failed != nil || degraded.Status == metav1.ConditionTrue:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case rc.Status.ReadyReplicas < want || len(s.StatefulSets) < int(rc.Spec.Cluster.Shards):
		return scope.ReplicasNotReady(rc.Status.ReadyReplicas, want, c.Stranded)
	case c.Waiting != nil:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, c.Waiting.Reason, c.Waiting.Message)
	case plan == nil:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming, "The nodes have not been asked yet")
	case slotsMoving(rc, *plan) != "":
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSlotsMoving, slotsMoving(rc, *plan))
	case plan.Waiting != "" || len(plan.Actions) > 0 || s.ClusterDown != "":
		why := plan.Waiting
		switch {
		case why != "":
		case len(plan.Actions) > 0:
			why = fmt.Sprintf("cluster commands were sent (%s); the nodes are agreeing", sentActions(plan.Actions))
		default:
			why = fmt.Sprintf("%s says the cluster does not serve every slot yet", s.ClusterDown)
		}
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming, why)
	}
	for _, sh := range plan.Shards {
		if len(sh.Replicas) < int(rc.Spec.Replicas)-1 {
			return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming,
				fmt.Sprintf("shard %d has %d of %d replicas attached", sh.Index, len(sh.Replicas), rc.Spec.Replicas-1))
		}
	}
	return scope.Condition(cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
		fmt.Sprintf("%d shards serve all %d slots, each with %d nodes", rc.Spec.Cluster.Shards, shards.SlotCount, rc.Spec.Replicas))
}

// sentActions counts the cluster commands sent, by kind ("Forget x3"): what a cluster that does
// not settle keeps being told. Not the commands themselves: they name pod addresses, which would
// make the status change with them.
func sentActions(actions []shards.Action) string {
	var kinds []string
	count := map[shards.ActionKind]int{}
	for _, a := range actions {
		if count[a.Kind] == 0 {
			kinds = append(kinds, string(a.Kind))
		}
		count[a.Kind]++
	}
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s x%d", k, count[shards.ActionKind(k)])
	}
	return strings.Join(kinds, ", ")
}

// slotsMoving says how far a change of spec.cluster.shards is: the slots left to move, or the
// drained shards whose pods are being removed; empty when no shard changes.
func slotsMoving(rc *cachev1.RedisCluster, plan shards.Plan) string {
	if msg := shards.Describe(plan.Moves, int(rc.Spec.Cluster.Shards)); msg != "" {
		return msg
	}
	if len(plan.Drained) > 0 {
		return fmt.Sprintf("shards %v serve no slot any more; their pods are being removed", plan.Drained)
	}
	return ""
}
