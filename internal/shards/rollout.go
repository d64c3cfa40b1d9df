package shards

import "fmt"

// Rolling a new pod template (a new version, a new configuration) out to the nodes of a
// Redis Cluster. The StatefulSets do not replace pods themselves (OnDelete): DecideRollout
// names the one pod to replace next, or the replica to promote first.
//
// The safety rule it keeps: a shard never loses the node that serves its slots while it has no
// other copy of the data. So one pod is replaced at a time in the whole cluster, and only while
// the cluster is whole (every node answers, nothing to send, no slot moving); a shard's
// replicas go first; its primary is replaced only after a replica that already runs the new
// template took its place with CLUSTER FAILOVER, which Redis carries out only once that replica
// has every write the primary acknowledged (the primary stops its clients meanwhile); a shard
// with one node is replaced only when its data is kept on a volume, and it is then down while
// its pod restarts.

// RolloutKind is what DecideRollout asks for.
type RolloutKind string

const (
	// ReplacePod: delete Pod; its StatefulSet recreates it from the current template.
	ReplacePod RolloutKind = "ReplacePod"
	// Failover: send CLUSTER FAILOVER to Pod, a replica, which then serves its shard's slots.
	Failover RolloutKind = "Failover"
)

// RolloutStep is one step of a rollout; Kind is empty when there is none to take.
type RolloutStep struct {
	Kind  RolloutKind
	Pod   string
	Shard int
	// Why is what the step is for, or, without a step, what the rollout waits for.
	Why string
}

// DecideRollout returns the next step of rolling the current template out: outdated are the
// pods that do not run it yet, persistent is true when each node's data is on a volume. See the
// safety rule above.
func DecideRollout(plan Plan, outdated map[string]bool, persistent bool) RolloutStep {
	if len(outdated) == 0 {
		return RolloutStep{}
	}
	if plan.Waiting != "" || len(plan.Actions) > 0 || len(plan.Moves) > 0 || len(plan.Drained) > 0 {
		return RolloutStep{Why: "pods are replaced once the cluster is whole"}
	}
	for _, sh := range plan.Shards {
		for _, r := range sh.Replicas {
			if outdated[r] {
				return RolloutStep{Kind: ReplacePod, Pod: r, Shard: sh.Index,
					Why: fmt.Sprintf("replica %s of shard %d runs an old template", r, sh.Index)}
			}
		}
		if !outdated[sh.Primary] {
			continue
		}
		if len(sh.Replicas) > 0 {
			return RolloutStep{Kind: Failover, Pod: sh.Replicas[0], Shard: sh.Index,
				Why: fmt.Sprintf("primary %s of shard %d runs an old template: its replica %s takes over first", sh.Primary, sh.Index, sh.Replicas[0])}
		}
		if persistent {
			return RolloutStep{Kind: ReplacePod, Pod: sh.Primary, Shard: sh.Index,
				Why: fmt.Sprintf("primary %s of shard %d, its only node, runs an old template; its data is kept on its volume, and the shard is down while it restarts", sh.Primary, sh.Index)}
		}
		return RolloutStep{Why: fmt.Sprintf("primary %s of shard %d runs an old template, but it is the shard's only node and its data is on no volume: replacing it would lose the shard's data; add a replica (spec.replicas) or delete the pod yourself", sh.Primary, sh.Index)}
	}
	return RolloutStep{Why: "outdated pods have no part in the cluster yet"}
}

// DecideHandover hands a shard whose primary's pod is being deleted (a drain's eviction, kubectl
// delete pod) to one of its replicas with CLUSTER FAILOVER while the primary still answers (the
// pod's preStop hook holds its SIGTERM until it is a replica): Redis carries it out only once the
// replica has every write the primary acknowledged, so nothing is lost, and the slots are served
// on without waiting for cluster-node-timeout after the pod is gone. terminating are the pods
// being deleted, nodes each pod's machine: the replica is one whose pod stays, on another machine
// than the primary's where the shard has one (a drain takes the whole machine). Without such a
// replica there is no step: Redis Cluster fails over once the primary is gone, if it can.
func DecideHandover(plan Plan, terminating map[string]bool, nodes map[string]string) RolloutStep {
	for _, sh := range plan.Shards {
		if sh.Primary == "" || !terminating[sh.Primary] {
			continue
		}
		target := ""
		for _, r := range sh.Replicas {
			if terminating[r] {
				continue
			}
			if target == "" || (nodes[target] == nodes[sh.Primary] && nodes[r] != nodes[sh.Primary]) {
				target = r
			}
		}
		if target != "" {
			return RolloutStep{Kind: Failover, Pod: target, Shard: sh.Index,
				Why: fmt.Sprintf("the pod of its primary %s is being deleted", sh.Primary)}
		}
	}
	return RolloutStep{}
}
