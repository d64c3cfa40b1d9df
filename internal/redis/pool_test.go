package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
)

const password = "pool-test-password"

func startServer(t *testing.T) *redistest.Server {
	t.Helper()
	s, err := redistest.StartIn(t.TempDir(), "node-0", "requirepass "+password+"\n")
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	return s
}

// stats reads INFO fields from the server over a connection of the test's own.
func stats(t require.TestingT, s *redistest.Server) (connected, received int) {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: password, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	info, err := c.Info(context.Background(), "clients", "stats").Result()
	require.NoError(t, err)
	field := func(name string) int {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				return n
			}
		}
		return -1
	}
	// The test's own connection is counted in both; leave it out.
	return field("connected_clients") - 1, field("total_connections_received") - 1
}

// subscribed is the number of channels the server's clients subscribe to.
func subscribed(t require.TestingT, s *redistest.Server) int {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: password, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	channels, err := c.PubSubNumSub(context.Background(), "redis-operator:watch").Result()
	require.NoError(t, err)
	return int(channels["redis-operator:watch"])
}

func TestHeldConnectionsAreReusedByEveryCheck(t *testing.T) {
	s := startServer(t)
	pool := redis.NewPool(redis.Options{}, func(string) {})
	defer pool.Close()

	// Given a held node, checked once
	dial := pool.Hold("rc", redis.Login{Password: password}, []string{s.Addr()})
	check := func() {
		n := dial(s.Addr())
		_, err := n.Replication(context.Background())
		require.NoError(t, err)
		require.NoError(t, n.Close())
	}
	check()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		connected, _ := stats(c, s)
		assert.Equal(c, 2, connected, "the command connection and the watch")
	}, 5*time.Second, 10*time.Millisecond)
	_, before := stats(t, s)
	openedBefore := testutil.ToFloat64(redis.ConnectionsOpened)

	// When it is checked again and again, through fresh Dialers as every reconcile makes
	for range 20 {
		dial = pool.Hold("rc", redis.Login{Password: password}, []string{s.Addr()})
		check()
	}

	// Then no connection was opened for them, as the server and the operator's metric say
	connected, after := stats(t, s)
	assert.Equal(t, 2, connected)
	assert.Equal(t, before+1, after, "only the test's own second stats connection is new")
	assert.Equal(t, openedBefore, testutil.ToFloat64(redis.ConnectionsOpened))
}

func TestADeadNodeIsReportedAtOnceAndItsReturnToo(t *testing.T) {
	s := startServer(t)
	var changes atomic.Int32
	pool := redis.NewPool(redis.Options{}, func(owner string) {
		assert.Equal(t, "rc", owner)
		changes.Add(1)
	})
	defer pool.Close()
	pool.Hold("rc", redis.Login{Password: password}, []string{s.Addr()})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1, subscribed(c, s), "the watch")
	}, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, changes.Load(), "a watch that connects the first time is no change")

	// When the redis-server is killed, with no check running
	s.Kill()

	// Then the owner hears of it, long before a 1s check would have run
	require.Eventually(t, func() bool { return changes.Load() == 1 }, 5*time.Second, time.Millisecond)

	// and hears again when the node is back
	require.NoError(t, s.Restart())
	require.Eventually(t, func() bool { return changes.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
}

func TestNodesNoLongerHeldAreClosed(t *testing.T) {
	a, b := startServer(t), startServer(t)
	pool := redis.NewPool(redis.Options{}, func(string) {})
	defer pool.Close()
	pool.Hold("rc", redis.Login{Password: password}, []string{a.Addr(), b.Addr()})
	for _, s := range []*redistest.Server{a, b} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			connected, _ := stats(c, s)
			assert.Equal(c, 1, connected)
		}, 5*time.Second, 10*time.Millisecond)
	}
	require.Equal(t, 2, pool.Held())

	// When b's pod goes
	pool.Hold("rc", redis.Login{Password: password}, []string{a.Addr()})

	// Then its connections are closed, and a's kept
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		connected, _ := stats(c, b)
		assert.Zero(c, connected)
	}, 5*time.Second, 10*time.Millisecond)
	connected, _ := stats(t, a)
	assert.Equal(t, 1, connected)

	// and when the RedisCluster goes, all of them
	pool.Release("rc")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		connected, _ := stats(c, a)
		assert.Zero(c, connected)
	}, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, pool.Held())
}

// heldAndChecked starts a node, holds it in a new pool and checks it once.
func heldAndChecked(t *testing.T) (*redistest.Server, *redis.Pool[string], redis.Dialer) {
	t.Helper()
	s := startServer(t)
	pool := redis.NewPool(redis.Options{}, func(string) {})
	t.Cleanup(pool.Close)
	dial := pool.Hold("rc", redis.Login{Password: password}, []string{s.Addr()})
	_, err := dial(s.Addr()).Replication(context.Background())
	require.NoError(t, err)
	return s, pool, dial
}

func TestAHeldConnectionStillTellsWhetherTheNodeTakesThePassword(t *testing.T) {
	s, pool, dial := heldAndChecked(t)

	// When the node's password changes under the held connection, which stays logged in
	ctx := context.Background()
	require.NoError(t, dial(s.Addr()).AddPassword(ctx, "new-password"))
	require.NoError(t, dial(s.Addr()).RemovePassword(ctx, password))

	// Then the next check through it says the node refuses the password
	_, err := dial(s.Addr()).Replication(context.Background())
	require.ErrorIs(t, err, redis.ErrAuth)

	// and a Hold with the new password logs in with it
	dial = pool.Hold("rc", redis.Login{Password: "new-password"}, []string{s.Addr()})
	_, err = dial(s.Addr()).Replication(context.Background())
	require.NoError(t, err)
	require.NoError(t, dial(s.Addr()).AddPassword(ctx, password), "the stats helper logs in with it")
	require.NoError(t, dial(s.Addr()).RemovePassword(ctx, "new-password"))
}

func TestANodeTakesBothPasswordsUntilTheOldOneIsRemoved(t *testing.T) {
	s, _, dial := heldAndChecked(t)
	ctx := context.Background()
	login := func(pw string) error {
		c := redis.NewDialer(redis.Options{Password: pw})(s.Addr())
		defer c.Close()
		_, err := c.Replication(ctx)
		return err
	}

	// When a second password is added, both work
	require.NoError(t, dial(s.Addr()).AddPassword(ctx, "second"))
	require.NoError(t, login(password))
	require.NoError(t, login("second"))

	// and when the first is removed, only the second does; removing it again is no error
	require.NoError(t, dial(s.Addr()).RemovePassword(ctx, password))
	require.ErrorIs(t, login(password), redis.ErrAuth)
	require.NoError(t, login("second"))
	require.NoError(t, dial(s.Addr()).RemovePassword(ctx, password))
}

func TestAHeldNodeThatIsBackAnswersTheNextCheck(t *testing.T) {
	s, _, dial := heldAndChecked(t)

	// When the node dies, a check says nothing listens there
	s.Kill()
	_, err := dial(s.Addr()).Replication(context.Background())
	require.ErrorIs(t, err, redis.ErrRefused)

	// and when it is back, the very next check reaches it (go-redis alone would repeat the
	// dial error for up to a second)
	require.NoError(t, s.Restart())
	_, err = dial(s.Addr()).Replication(context.Background())
	require.NoError(t, err)
}
