package controllers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/clustermode"
	"github.com/org/redis-operator/controllers/credentials"
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/controllers/replication"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/topology"
)

// The two modes: replication (one primary and its replicas, package replication) and cluster
// mode (spec.cluster: shards). Each lists its own phases, top to bottom, here; both share the
// credentials' phases (package credentials), the restore and the backup schedule.

// mode is what one way of running Redis adds to what every RedisCluster shares.
type mode struct {
	// prerequisites run after the shared ones, before any child is applied.
	prerequisites []phase
	// children are the mode's own children, applied after the shared ones.
	children []phase
	// observe asks the nodes what they are, once their pods are listed: the Nodes phase.
	observe func(context.Context, *reconcileState) error
	// serving run once the nodes are observed: what keeps Redis served, and the rollout.
	serving []phase
	// reobserve asks the nodes again, once the credential phases changed what they take.
	reobserve func(context.Context, *reconcileState)
	// status sets the mode's status fields and says its conditions (setStatus writes them).
	status func(*cachev1.RedisCluster, *reconcileState) []*metav1.Condition
	// nodes are the mode's views of its nodes, for the node metrics both modes serve and the
	// credential phases (passwords, users), which reach every node alike (everyNode).
	nodes func(*reconcileState) nodesObserved
	// metrics sets the mode's own series, if it has any.
	metrics func(*cachev1.RedisCluster, *reconcileState)
	// parts are what a backup takes a snapshot of each, as this reconcile observed them.
	parts func(*cachev1.RedisCluster, *reconcileState) observedParts
	// nextCheck is when the mode wants the nodes looked at again, sooner than the health
	// check's interval (a plan that waits out a timeout); interval when it does not.
	nextCheck func(*reconcileState, time.Duration) time.Duration
}

func modeOf(rc *cachev1.RedisCluster) mode {
	if rc.Spec.Cluster != nil {
		return shardedMode()
	}
	return replicationMode()
}

// phasesOf are the phases of a reconcile in mode m: the password first (every node needs it),
// the mode's prerequisites, the children both modes have and the mode's own, the nodes, then
// what the mode does with them.
func phasesOf(m mode) []phase {
	out := []phase{{"Secrets", cachev1.ReasonApplyFailed, readSecrets, prerequisite}}
	out = append(out, m.prerequisites...)
	out = append(out,
		phase{"ConfigMap", cachev1.ReasonApplyFailed, reconcileConfigMap, appliesChild},
		phase{"Services", cachev1.ReasonApplyFailed, reconcileServices, appliesChild},
		phase{"PodDisruptionBudget", cachev1.ReasonApplyFailed, reconcilePodDisruptionBudget, appliesChild},
	)
	out = append(out, m.children...)
	out = append(out, phase{"Nodes", cachev1.ReasonApplyFailed, observeNodes, servesRedis})
	out = append(out, m.serving...)
	// After the mode's phases, which read the nodes' memory.
	return append(out, phase{"Memory", cachev1.ReasonApplyFailed, reconcileMemory, servesRedis})
}

// observeNodes lists the RedisCluster's pods, then the mode asks each one's Redis what it is.
func observeNodes(ctx context.Context, state *reconcileState) error {
	if err := listPods(ctx, state); err != nil {
		return err
	}
	return state.mode.observe(ctx, state)
}

