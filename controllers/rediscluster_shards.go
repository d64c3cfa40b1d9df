package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/internal/topology"
)

// Cluster mode (spec.cluster): the nodes form one Redis Cluster, each shard a StatefulSet of
// its own. The reconciler applies the children as in the other mode, then asks every node for
// its view of the cluster (CLUSTER NODES) and sends what shards.Decide says: meet, assign the
// slots of a new cluster, attach replicas, forget nodes that are gone, move slots when the
// number of shards changed, delete a drained shard's StatefulSet; then it rolls a new pod
// template out (rediscluster_shards_rollout.go). Failover within a shard is Redis Cluster's
// own (cluster-node-timeout); the operator then finds the promoted replica serving the shard's
// slots and attaches the others to it.

// shardParts are the shards a backup takes a snapshot of each: each shard's nodes judged
// against its primary, and the slots it serves. None is taken while the cluster forms or slots
// move: a key moving between two shards' snapshots would be in both, or in neither.
func shardParts(rc *cachev1.RedisCluster, state *reconcileState) observedParts {
	s := state.shards
	if s.plan == nil {
		return observedParts{unsettled: "its nodes have not been observed yet"}
	}
	var out observedParts
	switch p := s.plan; {
	case p.Waiting != "":
		out.unsettled = p.Waiting
	case len(p.Actions) > 0 || len(p.Moves) > 0 || len(p.Drained) > 0 || len(p.Shards) != int(rc.Spec.Cluster.Shards):
		out.unsettled = "slots are moving between its shards"
	}
	for i, st := range shardStatuses(rc, *s.plan) {
		out.parts = append(out.parts, observedPart{shard: st.Name, slots: st.Slots, view: s.viewOf[s.plan.Shards[i].Index]})
	}
	return out
}

// shardsState is what a reconcile in cluster mode learns.
type shardsState struct {
	statefulSets []*appsv1.StatefulSet
	members      []shards.Member
	// addrs are the members' addresses (ip:port) by pod.
	addrs map[string]string
	// clusterDown names a node that says the cluster does not serve every slot.
	clusterDown string
	plan        *shards.Plan
	// rollout is the rollout step this reconcile took, or what the rollout waits for.
	rollout shards.RolloutStep
	// health is what the nodes say of the slots (for the metrics).
	health shards.Health
	// views are each shard's nodes' replication, judged against the shard's primary, and
	// stats their load readings: for the node metrics, as in replication mode. viewOf is
	// each shard's view by its index.
	views  []topology.View
	viewOf map[int]topology.View
	stats  map[string]topology.Stats
}

// reconcileShardStatefulSets applies one StatefulSet per shard.
func (r *RedisClusterReconciler) reconcileShardStatefulSets(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	hash := resources.ConfigHash(rc)
	state.shards.statefulSets = nil
	for i := range int(rc.Spec.Cluster.Shards) {
		desired := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: rc.Spec.Replicas, ConfigHash: hash, Shard: i, RedisImages: r.RedisImages,
			OperatorImage: r.OperatorImage, Restore: state.Restore})
		live, err := scope.ApplyStatefulSet(ctx, &state.Cluster, desired)
		if err != nil {
			return err
		}
		if live != nil {
			state.shards.statefulSets = append(state.shards.statefulSets, live)
		}
	}
	if !state.ChildrenKnown {
		state.ChildrenMatched()
	}
	return nil
}

// observeShards asks each pod's node for its view of the cluster.
func observeShards(ctx context.Context, state *reconcileState) {
	state.shards.members = nil
	state.shards.addrs = map[string]string{}
	for _, p := range state.Pods {
		shard, ok := resources.ShardOf(p.Labels)
		ordinal, ok2 := resources.PodOrdinal(p.Name)
		if !ok || !ok2 {
			continue
		}
		m := shards.Member{Pod: p.Name, Shard: shard, Ordinal: ordinal}
		if p.Status.PodIP != "" {
			m.Addr = p.Status.PodIP + ":" + strconv.Itoa(resources.RedisPort)
			state.shards.addrs[m.Pod] = m.Addr
			var down bool
			var err error
			m.Nodes, down, err = shards.Ask(ctx, state.Dial, m.Addr)
			if down && state.shards.clusterDown == "" {
				state.shards.clusterDown = p.Name
			}
			if errors.Is(err, redis.ErrNoPermission) {
				// Its operator user is not this build's: the Passwords phase gives it again.
				state.OperatorRefused()
			}
		}
		state.shards.members = append(state.shards.members, m)
	}
	// In shard and ordinal order, whatever the cache's: the status lists the nodes so, and an
	// unchanged cluster gives an unchanged status.
	slices.SortFunc(state.shards.members, func(a, b shards.Member) int {
		return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Ordinal, b.Ordinal))
	})
	state.shards.health = shards.HealthOf(state.shards.members)
	observeShardReplication(ctx, state)
}

