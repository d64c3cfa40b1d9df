package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Cluster mode (spec.cluster): the nodes form one Redis Cluster, each shard a StatefulSet of
// its own. The reconciler applies the children as in the other mode, then asks every node for
// its view of the cluster (CLUSTER NODES) and sends what shards.Decide says: meet, assign the
// slots of a new cluster, attach replicas, forget nodes that are gone. Failover within a shard
// is Redis Cluster's own (cluster-node-timeout); the operator then finds the promoted replica
// serving the shard's slots and attaches the others to it.

// shardedPhases are the phases of a RedisCluster in cluster mode.
func (r *RedisClusterReconciler) shardedPhases() []phase {
	return []phase{
		{"Secrets", cachev1.ReasonApplyFailed, r.reconcileSecrets, prerequisite},
		{"ConfigMap", cachev1.ReasonApplyFailed, r.reconcileConfigMap, appliesChild},
		{"Services", cachev1.ReasonApplyFailed, r.reconcileServices, appliesChild},
		{"PodDisruptionBudget", cachev1.ReasonApplyFailed, r.reconcilePodDisruptionBudget, appliesChild},
		{"StatefulSets", cachev1.ReasonApplyFailed, r.reconcileShardStatefulSets, appliesChild},
		{"Nodes", cachev1.ReasonApplyFailed, r.observeShards, servesRedis},
		{"Shards", cachev1.ReasonClusterFailed, r.reconcileShards, servesRedis},
	}
}

// shardsState is what a reconcile in cluster mode learns.
type shardsState struct {
	statefulSets []*appsv1.StatefulSet
	members      []shards.Member
	// clusterDown names a node that says the cluster does not serve every slot.
	clusterDown string
	plan        *shards.Plan
}

// reconcileShardStatefulSets applies one StatefulSet per shard.
func (r *RedisClusterReconciler) reconcileShardStatefulSets(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	hash := resources.ConfigHash(resources.RedisConf(rc))
	state.shards.statefulSets = nil
	for i := range int(rc.Spec.Cluster.Shards) {
		desired := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: rc.Spec.Replicas, ConfigHash: hash, Shard: i})
		live := &appsv1.StatefulSet{}
		if state.childrenKnown {
			if err := r.Get(ctx, nameOf(rc, *desired.Name), live); err != nil {
				return fmt.Errorf("reading StatefulSet %s: %w", *desired.Name, err)
			}
		} else if err := r.applyChild(ctx, rc, state, "StatefulSet", child[*appsv1.StatefulSet, *appsv1ac.StatefulSetApplyConfiguration]{
			desired: desired, name: nameOf(rc, *desired.Name), live: live, extract: appsv1ac.ExtractStatefulSet,
		}); err != nil {
			return err
		}
		if live.UID != "" {
			state.shards.statefulSets = append(state.shards.statefulSets, live)
		}
	}
	if !state.childrenKnown {
		r.clusterState(rc).children.compared(rc.ResourceVersion)
	}
	return nil
}

// observeShards asks each pod's node for its view of the cluster.
func (r *RedisClusterReconciler) observeShards(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(rc.Namespace), client.MatchingFields{podOwnerIndex: rc.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	state.pods = pods.Items
	state.failedToStart = failedToStart(pods.Items)
	state.members = membersOf(pods.Items)
	state.dial = r.dialer(rc, state)
	state.shards.members = nil
	for _, p := range pods.Items {
		shard, ok := resources.ShardOf(p.Labels)
		ordinal, ok2 := resources.PodOrdinal(p.Name)
		if !ok || !ok2 || shard >= int(rc.Spec.Cluster.Shards) {
			continue
		}
		m := shards.Member{Pod: p.Name, Shard: shard, Ordinal: ordinal}
		if p.Status.PodIP != "" {
			m.Addr = p.Status.PodIP + ":" + strconv.Itoa(resources.RedisPort)
			n := state.dial(m.Addr)
			if nodes, err := n.ClusterNodes(ctx); err == nil {
				m.Nodes = nodes
				if info, err := n.ClusterInfo(ctx); err == nil && info.State != "ok" && state.shards.clusterDown == "" {
					state.shards.clusterDown = p.Name
				}
			}
			_ = n.Close()
		}
		state.shards.members = append(state.shards.members, m)
	}
	// In shard and ordinal order, whatever the cache's: the status lists the nodes so, and an
	// unchanged cluster gives an unchanged status.
	slices.SortFunc(state.shards.members, func(a, b shards.Member) int {
		return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Ordinal, b.Ordinal))
	})
	return nil
}

