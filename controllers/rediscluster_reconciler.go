package controllers

import (
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/clustermode"
	"github.com/org/redis-operator/controllers/credentials"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/replication"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/internal/topology"
)

// The RedisCluster reconciler's type, its settings, and what it knows: what it remembers of
// each RedisCluster between reconciles (clusterState) and what one reconcile learns and does
// (reconcileState). Every phase file reads these; Reconcile and the watches are in
// rediscluster_controller.go.

// DefaultMaxRetryDelay caps the back-off after a failed reconcile. Some failures are mended
// by a change the operator is not told about: it does not watch Secrets, so a password Secret
// created after its RedisCluster is seen at the next retry. With controller-runtime's cap of
// 1000s that retry could be 16 minutes away; a RedisCluster that cannot be carried out costs a
// reconcile a minute.
const DefaultMaxRetryDelay = time.Minute

// DefaultCheckInterval is how often every RedisCluster's Redis nodes are checked when nothing
// else triggers a reconcile: the failure detector's period.
const DefaultCheckInterval = time.Second

// RedisClusterReconciler makes a RedisCluster's children match its spec, keeps its Redis nodes
// one primary and its replicas, and reports what it sees.
type RedisClusterReconciler struct {
	client.Client
	// APIReader reads Secrets by name, uncached: the operator never lists or watches Secrets.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Dial opens Redis connections of their own with a password: for the previous password
	// during a rotation, and for every check when Connections is nil.
	Dial func(auth.Login) topology.Dialer
	// Connections holds one connection per Redis node for every check and command, and wakes
	// the RedisCluster (Wake) the moment one of its nodes' connections breaks or comes back.
	Connections HeldConnections
	// CheckInterval is the period of the health check; DefaultCheckInterval when zero.
	CheckInterval time.Duration
	// SlotMovePace is how hard moving slots presses on the primaries; shards.DefaultPace when
	// zero.
	SlotMovePace shards.Pace
	// SecretResync is how often the password Secret is read again; DefaultSecretResync when zero.
	SecretResync time.Duration
	// MaxRetryDelay caps the back-off after a failed reconcile; DefaultMaxRetryDelay when zero.
	MaxRetryDelay time.Duration
	// OperatorImage is the operator's own image: the restore init container of a RedisCluster
	// created from a backup runs it.
	OperatorImage string
	// RedisImages are the Redis images by version that a RedisCluster without spec.image runs
	// (the RELATED_IMAGE_REDIS_* variables); redis:<version> for the others.
	RedisImages resources.RedisImages
	// BackupsServed is true when the API server serves RedisBackups: spec.backup and
	// spec.restore need them.
	BackupsServed bool
	// NodesReadable is true when the operator may watch nodes (an older bundle's RBAC does not
	// let it): Ready then names the pods on machines that are not ready.
	NodesReadable bool

	clusters sync.Map // types.NamespacedName -> *clusterState

	wakeOnce sync.Once
	wake     chan event.TypedGenericEvent[types.NamespacedName]
}

// HeldConnections keep one connection per Redis node of each RedisCluster (redis.Pool does).
type HeldConnections interface {
	// Hold keeps connections to exactly addrs for the RedisCluster, logged in with login, and
	// dials through them.
	Hold(cluster types.NamespacedName, login auth.Login, addrs []string) topology.Dialer
	// Release closes the RedisCluster's connections.
	Release(cluster types.NamespacedName)
}

// clusterState is what the reconciler remembers of one RedisCluster between reconciles: one
// piece of memory per feature, each with its own lock, written by its feature's file alone
// (another feature asks it through its methods).
type clusterState struct {
	// replication is what replication mode remembers (the failure detector).
	replication replication.Memory
	// children says whether the children need comparing with the spec at all (apply.go).
	children childrenSeen
	// status is what the last status write and the last failure left (this file; the requeue reads it in rediscluster_controller.go).
	status statusMemory
	// observed is what the last reconcile saw of the nodes (rediscluster_snapshots.go; backups read it).
	observed observedMemory
	// creds are the credentials as last read, and what each node took of them (package
	// credentials).
	creds credentials.Memory
	// memory is each node's last memory reading and the OOM kills reported (rediscluster_memory.go).
	memory memoryMemory
	// clustermode is what cluster mode remembers (the keys each shard held when last seen
	// serving).
	clustermode clustermode.Memory
	// metrics is what the metrics need from one check to the next (package metrics).
	metrics metrics.Memory
}

// statusMemory is what the reconciler's own writes and failures left.
type statusMemory struct {
	mu sync.Mutex
	// writtenOver are the resourceVersions the RedisCluster had before this operator's last
	// status write, in the reconcile that made it: a cached copy still at one is behind.
	writtenOver []string
	// written is the RedisCluster as that write left it (as the API server answered).
	written *cachev1.RedisCluster
	// checkDue is when the health check is due after a reconcile that failed to apply a child
	// but still served Redis; zero after any other reconcile, and once checkBound has bounded
	// that reconcile's retry.
	checkDue time.Time
}

// newerThanCache is the RedisCluster as this operator's last status write left it, when the
// cache still holds it as it was before that write (at resourceVersion); nil when the cache is
// not behind. The write's answer is newer than the cache's copy and holds the status the
// operator recorded (the primary above all).
func (s *statusMemory) newerThanCache(resourceVersion string) *cachev1.RedisCluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resourceVersion == "" || s.written == nil || !slices.Contains(s.writtenOver, resourceVersion) {
		return nil
	}
	return s.written.DeepCopy()
}

// wroteStatusOver records a status write that left the RedisCluster as written, over the
// resourceVersions it had before.
func (s *statusMemory) wroteStatusOver(written *cachev1.RedisCluster, resourceVersions ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written, s.writtenOver = written, resourceVersions
}

func (r *RedisClusterReconciler) stateOf(key types.NamespacedName) *clusterState {
	cs, _ := r.clusters.LoadOrStore(key, &clusterState{})
	return cs.(*clusterState)
}

// reconcileState is what one reconcile learns and does: the phases record outcomes in it, and
// setStatus alone turns them into the status.
type reconcileState struct {
	// mode is the RedisCluster's mode (modeOf), chosen once per reconcile.
	mode mode
	// written is the RedisCluster as its status was last written (or read): the base of the
	// next status patch.
	written *cachev1.RedisCluster
	scope.Cluster
	// settings are the reconciler's settings that phases read.
	settings settings
	// kept is what the reconciler remembers of this RedisCluster.
	kept  *clusterState
	creds credentials.State
	// backupScheduled is when spec.backup's schedule last created a RedisBackup
	// (redisbackup.Schedule).
	backupScheduled *metav1.Time
	// replication is what a reconcile in replication mode learns (package replication).
	replication replication.State
	// shards is what a reconcile in cluster mode learns (package clustermode).
	shards clustermode.State
	// memory is what a reconcile learns of the nodes' memory, in either mode (rediscluster_memory.go).
	memory memoryState
}

// settings are the reconciler's settings that a reconcile's phases read (the reconciler's fields
// of the same names).
type settings struct {
	SlotMovePace  shards.Pace
	SecretResync  time.Duration
	NodesReadable bool
	Connections   HeldConnections
}

func (r *RedisClusterReconciler) clusterState(rc *cachev1.RedisCluster) *clusterState {
	return r.stateOf(types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name})
}
