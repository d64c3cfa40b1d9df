// Package controllers is the RedisCluster reconciler: Reconcile gets the RedisCluster, runs its
// mode's phases (rediscluster_modes.go lists them) and writes the status once. The phases
// themselves are functions in the packages below it, each handed a scope.Cluster and its own
// feature's state: replication and clustermode (the two modes), credentials, redisbackup
// (schedule and restore), metrics. This package keeps what ties them: the reconciler's memory
// of each RedisCluster, the pods and their dialer, the shared children, the order of the phases
// and the one status writer.
package controllers

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/controllers/replication"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
)

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

// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/status,verbs=patch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile applies the children of one RedisCluster, manages its replication, then writes its
// status once. It runs again after CheckInterval: the health check.
func (r *RedisClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx, cancel := withStopGrace(ctx, stopGrace)
	defer cancel()
	rc := &cachev1.RedisCluster{}
	if err := r.Get(ctx, req.NamespacedName, rc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.forget(req.NamespacedName)
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
	m := modeOf(rc)
	state := &reconcileState{mode: m, written: rc.DeepCopy(), kept: cs, replication: replication.NewState(rc),
		settings: settings{SlotMovePace: r.SlotMovePace, SecretResync: r.SecretResync, NodesReadable: r.NodesReadable, Connections: r.Connections}}
	state.Cluster = scope.Cluster{RC: rc, Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, DialAs: r.Dial,
		OperatorImage: r.OperatorImage, RedisImages: r.RedisImages, BackupsServed: r.BackupsServed, Metrics: &cs.metrics,
		ChildrenKnown:   cs.children.unchanged(rc.ResourceVersion),
		ChildrenMatched: func() { cs.children.compared(rc.ResourceVersion) },
		Nodes:           state.everyNode,
		Observe:         func(ctx context.Context) error { m.reobserve(ctx, state); return nil },
		WriteStatus: func(ctx context.Context) error {
			if err := r.patchStatus(ctx, state.written, rc); err != nil {
				return err
			}
			state.written = rc.DeepCopy()
			return nil
		},
		OperatorRefused: cs.creds.ForgetOperatorUser,
	}
	failedKind := r.runPhases(ctx, rc, state, phasesOf(m))

	r.recordChildEvents(rc, state)
	cs.observed.set(m.parts(rc, state))
	setStatus(rc, state, m.status)
	observed := m.nodes(state)
	metrics.RecordNodes(rc, &cs.metrics, observed.views, observed.stats, time.Now())
	if m.metrics != nil {
		m.metrics(rc, state)
	}
	metrics.RecordConditions(rc, &cs.metrics)
	r.recordStatusEvents(state.written, rc)
	if err := r.writeStatus(ctx, cs, state, rc, startVersion); err != nil {
		return ctrl.Result{}, err
	}
	// Counted once the status records the new primary: a status write that fails leaves the
	// change to the next reconcile, which would count it again.
	if move := state.replication.Move; move != nil && move.Done {
		metrics.RecordPrimaryChange(rc, move.Reason, move.Started, time.Now())
	}
	next, priority := r.requeueAfter(state)
	cs.status.checkAfterFailure(state, failedKind, next)
	if state.Failed != nil {
		// controller-runtime logs it, once, and retries with backoff (bounded by checkBound).
		return ctrl.Result{Priority: ptr.To(eventPriority)}, state.Failed.Logged()
	}
	return ctrl.Result{RequeueAfter: next, Priority: ptr.To(priority)}, nil
}

// The workqueue (controller-runtime's priority queue) serves the higher priority first. Health
// checks come due together on their ticks (untilCheckTick); a reconcile for anything else (a
// node's connection that broke, a child that changed, a phase's wait, a retry) goes before the
// checks still queued, so that a failover does not wait behind every RedisCluster's check.
const (
	healthCheckPriority = -1
	eventPriority       = 0
)

// forget drops what the reconciler holds for a RedisCluster that is gone: its memory, its
// metrics' series and its Redis connections.
func (r *RedisClusterReconciler) forget(key types.NamespacedName) {
	r.clusters.Delete(key)
	metrics.Forget(key)
	if r.Connections != nil {
		r.Connections.Release(key)
	}
}

// writeStatus writes the status the phases left (only when it changed), and remembers what this
// reconcile's writes left for the next one, whose cache may still be behind them.
func (r *RedisClusterReconciler) writeStatus(ctx context.Context, cs *clusterState, state *reconcileState, rc *cachev1.RedisCluster, startVersion string) error {
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
	return err
}

// checkAfterFailure records when the health check is due after a reconcile whose failure left
// Redis served (a refused child: failover still ran), and forgets it after any other.
func (s *statusMemory) checkAfterFailure(state *reconcileState, failedKind phaseKind, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkDue = time.Time{}
	if state.Failed != nil && failedKind == appliesChild && next > 0 {
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

// requeueAfter is the health check's period while there are Redis nodes to check, and its
// priority. Without pods there is nothing to check: their creation triggers the next reconcile.
// A phase that waits asks for its own time when it is sooner, at the priority of events.
func (r *RedisClusterReconciler) requeueAfter(state *reconcileState) (time.Duration, int) {
	next, onTick := r.healthCheckAfter(state)
	priority := eventPriority
	if onTick {
		priority = healthCheckPriority
	}
	if w := state.Waiting; w != nil && w.After > 0 && (next == 0 || w.After < next) {
		next, priority = w.After, eventPriority
	}
	return next, priority
}

// healthCheckAfter is when the next health check is due, and whether on its tick (not sooner,
// for a plan that waits out a timeout or expects the view to change at once).
func (r *RedisClusterReconciler) healthCheckAfter(state *reconcileState) (time.Duration, bool) {
	if !state.replication.Observed() && !state.shards.Observed() {
		return 0, false
	}
	interval := r.CheckInterval
	if interval == 0 {
		interval = DefaultCheckInterval
	}
	if next := state.mode.nextCheck(state, interval); next < interval {
		return next, false
	}
	return untilCheckTick(time.Now(), interval), true
}

// untilCheckTick is the time from now to the next multiple of interval since the Unix epoch, in
// (0, interval]: every RedisCluster's health check falls on the same ticks. Checks spread over
// the interval wake the process once per node and per answer, and the wake-ups, not the round
// trips, were most of the checks' cost: 100 RedisClusters' checks took 11.6% of a core spread,
// 6.0% on ten ticks a second and 4.4% on one (2026-12-05, docs/benchmarks.md). On one tick a
// failover's reconcile would queue behind every RedisCluster's check; the checks' lower priority
// (healthCheckPriority) lets it go first. A node is still checked once per interval; a check
// that a plan's wait asks for sooner keeps its time.
func untilCheckTick(now time.Time, interval time.Duration) time.Duration {
	return interval - time.Duration(now.UnixNano()%int64(interval))
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
		b = b.Watches(&cachev1.RedisBackup{}, handler.EnqueueRequestsFromMapFunc(redisbackup.ClustersWaitingFor(r.Client)))
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

// stopGrace is how long a reconcile runs on once the operator stops (its pod deleted or evicted),
// within the pod's terminationGracePeriodSeconds (10 s).
const stopGrace = 5 * time.Second

// withStopGrace is ctx, ended stopGrace after parent ends rather than at once. A reconcile cut
// off when the operator stops (the drain that evicts the primary's pod evicts the operator's
// too) did its switchover but not the role labels and status that follow: the Service had no
// primary until the next operator led (3 s on the local cluster). The lease is released only
// once every reconcile returned, so no other operator acts meanwhile.
func withStopGrace(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		timer := time.AfterFunc(grace, cancel)
		context.AfterFunc(ctx, func() { timer.Stop() })
	})
	return ctx, func() { stop(); cancel() }
}
