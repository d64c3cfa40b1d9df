// Package controllers holds the RedisCluster reconciler: it applies the children that the
// builders in internal/resources describe, asks internal/topology what the Redis nodes say and
// what to do about it, does it, and writes the RedisCluster's status.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

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
	// SecretResync is how often the password Secret is read again; DefaultSecretResync when zero.
	SecretResync time.Duration
	// MaxRetryDelay caps the back-off after a failed reconcile; DefaultMaxRetryDelay when zero.
	MaxRetryDelay time.Duration
	// OperatorImage is the operator's own image: the restore init container of a RedisCluster
	// created from a backup runs it.
	OperatorImage string
	// BackupsServed is true when the API server serves RedisBackups: spec.backup and
	// spec.restore need them.
	BackupsServed bool

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

// Wake queues a reconcile of the RedisCluster now: one of its Redis nodes' connections broke
// or came back. It never blocks: when the queue of wake-ups is full, the next health check
// (at most CheckInterval away) sees the same.
func (r *RedisClusterReconciler) Wake(key types.NamespacedName) {
	select {
	case r.wakeups() <- event.TypedGenericEvent[types.NamespacedName]{Object: key}:
	default:
	}
}

func (r *RedisClusterReconciler) wakeups() chan event.TypedGenericEvent[types.NamespacedName] {
	r.wakeOnce.Do(func() { r.wake = make(chan event.TypedGenericEvent[types.NamespacedName], 1024) })
	return r.wake
}

// clusterState is what the reconciler remembers of one RedisCluster between reconciles: one
// piece of memory per feature, each with its own lock, written by its feature's file alone
// (another feature asks it through its methods).
type clusterState struct {
	// downtime is how long the primary has not answered (the failure detector).
	downtime topology.Downtime
	// children says whether the children need comparing with the spec at all (apply.go).
	children childrenSeen
	// status is what the last status write and the last failure left (this file).
	status statusMemory
	// observed is what the last reconcile saw of the nodes (this file; backups read it).
	observed observedMemory
	// creds are the credentials as last read (rediscluster_credentials.go).
	creds credsMemory
	// passwords are the passwords each node was given (rediscluster_passwords.go).
	passwords passwordMemory
	// users are the users each node was given (rediscluster_users.go).
	users userMemory
	// tls is each node's certificate (rediscluster_tls.go).
	tls tlsMemory
	// metrics is what the metrics need from one check to the next (rediscluster_metrics.go).
	metrics clusterMetrics
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

// observedMemory is what the last reconcile observed of the nodes: where backups are taken
// from.
type observedMemory struct {
	mu   sync.Mutex
	view topology.View
}

func (o *observedMemory) set(v topology.View) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.view = v
}

func (o *observedMemory) get() topology.View {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.view
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

func (r *RedisClusterReconciler) clusterState(rc *cachev1.RedisCluster) *clusterState {
	return r.stateOf(types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name})
}

func (r *RedisClusterReconciler) stateOf(key types.NamespacedName) *clusterState {
	cs, _ := r.clusters.LoadOrStore(key, &clusterState{})
	return cs.(*clusterState)
}

// reconcileState is what one reconcile learns and does: the phases record outcomes in it, and
// setStatus alone turns them into the status.
type reconcileState struct {
	// written is the RedisCluster as its status was last written (or read): the base of the
	// next status patch.
	written *cachev1.RedisCluster
	creds   credentials
	pods    []corev1.Pod
	// members are the pods as Redis nodes (name, ordinal, address), in both modes: the dialer
	// holds connections to exactly these.
	members []topology.Member
	// dial reaches the members' Redis nodes with the current password.
	dial topology.Dialer
	// failedToStart says why a node's Redis keeps exiting as it starts; empty when none does.
	failedToStart string
	// childrenKnown is true when the ConfigMap, the Services, the PodDisruptionBudget and the
	// StatefulSet matched the spec at this version of the RedisCluster and none changed since:
	// the health check then leaves them alone.
	childrenKnown bool
	// changed is true when this reconcile created or changed a child.
	changed bool
	// created and updated name the children ("Kind name") this reconcile created and changed.
	created, updated []string
	// rolled is true when this reconcile replaced a pod or switched the primary over.
	rolled bool
	// err is the phase that failed, with its reason.
	err *phaseError
	// wait is the first phase that waits (phaseWait), with its reason.
	wait *phaseWait
	// replication is what a reconcile in replication mode learns (rediscluster_replication.go).
	replication replicationState
	// shards is what a reconcile in cluster mode learns (rediscluster_shards.go).
	shards shardsState
}

