package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

// An operator container that crashed left its lease held for up to a minute. Restarted by the
// kubelet in the same pod, it leads again at once; another pod waits the lease out.
func TestARestartedOperatorLeadsAgainAtOnceAndAnotherPodWaits(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(ctx, c, "leader")
	require.NoError(t, err)

	// Given the lease as a crashed leader leaves it: held by its pod, renewed just now, 60s long
	now := metav1.NewMicroTime(time.Now())
	require.NoError(t, c.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "redis-operator.cache.example.com", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("redis-operator-7d9f-abcde"), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &now, RenewTime: &now},
	}))
	start := func(identity string) manager.Manager {
		mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0",
			SkipNameValidation: true, LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionIdentity: identity})
		require.NoError(t, err)
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = mgr.Start(mctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return mgr
	}

	// When another pod's operator starts, it does not lead while the lease runs
	other := start("redis-operator-7d9f-fghij")
	select {
	case <-other.Elected():
		t.Fatal("another pod led while the crashed leader's lease ran")
	case <-time.After(5 * time.Second):
	}

	// When the crashed pod's operator starts again, it leads at once
	started := time.Now()
	restarted := start("redis-operator-7d9f-abcde")
	select {
	case <-restarted.Elected():
		t.Logf("led again %.2fs after it started", time.Since(started).Seconds())
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted operator did not lead within 10s of its start")
	}
	select {
	case <-other.Elected():
		t.Fatal("two leaders")
	default:
	}
}

// A leader stopped (its pod deleted, drained) while a reconcile does not end gives its lease up
// before the kubelet's SIGKILL (terminationGracePeriodSeconds, 10): the next replica leads at
// once, not a lease duration (a minute) later.
func TestAStoppedLeaderGivesItsLeaseUpWithinThePodsGracePeriod(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(ctx, c, "handover")
	require.NoError(t, err)
	mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0",
		SkipNameValidation: true, LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionIdentity: "redis-operator-7d9f-abcde"})
	require.NoError(t, err)
	// Given a leader with work that outlasts its stop by far (a reconcile waiting on a node)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	require.NoError(t, mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		<-stuck
		return nil
	})))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}

	// When it is stopped, as SIGTERM stops it
	stopped := time.Now()
	cancel()

	// Then its lease is given up within the pod's grace period, and Start returns
	lease := &coordinationv1.Lease{}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "redis-operator.cache.example.com"}, lease) == nil &&
			ptr.Deref(lease.Spec.HolderIdentity, "") == ""
	}, 10*time.Second, 100*time.Millisecond, "the lease given up within 10s of the stop")
	t.Logf("lease given up %.2fs after the stop", time.Since(stopped).Seconds())
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not return within 10s of its stop")
	}
}
