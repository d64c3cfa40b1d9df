package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

// An operator container that crashed left its lease held for up to a minute. Restarted by the
// kubelet in the same pod, it leads again at once; another pod waits the lease out.
func TestARestartedOperatorLeadsAgainAtOnceAndAnotherPodWaits(t *testing.T) {
	cfg, c, ns := leaseNamespace(t, "leader")
	ctx := context.Background()

	// Given the lease as a crashed leader leaves it: held by its pod, renewed just now, 60s long
	now := metav1.NewMicroTime(time.Now())
	require.NoError(t, c.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "redis-operator.cache.example.com", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("redis-operator-7d9f-abcde"), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &now, RenewTime: &now},
	}))

	// When another pod's operator starts, it does not lead while the lease runs
	other, _, _ := startElecting(t, cfg, ns, "redis-operator-7d9f-fghij")
	select {
	case <-other.Elected():
		t.Fatal("another pod led while the crashed leader's lease ran")
	case <-time.After(5 * time.Second):
	}

	// When the crashed pod's operator starts again, it leads at once
	started := time.Now()
	restarted, _, _ := startElecting(t, cfg, ns, "redis-operator-7d9f-abcde")
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
	cfg, c, ns := leaseNamespace(t, "handover")
	ctx := context.Background()
	// Given a leader with work that outlasts its stop by far (a reconcile waiting on a node)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	mgr, stop, done := startElecting(t, cfg, ns, "redis-operator-7d9f-abcde", manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		<-stuck
		return nil
	}))
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}

	// When it is stopped, as SIGTERM stops it
	stopped := time.Now()
	stop()

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

// leaseNamespace is an API server of the test's own, a client of it, and a namespace for the
// operators' lease.
func leaseNamespace(t *testing.T, name string) (*rest.Config, client.Client, string) {
	t.Helper()
	_, cfg := testenv.StartFor(t)
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(context.Background(), c, name)
	require.NoError(t, err)
	return cfg, c, ns
}

// startElecting starts the operator of pod identity, electing its leader in ns, with runnables
// added; stop stops it as SIGTERM does, and done is closed when its Start has returned. It is
// stopped when the test ends.
func startElecting(t *testing.T, cfg *rest.Config, ns, identity string, runnables ...manager.Runnable) (mgr manager.Manager, stop func(), done <-chan struct{}) {
	t.Helper()
	mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0",
		SkipNameValidation: true, LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionIdentity: identity})
	require.NoError(t, err)
	for _, r := range runnables {
		require.NoError(t, mgr.Add(r))
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() { defer close(returned); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-returned })
	return mgr, cancel, returned
}