// primaryMove is a change of primary: announced (FailingOver True) before it starts, done once
// the new primary took over.
type primaryMove struct {
	reason, message string
	from, to        string
	done            bool
	// started is when it was decided.
	started time.Time
}

// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/status,verbs=patch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile applies the children of one RedisCluster, manages its replication, then writes its
// status once. It runs again after CheckInterval: the health check.
func (r *RedisClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rc := &cachev1.RedisCluster{}
	if err := r.Get(ctx, req.NamespacedName, rc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.clusters.Delete(req.NamespacedName)
			forgetMetrics(req.NamespacedName)
			if r.Connections != nil {
				r.Connections.Release(req.NamespacedName)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rc.DeletionTimestamp.IsZero() {
		// The garbage collector removes the children through their owner references.
		return ctrl.Result{}, nil
	}

	cs := r.clusterState(rc)
	if written := cs.status.newerThanCache(rc.ResourceVersion); written != nil {
		// The cache still holds the RedisCluster as it was before this operator's last status
		// write: its recorded primary may be the old one, and deciding on it would change the
		// primary a second time. The watch brings the new version within moments, unless the
		// API server cannot (its etcd stopped): decide on what the write left, which is newer.
		rc = written
	}
	startVersion := rc.ResourceVersion
	state := &reconcileState{written: rc.DeepCopy(), replication: replicationState{view: topology.View{Primary: rc.Status.Primary}}}
	state.childrenKnown = cs.children.unchanged(rc.ResourceVersion)
	m := r.modeOf(rc)
	failedKind := r.runPhases(ctx, rc, state, r.phasesOf(m))

	r.recordChildEvents(rc, state)
	cs.observed.set(state.replication.view)
	setStatus(rc, state, m.status)
	r.recordNodeMetrics(rc, state, time.Now())
	r.recordConditions(rc)
	r.recordStatusEvents(state.written, rc)
	// The versions the cache may still hold once this reconcile's writes are done: the one it
	// started from, and the one an announcement of a primary change wrote meanwhile.
	before := []string{startVersion, rc.ResourceVersion}
	err := r.patchStatus(ctx, state.written, rc)
	if rc.ResourceVersion != startVersion {
		// What the writes left: this write's answer, or the announcement's when this one failed.
		written := state.written
		if err == nil {
			written = rc
		}
		cs.status.wroteStatusOver(written.DeepCopy(), before...)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	// Counted once the status records the new primary: a status write that fails leaves the
	// change to the next reconcile, which would count it again.
	if state.replication.move != nil && state.replication.move.done {
		recordPrimaryChange(rc, state.replication.move, time.Now())
	}
	next := r.requeueAfter(state)
	cs.status.checkAfterFailure(state, failedKind, next)
	if state.err != nil {
		// controller-runtime logs it, once, and retries with backoff (bounded by checkBound).
		return ctrl.Result{}, state.err.logged()
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// checkAfterFailure records when the health check is due after a reconcile whose failure left
// Redis served (a refused child: failover still ran), and forgets it after any other.
func (s *statusMemory) checkAfterFailure(state *reconcileState, failedKind phaseKind, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkDue = time.Time{}
	if state.err != nil && failedKind == appliesChild && next > 0 {
		s.checkDue = time.Now().Add(next)
	}
}

// checkBound is the workqueue's rate limiter, bounded by the health check: a failed reconcile
// is retried with exponential back-off, but never later than the health check it would have
// asked for had it not failed. A spec the API server refuses stops the children from changing,
// not the failure detector: without the bound, a primary that hangs while the spec is refused
// would wait for the refused spec's next retry (up to MaxRetryDelay) to be replaced.
type checkBound struct {
	workqueue.TypedRateLimiter[reconcile.Request]
	r *RedisClusterReconciler
}

// When bounds the retry of the reconcile that just failed, once: the due time is taken, so that a
// later failure that did not record one (a status write the API server refused, a failed Get)
// keeps its back-off instead of retrying at once against a due time already past.
func (b checkBound) When(req reconcile.Request) time.Duration {
	backoff := b.TypedRateLimiter.When(req)
	cs, ok := b.r.clusters.Load(req.NamespacedName)
	if !ok {
		return backoff
	}
	due := cs.(*clusterState).status.takeCheckDue()
	if due.IsZero() {
		return backoff
	}
	return min(backoff, max(time.Until(due), 0))
}

func (s *statusMemory) takeCheckDue() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	due := s.checkDue
	s.checkDue = time.Time{}
	return due
}

// requeueAfter is the health check's period while there are Redis nodes to check. Without
// pods there is nothing to check: their creation triggers the next reconcile.
// A phase that waits asks for its own time when it is sooner.
func (r *RedisClusterReconciler) requeueAfter(state *reconcileState) time.Duration {
	next := r.healthCheckAfter(state)
	if w := state.wait; w != nil && w.after > 0 && (next == 0 || w.after < next) {
		next = w.after
	}
	return next
}

func (r *RedisClusterReconciler) healthCheckAfter(state *reconcileState) time.Duration {
	if len(state.replication.view.Nodes) == 0 && len(state.shards.members) == 0 {
		return 0
	}
	interval := r.CheckInterval
	if interval == 0 {
		interval = DefaultCheckInterval
	}
	return state.replication.round.NextCheck(interval)
}

// SetupWithManager watches RedisClusters, the children they own, their pods, and the held
// connections to their Redis nodes.
func (r *RedisClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podOwnerIndex, indexPodOwner); err != nil {
		return fmt.Errorf("indexing pods by RedisCluster: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Connections != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups(), handler.TypedFuncs[types.NamespacedName, reconcile.Request]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[types.NamespacedName], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				q.Add(reconcile.Request{NamespacedName: e.Object})
			},
		}))
	}
	maxDelay := r.MaxRetryDelay
	if maxDelay == 0 {
		maxDelay = DefaultMaxRetryDelay
	}
	if r.BackupsServed {
		// A RedisCluster restoring a backup starts once the backup completes.
		b = b.Watches(&cachev1.RedisBackup{}, handler.EnqueueRequestsFromMapFunc(r.clustersWaitingFor))
	}
	return b.
		WithOptions(controller.Options{RateLimiter: checkBound{r: r, TypedRateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxDelay),
			// controller-runtime's overall bound, kept: 10 retries a second, bursts of 100.
			&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		)}}).
		For(&cachev1.RedisCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&appsv1.StatefulSet{}, r.childEvents(mgr)).
		Watches(&corev1.Service{}, r.childEvents(mgr)).
		Watches(&corev1.ConfigMap{}, r.childEvents(mgr)).
		Watches(&policyv1.PodDisruptionBudget{}, r.childEvents(mgr)).
		// Pods belong to the StatefulSet; their instance label leads back to the RedisCluster.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToRedisCluster)).
		Named("rediscluster").
		Complete(r)
}

