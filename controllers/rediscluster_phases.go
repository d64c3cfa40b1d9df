package controllers

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/credentials"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/topology"
)

// A reconcile is a list of phases: those every RedisCluster has, then its mode's. Each phase
// ends done, waiting or failed (rediscluster_outcomes.go); runPhases decides what runs after one
// that did not finish.

// phase is one step of a reconcile. reason is the condition reason of its failures, unless
// the error says otherwise (outcome.Fail).
type phase struct {
	name   string
	reason string
	run    func(context.Context, *cachev1.RedisCluster, *reconcileState) error
	// kind says what else may run when this phase fails.
	kind phaseKind
}

// phaseKind sorts the phases by what a failure stops.
type phaseKind int

const (
	// prerequisite: nothing after it can run without it (the password).
	prerequisite phaseKind = iota
	// appliesChild: it applies a child. When it fails (the API server refuses what the spec asks
	// for), the other children and the rollout wait for a spec that can be applied, but the
	// phases that keep Redis served still run: a refused spec must not leave the cluster
	// without failover.
	appliesChild
	// servesRedis: it observes the nodes, or keeps them one primary and its replicas.
	servesRedis
	// rollout: it moves pods to the applied spec.
	rollout
)

// runPhases runs the phases in order and records in state how each that did not finish ended:
// a failure (its Warning Event; the status keeps the first) or a wait. After a phase that did
// not finish, only what its kind allows runs. It returns the kind of the phase that failed.
func (r *RedisClusterReconciler) runPhases(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, phases []phase) phaseKind {
	// stoppedKind is the kind of the first phase that did not finish (it failed or waits): it
	// says which phases after it still run.
	var stoppedKind, failedKind phaseKind
	for _, p := range phases {
		stopped := state.Failed != nil || state.Waiting != nil
		if stopped {
			if stoppedKind != appliesChild {
				break
			}
			if p.kind != servesRedis {
				continue
			}
		}
		err := p.run(ctx, rc, state)
		if err == nil {
			continue
		}
		if w, ok := outcome.AsWaiting(p.name, err); ok {
			if state.Waiting == nil {
				state.Waiting = w
			}
		} else {
			if errors.Is(err, redis.ErrNoPermission) {
				// A node whose operator user is not this build's: given again by the
				// next reconcile's Passwords phase.
				state.OperatorRefused()
			}
			perr := outcome.AsFailure(p.name, p.reason, err)
			r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, perr.Reason, p.name, "%s", perr.Error())
			if state.Failed != nil {
				// Redis could not be served after a child failed: the status keeps the first
				// failure, this one has its Event.
				break
			}
			state.Failed, failedKind = perr, p.kind
		}
		if !stopped {
			stoppedKind = p.kind
		}
	}
	return failedKind
}

// mode is what one way of running Redis adds to what every RedisCluster shares: replication
// (one primary and its replicas) or cluster mode (spec.cluster: shards). Each mode lists its
// own phases, top to bottom, in one place (replicationMode here, shardedMode in
// rediscluster_shards.go), and sets its own status (status).
type mode struct {
	// prerequisites run after the shared ones, before any child is applied.
	prerequisites []phase
	// phases run after the shared children: the mode's own children, then serving Redis.
	phases []phase
	// status sets the mode's status fields and says its conditions (setStatus writes them).
	status func(*cachev1.RedisCluster, *reconcileState) []*metav1.Condition
	// nodes are the mode's views of its nodes, for the node metrics both modes serve and the
	// credential phases (passwords, users), which reach every node alike (everyNode).
	nodes func(*reconcileState) nodesObserved
	// observe observes the nodes again, once the credential phases changed what they take.
	observe func(context.Context, *cachev1.RedisCluster, *reconcileState) error
	// metrics sets the mode's own series, if it has any.
	metrics func(*cachev1.RedisCluster, *reconcileState)
	// parts are what a backup takes a snapshot of each, as this reconcile observed them.
	parts func(*cachev1.RedisCluster, *reconcileState) observedParts
}

func (r *RedisClusterReconciler) modeOf(rc *cachev1.RedisCluster) mode {
	if rc.Spec.Cluster != nil {
		return r.shardedMode()
	}
	return r.replicationMode()
}

