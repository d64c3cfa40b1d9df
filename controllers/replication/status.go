package replication

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/topology"
)

// Status sets the status fields of one primary and its replicas, and returns its conditions
// (the reconciler's status writer sets them).
func Status(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) []*metav1.Condition {
	if sts := s.StatefulSet; sts != nil {
		rc.Status.ReadyReplicas = sts.Status.ReadyReplicas
	}
	rc.Status.Primary = s.View.Primary
	if len(s.View.Nodes) > 0 {
		rc.Status.Nodes = nodeStatuses(s.View)
	}
	degraded := degradedCondition(rc, c, s)
	return []*metav1.Condition{
		scope.PersistentCondition(rc),
		failingOverCondition(rc, s),
		progressingCondition(c, s),
		degraded,
		readyCondition(rc, c, s, degraded),
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
func failingOverCondition(rc *cachev1.RedisCluster, s *State) *metav1.Condition {
	existing := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionFailingOver)
	switch move := s.Move; {
	case move != nil && !move.Done:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionTrue, move.Reason, move.Message)
	case move != nil:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s replaced %s as primary", move.To, move.From))
	case existing == nil:
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonStable, "The primary has not changed")
	case existing.Status == metav1.ConditionTrue && s.Round.Plan.Idle() && !s.Rolled:
		// A change of primary that an error or a restart cut short was finished by a later reconcile.
		return scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonFailoverComplete,
			fmt.Sprintf("%s is the primary", s.View.Primary))
	}
	return nil
}

// progressingCondition is True while the StatefulSet rolls out a change or a phase waits; nil
// (unchanged) when the reconcile failed.
func progressingCondition(c *scope.Cluster, s *State) *metav1.Condition {
	switch {
	case c.Failed != nil:
		return nil
	case c.Waiting != nil:
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, c.Waiting.Reason, c.Waiting.Message)
	case c.WroteStatefulSet() || !scope.RolledOut(s.StatefulSet):
		return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
			"The StatefulSet is rolling out the current spec")
	}
	return scope.Condition(cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
		"The StatefulSet runs the current spec")
}

// degradedCondition is True when a phase failed or replication itself is broken, as opposed
// to still forming.
func degradedCondition(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) *metav1.Condition {
	if c := c.OutcomeDegraded(); c != nil {
		return c
	}
	plan := s.Round.Plan
	switch {
	case len(s.View.Nodes) > 0 && plan.Primary == "" && c.Restore != nil && c.Restore.CompletedAt == nil:
		// Not degraded: the first primary waits for the node that restores the data.
		return scope.Condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonRestoring, plan.Reason)
	case len(s.View.Nodes) > 0 && plan.Primary == "":
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
func readyCondition(rc *cachev1.RedisCluster, c *scope.Cluster, s *State, degraded *metav1.Condition) *metav1.Condition {
	ready := rc.Status.ReadyReplicas
	switch {
	case c.Failed != nil || c.Exited != nil:
		// Said first: counting ready pods would hide why they are not.
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case c.Waiting != nil:
		return scope.Condition(cachev1.ConditionReady, metav1.ConditionFalse, c.Waiting.Reason, c.Waiting.Message)
	case c.WroteStatefulSet() || !scope.StatefulSetObserved(s.StatefulSet) || ready < rc.Spec.Replicas:
		return scope.ReplicasNotReady(ready, rc.Spec.Replicas, c.Stranded)
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
