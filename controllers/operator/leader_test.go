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