// replicationMode is one primary and its replicas: a StatefulSet whose nodes the operator keeps
// one primary and its replicas (failover, rollout), with passwords, TLS, users, backups and
// restores.
func replicationMode() mode {
	return mode{
		prerequisites: []phase{
			{"RestoreSource", cachev1.ReasonApplyFailed, restoreSource, prerequisite},
		},
		children: []phase{
			{"StatefulSet", cachev1.ReasonApplyFailed, inReplication(replication.StatefulSet), appliesChild},
		},
		observe: func(ctx context.Context, state *reconcileState) error {
			return replication.Nodes(ctx, &state.Cluster, &state.kept.replication, &state.replication)
		},
		serving: []phase{
			{"Passwords", cachev1.ReasonAuthenticationFailed, givesCredentials(credentials.Passwords), servesRedis},
			{"TLS", cachev1.ReasonTLSFailed, givesCredentials(credentials.TLS), servesRedis},
			{"LiveSettings", cachev1.ReasonSettingsFailed, giveLiveSettings, servesRedis},
			{"Failover", cachev1.ReasonTopologyFailed, inReplication(replication.Failover), servesRedis},
			{"RestoreDone", cachev1.ReasonRestoreFailed, func(ctx context.Context, state *reconcileState) error {
				return redisbackup.RestoreDone(ctx, &state.Cluster, func(firsts []string) bool { return state.replication.Serves(firsts[0]) })
			}, servesRedis},
			{"Rollout", cachev1.ReasonTopologyFailed, inReplication(replication.Rollout), rollout},
			{"RoleLabels", cachev1.ReasonApplyFailed, inReplication(replication.RoleLabels), servesRedis},
			{"Users", cachev1.ReasonUserRejected, givesCredentials(credentials.Users), servesRedis},
			{"BackupSchedule", cachev1.ReasonApplyFailed, backupSchedule, servesRedis},
		},
		reobserve: func(ctx context.Context, state *reconcileState) {
			replication.Observe(ctx, &state.Cluster, &state.replication)
		},
		status: func(rc *cachev1.RedisCluster, state *reconcileState) []*metav1.Condition {
			return replication.Status(rc, &state.Cluster, &state.replication)
		},
		nodes: func(state *reconcileState) nodesObserved {
			return nodesObserved{views: []topology.View{state.replication.View}, stats: state.replication.Stats}
		},
		parts: func(_ *cachev1.RedisCluster, state *reconcileState) observedParts {
			return observedParts{parts: []observedPart{{view: state.replication.View}}}
		},
		nextCheck: func(state *reconcileState, interval time.Duration) time.Duration {
			return state.replication.Round.NextCheck(interval)
		},
	}
}

// inClusterMode is a phase of package clustermode, handed its part of the reconcile.
func inClusterMode(run func(context.Context, *scope.Cluster, *clustermode.Memory, *clustermode.State) error) func(context.Context, *reconcileState) error {
	return func(ctx context.Context, state *reconcileState) error {
		return run(ctx, &state.Cluster, &state.kept.clustermode, &state.shards)
	}
}

// inReplication is a phase of package replication, handed its part of the reconcile.
func inReplication(run func(context.Context, *scope.Cluster, *replication.Memory, *replication.State) error) func(context.Context, *reconcileState) error {
	return func(ctx context.Context, state *reconcileState) error {
		return run(ctx, &state.Cluster, &state.kept.replication, &state.replication)
	}
}