// phasesOf are the phases of a reconcile in mode m: the password first (every node needs it),
// the mode's prerequisites, the children both modes have, then the mode's own phases.
func (r *RedisClusterReconciler) phasesOf(m mode) []phase {
	out := []phase{{"Secrets", cachev1.ReasonApplyFailed, r.readSecrets, prerequisite}}
	out = append(out, m.prerequisites...)
	out = append(out,
		phase{"ConfigMap", cachev1.ReasonApplyFailed, r.reconcileConfigMap, appliesChild},
		phase{"Services", cachev1.ReasonApplyFailed, r.reconcileServices, appliesChild},
		phase{"PodDisruptionBudget", cachev1.ReasonApplyFailed, r.reconcilePodDisruptionBudget, appliesChild},
	)
	out = append(out, m.phases...)
	// After the mode's phases, which read the nodes' memory.
	return append(out, phase{"Memory", cachev1.ReasonApplyFailed, r.reconcileMemory, servesRedis})
}

// replicationMode is one primary and its replicas: a StatefulSet whose nodes the operator keeps
// one primary and its replicas (failover, rollout), with passwords, TLS, users, backups and
// restores.
func (r *RedisClusterReconciler) replicationMode() mode {
	return mode{
		prerequisites: []phase{
			{"RestoreSource", cachev1.ReasonApplyFailed, r.reconcileRestoreSource, prerequisite},
		},
		phases: []phase{
			{"StatefulSet", cachev1.ReasonApplyFailed, r.reconcileStatefulSet, appliesChild},
			{"Nodes", cachev1.ReasonApplyFailed, r.observeNodes, servesRedis},
			{"Passwords", cachev1.ReasonAuthenticationFailed, givesCredentials(credentials.Passwords), servesRedis},
			{"TLS", cachev1.ReasonTLSFailed, givesCredentials(credentials.TLS), servesRedis},
			{"LiveSettings", cachev1.ReasonSettingsFailed, giveLiveSettings, servesRedis},
			{"Failover", cachev1.ReasonTopologyFailed, r.reconcileFailover, servesRedis},
			{"RestoreDone", cachev1.ReasonRestoreFailed, r.reconcileRestoreDone, servesRedis},
			{"Rollout", cachev1.ReasonTopologyFailed, r.reconcileRollout, rollout},
			{"RoleLabels", cachev1.ReasonApplyFailed, r.reconcileRoleLabels, servesRedis},
			{"Users", cachev1.ReasonUserRejected, givesCredentials(credentials.Users), servesRedis},
			{"BackupSchedule", cachev1.ReasonApplyFailed, r.reconcileBackupSchedule, servesRedis},
		},
		status: setReplicatedStatus,
		nodes: func(state *reconcileState) nodesObserved {
			return nodesObserved{views: []topology.View{state.replication.view}, stats: state.replication.stats}
		},
		observe: func(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
			state.replication.view = observeReplication(ctx, rc, state)
			return nil
		},
		parts: func(_ *cachev1.RedisCluster, state *reconcileState) observedParts {
			return observedParts{parts: []observedPart{{view: state.replication.view}}}
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
func (r *RedisClusterReconciler) readSecrets(ctx context.Context, _ *cachev1.RedisCluster, state *reconcileState) error {
	return credentials.Secrets(ctx, &state.Cluster, &state.kept.creds, &state.creds, r.SecretResync)
}

// givesCredentials is a phase of package credentials that gives the nodes what they lack.
func givesCredentials(give func(context.Context, *scope.Cluster, *credentials.Memory, *credentials.State) error) func(context.Context, *cachev1.RedisCluster, *reconcileState) error {
	return func(ctx context.Context, _ *cachev1.RedisCluster, state *reconcileState) error {
		return give(ctx, &state.Cluster, &state.kept.creds, &state.creds)
	}
}

func giveLiveSettings(ctx context.Context, _ *cachev1.RedisCluster, state *reconcileState) error {
	return credentials.LiveSettings(ctx, &state.Cluster, &state.kept.creds)
}
