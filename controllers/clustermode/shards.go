// Package clustermode is cluster mode (spec.cluster): the nodes form one Redis Cluster, each
// shard a StatefulSet of its own. Its phases are functions of a scope.Cluster and its own State
// and Memory: apply the StatefulSets, ask every node for its view of the cluster (CLUSTER
// NODES), carry out what shards.Decide says (meet, assign the slots of a new cluster, attach
// replicas, forget nodes that are gone, move slots when the number of shards changed, delete a
// drained shard's StatefulSet), then roll a new pod template out. internal/shards decides each
// step and carries it out; these phases turn what it did into Events and the status (Status).
// Failover within a shard is Redis Cluster's own (cluster-node-timeout); the operator then
// finds the promoted replica serving the shard's slots and attaches the others to it.
package clustermode

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/internal/topology"
)

// State is what a reconcile in cluster mode learns.
type State struct {
	StatefulSets []*appsv1.StatefulSet
	Members      []shards.Member
	// Addrs are the members' addresses (ip:port) by pod.
	Addrs map[string]string
	// ClusterDown names a node that says the cluster does not serve every slot.
	ClusterDown string
	Plan        *shards.Plan
	// Rollout is the rollout step this reconcile took, or what the rollout waits for.
	Rollout shards.RolloutStep
	// Health is what the nodes say of the slots (for the metrics).
	Health shards.Health
	// Views are each shard's nodes' replication, judged against the shard's primary, and
	// Stats their load readings: for the node metrics, as in replication mode. ViewOf is each
	// shard's view by its index.
	Views  []topology.View
	ViewOf map[int]topology.View
	Stats  map[string]topology.Stats
}

// Memory is what cluster mode remembers of one RedisCluster between reconciles: the keys each
// shard held when last seen serving.
type Memory struct {
	held heldMemory
}

// Part is one shard a backup takes a snapshot of: its nodes judged against its primary, and
// the slots it serves.
type Part struct {
	Shard string
	Slots []string
	View  topology.View
}

// Parts are the shards a backup takes a snapshot of each; unsettled says why none may be taken
// now: none is taken while the cluster forms or slots move, since a key moving between two
// shards' snapshots would be in both, or in neither.
func (s *State) Parts(rc *cachev1.RedisCluster) (parts []Part, unsettled string) {
	if s.Plan == nil {
		return nil, "its nodes have not been observed yet"
	}
	switch p := s.Plan; {
	case p.Waiting != "":
		unsettled = p.Waiting
	case len(p.Actions) > 0 || len(p.Moves) > 0 || len(p.Drained) > 0 || len(p.Shards) != int(rc.Spec.Cluster.Shards):
		unsettled = "slots are moving between its shards"
	}
	for i, st := range shardStatuses(rc, *s.Plan) {
		parts = append(parts, Part{Shard: st.Name, Slots: st.Slots, View: s.ViewOf[s.Plan.Shards[i].Index]})
	}
	return parts, unsettled
}

// Serve is true when each of firsts (one node per shard, by shard) serves its shard's slots as
// its primary, in a cluster that has formed (every slot served): a restore into them is done.
func (s *State) Serve(firsts []string) bool {
	plan := s.Plan
	if plan == nil || plan.Waiting != "" || len(plan.Actions) > 0 || len(plan.Shards) < len(firsts) {
		return false
	}
	for i, first := range firsts {
		if plan.Shards[i].Primary != first || len(plan.Shards[i].Slots) == 0 {
			return false
		}
	}
	return true
}

// Observed is true when this reconcile asked the nodes.
func (s *State) Observed() bool { return len(s.Members) > 0 }

// RecordMetrics sets cluster mode's own series, from what the nodes said this reconcile; a
// reconcile whose nodes were not asked leaves them as they were.
func RecordMetrics(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) {
	if s.Members == nil {
		return
	}
	metrics.RecordShards(rc, c.Metrics, s.Health, s.ClusterDown != "", max(int(rc.Spec.Cluster.Shards), len(s.StatefulSets)))
}

// StatefulSets applies one StatefulSet per shard.
func StatefulSets(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	rc := c.RC
	hash := resources.ConfigHash(rc)
	s.StatefulSets = nil
	for i := range int(rc.Spec.Cluster.Shards) {
		desired := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: rc.Spec.Replicas, ConfigHash: hash, Shard: i, RedisImages: c.RedisImages,
			OperatorImage: c.OperatorImage, Restore: c.Restore})
		live, err := scope.ApplyStatefulSet(ctx, c, desired)
		if err != nil {
			return err
		}
		if live != nil {
			s.StatefulSets = append(s.StatefulSets, live)
		}
	}
	if !c.ChildrenKnown {
		c.ChildrenMatched()
	}
	return nil
}

// Nodes asks each pod's node (the pods are listed) for its view of the cluster.
func Nodes(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	Observe(ctx, c, m, s)
	return nil
}