// shardedMode is cluster mode (spec.cluster): a StatefulSet per shard, whose nodes form one
// Redis Cluster. Passwords, TLS, users, the restore's source and the backup schedule are the
// other mode's phases, reaching every node of every shard.
func shardedMode() mode {
	return mode{
		prerequisites: []phase{
			{"RestoreSource", cachev1.ReasonApplyFailed, restoreSource, prerequisite},
		},
		children: []phase{
			{"StatefulSets", cachev1.ReasonApplyFailed, inClusterMode(clustermode.StatefulSets), appliesChild},
		},
		observe: inClusterMode(clustermode.Nodes),
		serving: []phase{
			{"Passwords", cachev1.ReasonAuthenticationFailed, givesCredentials(credentials.Passwords), servesRedis},
			{"TLS", cachev1.ReasonTLSFailed, givesCredentials(credentials.TLS), servesRedis},
			{"LiveSettings", cachev1.ReasonSettingsFailed, giveLiveSettings, servesRedis},
			{"Outside", cachev1.ReasonApplyFailed, inClusterMode(clustermode.Outside), appliesChild},
			{"Shards", cachev1.ReasonClusterFailed, func(ctx context.Context, state *reconcileState) error {
				return clustermode.Shards(ctx, &state.Cluster, &state.kept.clustermode, &state.shards, state.settings.SlotMovePace)
			}, servesRedis},
			{"RestoreDone", cachev1.ReasonRestoreFailed, func(ctx context.Context, state *reconcileState) error {
				return redisbackup.RestoreDone(ctx, &state.Cluster, state.shards.Serve)
			}, servesRedis},
			{"Users", cachev1.ReasonUserRejected, givesCredentials(credentials.Users), servesRedis},
			{"Rollout", cachev1.ReasonClusterFailed, inClusterMode(clustermode.Rollout), rollout},
			{"BackupSchedule", cachev1.ReasonApplyFailed, backupSchedule, servesRedis},
		},
		reobserve: func(ctx context.Context, state *reconcileState) {
			clustermode.Observe(ctx, &state.Cluster, &state.kept.clustermode, &state.shards)
		},
		status: func(rc *cachev1.RedisCluster, state *reconcileState) []*metav1.Condition {
			return clustermode.Status(rc, &state.Cluster, &state.shards)
		},
		nodes: func(state *reconcileState) nodesObserved {
			return nodesObserved{views: state.shards.Views, stats: state.shards.Stats}
		},
		metrics: func(rc *cachev1.RedisCluster, state *reconcileState) {
			clustermode.RecordMetrics(rc, &state.Cluster, &state.shards)
		},
		nextCheck: func(_ *reconcileState, interval time.Duration) time.Duration { return interval },
		parts: func(rc *cachev1.RedisCluster, state *reconcileState) observedParts {
			parts, unsettled := state.shards.Parts(rc)
			out := observedParts{unsettled: unsettled}
			for _, p := range parts {
				out.parts = append(out.parts, observedPart{shard: p.Shard, slots: p.Slots, view: p.View})
			}
			return out
		},
	}
}

// nodesObserved are the mode's views of its nodes (one in replication mode, one per shard in
// cluster mode), each judged against its primary, and the load readings taken: for the node
// metrics and what reaches every node alike. Views are nil when this reconcile did not observe
// the nodes.
type nodesObserved struct {
	views []topology.View
	stats map[string]topology.Stats
}

// everyNode is every node of the RedisCluster as this reconcile observed it, in either mode
// (in cluster mode, every shard's), with no primary: for what reaches every node alike.
func (s *reconcileState) everyNode() topology.View {
	var all topology.View
	for _, v := range s.mode.nodes(s).views {
		all.Nodes = append(all.Nodes, v.Nodes...)
	}
	return all
}

// readSecrets is the Secrets phase: the credentials every node needs, read first.
func readSecrets(ctx context.Context, state *reconcileState) error {
	return credentials.Secrets(ctx, &state.Cluster, &state.kept.creds, &state.creds, state.settings.SecretResync)
}

// givesCredentials is a phase of package credentials that gives the nodes what they lack.
func givesCredentials(give func(context.Context, *scope.Cluster, *credentials.Memory, *credentials.State) error) func(context.Context, *reconcileState) error {
	return func(ctx context.Context, state *reconcileState) error {
		return give(ctx, &state.Cluster, &state.kept.creds, &state.creds)
	}
}

func giveLiveSettings(ctx context.Context, state *reconcileState) error {
	return credentials.LiveSettings(ctx, &state.Cluster, &state.kept.creds)
}

// restoreSource is the RestoreSource phase (package redisbackup), in both modes.
func restoreSource(ctx context.Context, state *reconcileState) error {
	return redisbackup.RestoreSource(ctx, &state.Cluster)
}

// backupSchedule is the BackupSchedule phase (package redisbackup), in both modes: the status
// records when it last created a RedisBackup.
func backupSchedule(ctx context.Context, state *reconcileState) error {
	scheduled, err := redisbackup.Schedule(ctx, &state.Cluster)
	if scheduled != nil {
		state.backupScheduled = scheduled
	}
	return err
}