// observeShardReplication asks each shard's nodes for their replication state, judged against
// the shard's primary, and reads their load when due: the node metrics of replication mode,
// for each shard. Part of observing the nodes: the metrics follow them while slots move.
func observeShardReplication(ctx context.Context, state *reconcileState) {
	s := &state.shards
	byShard := map[int][]topology.Member{}
	for _, m := range s.members { // in shard and ordinal order
		byShard[m.Shard] = append(byShard[m.Shard], topology.Member{Name: m.Pod, Ordinal: m.Ordinal, Addr: m.Addr})
	}
	primaries := shards.Primaries(s.members)
	s.views, s.viewOf = []topology.View{}, map[int]topology.View{}
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		v := topology.Observe(ctx, state.Dial, byShard[shard], primaries[shard])
		s.views = append(s.views, v)
		s.viewOf[shard] = v
	}
	state.kept.held.remember(state)
	s.stats = metrics.ReadStats(ctx, state.Metrics, state.Dial, s.views)
}

// restoredLayout is the slots each shard is given while a restore is not done: those its
// snapshot's shard served when backed up. Nil otherwise: the slots of a new cluster are spread
// evenly.
func restoredLayout(r *cachev1.RestoreStatus) shards.Layout {
	if r == nil || r.CompletedAt != nil || len(r.Shards) == 0 {
		return nil
	}
	layout, err := recordedLayout(r.Shards)
	if err != nil {
		return nil // a backup this operator recorded: never; spread evenly rather than guess
	}
	return layout
}

// recordedLayout is the slots a backup in cluster mode recorded for each of its shards.
func recordedLayout(stored []cachev1.ShardBackup) (shards.Layout, error) {
	layout := make(shards.Layout, len(stored))
	for i, sh := range stored {
		for _, s := range sh.Slots {
			rg, err := redis.ParseSlotRange(s)
			if err != nil {
				return nil, fmt.Errorf("shard %s: %w", sh.Name, err)
			}
			layout[i] = append(layout[i], rg)
		}
	}
	return layout, nil
}

// reconcileShards sends the cluster commands shards.Decide returns; once there are none, it
// moves the slots the plan moves (rediscluster_shards_slots.go), or removes the shards it drained.
func (r *RedisClusterReconciler) reconcileShards(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	plan := shards.DecideLayout(state.shards.members, int(rc.Spec.Cluster.Shards), restoredLayout(state.Restore))
	state.shards.plan = &plan
	lost := r.shardsLost(rc, state, plan) // what the slots' owners held, before they are given again
	var errs []error
	rejoined := map[string]bool{}
	for _, a := range plan.Actions {
		n := state.Dial(state.shards.addrs[a.On])
		err := shards.Act(ctx, n, a)
		_ = n.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		state.Applied.Changed = true
		if a.Kind == shards.AddSlots {
			r.recordShardsLost(rc, state, lost)
			lost = "" // said once, for every shard of the plan
		}
		if a.Kind == shards.Rejoin {
			rejoined[a.NodeID] = true // one Event for them all: a whole restart sends n x (n-1)
			continue
		}
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, string(a.Kind), "%s", a.String())
	}
	if len(rejoined) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, string(shards.Rejoin),
			"%d Redis nodes came back with their node IDs at new addresses: every node was told where they are now (CLUSTER MEET), their slots and roles unchanged", len(rejoined))
	}
	if len(plan.Actions) > 0 {
		// Slots move on a view taken after these commands.
		return errors.Join(errs...)
	}
	if len(plan.Moves) > 0 {
		return r.moveSlots(ctx, rc, state)
	}
	return r.removeDrainedShards(ctx, rc, state)
}

// recordShardMetrics sets cluster mode's own series, from what the nodes said this reconcile; a
// reconcile whose nodes were not asked leaves them as they were.
func recordShardMetrics(rc *cachev1.RedisCluster, state *reconcileState) {
	s := state.shards
	if s.members == nil {
		return
	}
	metrics.RecordShards(rc, &state.kept.metrics, s.health, s.clusterDown != "", max(int(rc.Spec.Cluster.Shards), len(s.statefulSets)))
}