// Observe asks each pod's node for its view of the cluster.
func Observe(ctx context.Context, c *scope.Cluster, m *Memory, s *State) {
	s.Members = nil
	s.Addrs = map[string]string{}
	for _, p := range c.Pods {
		shard, ok := resources.ShardOf(p.Labels)
		ordinal, ok2 := resources.PodOrdinal(p.Name)
		if !ok || !ok2 {
			continue
		}
		mb := shards.Member{Pod: p.Name, Shard: shard, Ordinal: ordinal}
		if p.Status.PodIP != "" {
			mb.Addr = p.Status.PodIP + ":" + strconv.Itoa(resources.RedisPort)
			s.Addrs[mb.Pod] = mb.Addr
			answer, err := shards.Ask(ctx, c.Dial, mb.Addr)
			// What it announces stays until the Outside phase says otherwise.
			mb.Nodes, mb.Announcing, mb.Announce = answer.Nodes, answer.Announcing, answer.Announcing
			if answer.Down && s.ClusterDown == "" {
				s.ClusterDown = p.Name
			}
			if errors.Is(err, topology.ErrNoPermission) {
				// Its operator user is not this build's: the Passwords phase gives it again.
				c.OperatorRefused()
			}
		}
		s.Members = append(s.Members, mb)
	}
	// In shard and ordinal order, whatever the cache's: the status lists the nodes so, and an
	// unchanged cluster gives an unchanged status.
	slices.SortFunc(s.Members, func(a, b shards.Member) int {
		return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Ordinal, b.Ordinal))
	})
	s.Health = shards.HealthOf(s.Members)
	observeShardReplication(ctx, c, m, s)
}

// observeShardReplication asks each shard's nodes for their replication state, judged against
// the shard's primary, and reads their load when due: the node metrics of replication mode,
// for each shard. Part of observing the nodes: the metrics follow them while slots move. Each
// member is told the address its replication follows: shards.Decide compares it with its table.
func observeShardReplication(ctx context.Context, c *scope.Cluster, m *Memory, s *State) {
	byShard := map[int][]topology.Member{}
	for _, mb := range s.Members { // in shard and ordinal order
		byShard[mb.Shard] = append(byShard[mb.Shard], topology.Member{Name: mb.Pod, Ordinal: mb.Ordinal, Addr: mb.Addr})
	}
	primaries := shards.Primaries(s.Members)
	s.Views, s.ViewOf = []topology.View{}, map[int]topology.View{}
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		v := topology.Observe(ctx, c.Dial, byShard[shard], primaries[shard])
		s.Views = append(s.Views, v)
		s.ViewOf[shard] = v
	}
	for i, mb := range s.Members {
		if o, ok := s.ViewOf[mb.Shard].Find(mb.Pod); ok && o.IsReplica() {
			s.Members[i].Following = o.Info.PrimaryAddr()
		}
	}
	m.held.remember(s)
	s.Stats = metrics.ReadStats(ctx, c.Metrics, c.Dial, s.Views)
}

// restoredLayout is the slots each shard is given while a restore is not done: those its
// snapshot's shard served when backed up. Nil otherwise: the slots of a new cluster are spread
// evenly.
func restoredLayout(r *cachev1.RestoreStatus) shards.Layout {
	if r == nil || r.CompletedAt != nil || len(r.Shards) == 0 {
		return nil
	}
	slots := make([][]string, len(r.Shards))
	for i, sh := range r.Shards {
		slots[i] = sh.Slots
	}
	layout, err := shards.ParseLayout(slots)
	if err != nil {
		return nil // a backup this operator recorded: never; spread evenly rather than guess
	}
	return layout
}

// Shards carries out the cluster commands shards.Decide returns; once there are none, it moves
// the slots the plan moves (slots.go, at pace), or removes the shards it drained.
func Shards(ctx context.Context, c *scope.Cluster, m *Memory, s *State, pace shards.Pace) error {
	rc := c.RC
	plan := shards.DecideLayout(s.Members, int(rc.Spec.Cluster.Shards), restoredLayout(c.Restore))
	s.Plan = &plan
	lost := shardsLost(rc, m, s, plan) // what the slots' owners held, before they are given again
	done, err := shards.Carry(ctx, c.Dial, plan.Actions, s.Addrs)
	rejoined := map[string]bool{}
	for _, a := range done {
		c.Applied.Changed = true
		if a.Kind == shards.AddSlots {
			recordShardsLost(c, lost)
			lost = "" // said once, for every shard of the plan
		}
		if a.Kind == shards.Rejoin {
			rejoined[a.NodeID] = true // one Event for them all: a whole restart sends n x (n-1)
			continue
		}
		c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, string(a.Kind), "%s", a.String())
	}
	if len(rejoined) > 0 {
		c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, string(shards.Rejoin),
			"%d Redis nodes came back with their node IDs at new addresses: every node was told where they are now (CLUSTER MEET), their slots and roles unchanged", len(rejoined))
	}
	if len(plan.Actions) > 0 {
		// Slots move on a view taken after these commands.
		return err
	}
	if len(plan.Moves) > 0 {
		return moveSlots(ctx, c, s, pace)
	}
	return removeDrainedShards(ctx, c, s)
}