// reconcileShards sends the cluster commands shards.Decide returns.
func (r *RedisClusterReconciler) reconcileShards(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	plan := shards.Decide(state.shards.members, int(rc.Spec.Cluster.Shards))
	state.shards.plan = &plan
	addrs := map[string]string{}
	for _, m := range state.shards.members {
		addrs[m.Pod] = m.Addr
	}
	var errs []error
	for _, a := range plan.Actions {
		n := state.dial(addrs[a.On])
		err := sendClusterCommand(ctx, n, a)
		_ = n.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		state.changed = true
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, string(a.Kind), "%s", a.String())
	}
	return errors.Join(errs...)
}

func sendClusterCommand(ctx context.Context, n redis.Node, a shards.Action) error {
	switch a.Kind {
	case shards.Meet:
		return n.ClusterMeet(ctx, a.Addr)
	case shards.AddSlots:
		return n.ClusterAddSlots(ctx, a.Ranges)
	case shards.Replicate:
		return n.ClusterReplicate(ctx, a.NodeID)
	case shards.Forget:
		return n.ClusterForget(ctx, a.NodeID)
	}
	return fmt.Errorf("unknown cluster command %q", a.Kind)
}

// setShardedStatus is setStatus in cluster mode: the shards, each node's role, and the
// conditions Ready, Progressing, Degraded and Persistent.
func setShardedStatus(rc *cachev1.RedisCluster, state *reconcileState) {
	s := state.shards
	var ready int32
	for _, sts := range s.statefulSets {
		ready += sts.Status.ReadyReplicas
	}
	rc.Status.ReadyReplicas = ready
	if s.plan != nil {
		rc.Status.Shards = shardStatuses(rc, *s.plan)
		rc.Status.Nodes = shardNodeStatuses(s.members, *s.plan)
	}
	degraded := shardsDegradedCondition(rc, state)
	for _, c := range []*metav1.Condition{
		persistentCondition(rc),
		shardsProgressingCondition(state),
		degraded,
		shardsReadyCondition(rc, state, degraded),
	} {
		setCondition(rc, c)
	}
	if state.err == nil {
		rc.Status.ObservedGeneration = rc.Generation
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

// shardsProgressingCondition is True while a shard's StatefulSet rolls out a change.
func shardsProgressingCondition(state *reconcileState) *metav1.Condition {
	if state.err != nil {
		return nil
	}
	for _, sts := range state.shards.statefulSets {
		if state.changed || !rolledOut(sts) {
			return condition(cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonRolloutInProgress,
				"The StatefulSets are rolling out the current spec, or the cluster is forming")
		}
	}
	return condition(cachev1.ConditionProgressing, metav1.ConditionFalse, cachev1.ReasonRolloutComplete,
		"The StatefulSets run the current spec")
}

// shardsDegradedCondition is True when a phase failed, a node's Redis keeps exiting, or a node
// says the cluster does not serve every slot once it had them all.
func shardsDegradedCondition(rc *cachev1.RedisCluster, state *reconcileState) *metav1.Condition {
	switch {
	case state.err != nil:
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, state.err.reason, state.err.Error())
	case state.failedToStart != "":
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonRedisFailedToStart, state.failedToStart)
	case state.shards.clusterDown != "" && len(rc.Status.Shards) > 0 && clusterWasServing(rc):
		return condition(cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonClusterDown,
			fmt.Sprintf("%s says the cluster does not serve every slot (cluster_state:fail)", state.shards.clusterDown))
	}
	return condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected, "All children match the spec")
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
func shardsReadyCondition(rc *cachev1.RedisCluster, state *reconcileState, degraded *metav1.Condition) *metav1.Condition {
	want := rc.Spec.Replicas * rc.Spec.Cluster.Shards
	plan := state.shards.plan
	switch {
	case state.err != nil || degraded.Status == metav1.ConditionTrue:
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, degraded.Reason, degraded.Message)
	case rc.Status.ReadyReplicas < want || len(state.shards.statefulSets) < int(rc.Spec.Cluster.Shards):
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicasNotReady,
			fmt.Sprintf("%d of %d Redis nodes are ready", rc.Status.ReadyReplicas, want))
	case plan == nil:
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming, "The nodes have not been asked yet")
	case plan.Waiting != "" || len(plan.Actions) > 0 || state.shards.clusterDown != "":
		why := plan.Waiting
		if why == "" {
			why = "cluster commands were sent; the nodes are agreeing"
		}
		return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming, why)
	}
	for _, sh := range plan.Shards {
		if len(sh.Replicas) < int(rc.Spec.Replicas)-1 {
			return condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonShardsForming,
				fmt.Sprintf("shard %d has %d of %d replicas attached", sh.Index, len(sh.Replicas), rc.Spec.Replicas-1))
		}
	}
	return condition(cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonAllReplicasReady,
		fmt.Sprintf("%d shards serve all %d slots, each with %d nodes", rc.Spec.Cluster.Shards, redis.SlotCount, rc.Spec.Replicas))
}
