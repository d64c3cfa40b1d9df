package operator

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// A leader that has not renewed its lease within the renew deadline (frozen, cut off, or
// slow) sends nothing to Redis and writes nothing to the API server, from the deadline on, without
// waiting for client-go to tell it; a renewal opens the fence again, a release closes it at once.
// The renewals are driven by the test instead of client-go's elector, so that the deadline
// passes at a known time; the lease, the API server and redis-server are real.
func TestALeaderThatHasNotRenewedItsLeaseActsOnNothing(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: NewScheme()})
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(ctx, c, "fence")
	require.NoError(t, err)
	server, err := redistest.StartIn(t.TempDir(), "node", "")
	require.NoError(t, err)
	t.Cleanup(server.Kill)
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = raw.Close() })
	commands := func() int64 {
		stats, err := raw.Info(ctx, "stats").Result()
		require.NoError(t, err)
		_, after, _ := strings.Cut(stats, "total_commands_processed:")
		n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(after, "\n", 2)[0]), 10, 64)
		require.NoError(t, err)
		return n
	}

	// Given a process holding the lease, with a renew deadline of 1s
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, leaderElectionID, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "redis-operator-abc"})
	require.NoError(t, err)
	const renewDeadline = time.Second
	fence := newLeaseFence(lock, renewDeadline)
	require.ErrorIs(t, fence.Check(), ErrNotLeading, "not leading before it took the lease")
	record := func() resourcelock.LeaderElectionRecord {
		now := metav1.NewTime(time.Now())
		return resourcelock.LeaderElectionRecord{HolderIdentity: "redis-operator-abc", LeaseDurationSeconds: 2,
			AcquireTime: now, RenewTime: now}
	}
	require.NoError(t, fence.Create(ctx, record()))
	node := redis.NewDialer(redis.Options{Fence: fence.Check})(server.Addr())
	t.Cleanup(func() { _ = node.Close() })
	writes := fencedClient{Client: c, fence: fence.Check}
	configMap := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}

	// While the renewal is recent, it talks to Redis and writes to the API server
	require.NoError(t, fence.Check())
	require.NoError(t, node.SetConfig(ctx, "maxmemory-policy", "allkeys-lru"))
	require.NoError(t, writes.Create(ctx, configMap("while-leading")))

	// When the renew deadline passes without a renewal
	time.Sleep(renewDeadline)
	before := commands()
	err = node.SetConfig(ctx, "maxmemory-policy", "noeviction")
	err2 := writes.Create(ctx, configMap("after-the-deadline"))
	_, err3 := node.Replication(ctx)
	status := configMap("while-leading")
	err4 := writes.Status().Update(ctx, status)

	// Then nothing reached Redis nor the API server, and each refusal says why
	require.ErrorIs(t, err, ErrNotLeading)
	assert.ErrorContains(t, err, "renew deadline is 1s")
	assert.ErrorIs(t, err2, ErrNotLeading)
	assert.ErrorIs(t, err3, ErrNotLeading)
	assert.ErrorIs(t, err4, ErrNotLeading)
	assert.Equal(t, before+1, commands(), "only the test's own INFO reached Redis")
	policy, err := raw.ConfigGet(ctx, "maxmemory-policy").Result()
	require.NoError(t, err)
	assert.Equal(t, "allkeys-lru", policy["maxmemory-policy"])
	got := &corev1.ConfigMap{}
	assert.Error(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after-the-deadline"}, got), "not created")

	// When it renews, it acts again
	require.NoError(t, fence.Update(ctx, record()))
	require.NoError(t, node.SetConfig(ctx, "maxmemory-policy", "noeviction"))

	// When it releases the lease (an empty holder, as client-go's release writes), it stops at once
	require.NoError(t, fence.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}))
	assert.ErrorIs(t, node.SetConfig(ctx, "maxmemory-policy", "allkeys-lru"), ErrNotLeading)
	assert.ErrorIs(t, fence.Check(), ErrNotLeading)
}