// childEvents queues the RedisCluster that controls a child when the child changes or goes,
// and tells the RedisCluster's state that its children must be compared with the spec again.
// The creation of a child wakes nothing: the reconcile that created it goes on, and a second
// reconcile for it would only read a cache that may not yet hold the status just written (and
// write it again). The informers' first listing is dropped too: every RedisCluster is listed
// then as well.
func (r *RedisClusterReconciler) childEvents(mgr ctrl.Manager) handler.EventHandler {
	enqueue := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &cachev1.RedisCluster{}, handler.OnlyControllerOwner())
	changed := func(obj client.Object) {
		if owner := metav1.GetControllerOf(obj); owner != nil && owner.Kind == "RedisCluster" {
			r.stateOf(types.NamespacedName{Namespace: obj.GetNamespace(), Name: owner.Name}).children.changed()
		}
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.ObjectNew)
			enqueue.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.Object)
			enqueue.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			changed(e.Object)
			enqueue.Generic(ctx, e, q)
		},
	}
}

func podToRedisCluster(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[resources.LabelInstance]
	if name == "" && obj.GetLabels()[resources.LabelComponent] == resources.RestoreComponent {
		// The pod that fills the first node's claim before the StatefulSet exists.
		name = obj.GetLabels()[resources.LabelBackupCluster]
	}
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
