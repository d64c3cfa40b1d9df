package topology_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/topology"
	"github.com/org/redis-operator/test/podrunner"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// cluster is a Redis cluster of real redis-server processes, run with the operator's redis.conf
// and managed by the operator's topology code, as the controller manages pods.
type cluster struct {
	t        *testing.T
	servers  []*redistest.Server
	exec     topology.Executor
	policy   topology.Policy
	downtime topology.Downtime

	mu      sync.Mutex
	primary string
}

func newCluster(t *testing.T, n int, password string) *cluster {
	t.Helper()
	return newClusterOf(t, testenv.RedisCluster("test", "sessions", int32(n)), password)
}

// newClusterOf runs the nodes of rc, with the redis.conf its spec gives.
func newClusterOf(t *testing.T, rc *cachev1.RedisCluster, password string) *cluster {
	t.Helper()
	c := &cluster{
		t:      t,
		exec:   topology.Executor{Dial: redis.NewDialer(redis.Options{Password: password, Timeout: 300 * time.Millisecond})},
		policy: topology.Policy{FailoverTimeout: 3 * time.Second},
	}
	// The nodes run as their pods would: the operator's redis.conf and password file.
	procs, err := podrunner.StartRedisCluster(context.Background(), t.TempDir(), rc, password)
	require.NoError(t, err)
	for _, p := range procs {
		c.servers = append(c.servers, p.Server)
		t.Cleanup(p.Stop)
	}
	return c
}

func (c *cluster) members() []topology.Member {
	var out []topology.Member
	for i, s := range c.servers {
		out = append(out, topology.Member{Name: s.Name, Ordinal: i, Addr: s.Addr()})
	}
	return out
}

func (c *cluster) currentPrimary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// reconcile runs one round, as one reconcile of the controller does.
func (c *cluster) reconcile(ctx context.Context) topology.Round {
	view := topology.Observe(ctx, c.exec.Dial, c.members(), c.currentPrimary())
	round, err := c.exec.Reconcile(ctx, view, &c.downtime, c.policy, nil)
	if err != nil {
		c.t.Logf("round: %v", err)
	}
	c.mu.Lock()
	c.primary = round.Primary()
	c.mu.Unlock()
	return round
}

// converge reconciles until every node answers and replicates from the primary.
func (c *cluster) converge(ctx context.Context) {
	c.t.Helper()
	var last topology.Round
	settled := func() bool { last = c.reconcile(ctx); return last.Settled() }
	if !assert.Eventually(c.t, settled, 20*time.Second, 50*time.Millisecond) {
		// Say what the nodes said last, so that a failure can be understood.
		for _, o := range last.View.Nodes {
			c.t.Logf("%s: reachable %v, err %v, info %+v", o.Name, o.Reachable(), o.Err, o.Info)
		}
		c.t.FailNow()
	}
}

// operate runs the control loop every interval until ctx ends, as the periodic reconcile does.
func (c *cluster) operate(ctx context.Context, interval time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			c.reconcile(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	})
	return &wg
}

// eventuallyReplicaOf waits until node replicates from primary with its link up.
func (c *cluster) eventuallyReplicaOf(ctx context.Context, node, primary string) {
	c.t.Helper()
	require.EventuallyWithT(c.t, func(col *assert.CollectT) {
		info, err := redis.NewDialer(redis.Options{})(c.server(node).Addr()).Replication(ctx)
		require.NoError(col, err)
		assert.Equal(col, redis.RoleReplica, info.Role)
		assert.Equal(col, c.server(primary).Addr(), info.PrimaryAddr())
		assert.True(col, info.LinkUp)
	}, 15*time.Second, 50*time.Millisecond)
}

func (c *cluster) server(name string) *redistest.Server {
	for _, s := range c.servers {
		if s.Name == name {
			return s
		}
	}
	c.t.Fatalf("no server %s", name)
	return nil
}

func (c *cluster) client(name, password string) *goredis.Client {
	cl := goredis.NewClient(&goredis.Options{Addr: c.server(name).Addr(), Password: password, MaxRetries: -1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, Protocol: 2, DisableIdentity: true})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// eventuallyEverywhere waits until every node holds key with value.
func (c *cluster) eventuallyEverywhere(ctx context.Context, key, value string, within time.Duration) {
	c.t.Helper()
	for _, s := range c.servers {
		require.EventuallyWithT(c.t, func(col *assert.CollectT) {
			v, err := c.client(s.Name, "").Get(ctx, key).Result()
			assert.NoError(col, err)
			assert.Equal(col, value, v)
		}, within, 20*time.Millisecond, "%s on %s", key, s.Name)
	}
}

func TestBootstrapFormsReplication(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, "")

	c.converge(ctx)

	primary := c.currentPrimary()
	assert.Equal(t, "sessions-0", primary, "with equal data the first ordinal leads")
	require.NoError(t, c.client(primary, "").Set(ctx, "greeting", "hello", 0).Err())
	c.eventuallyEverywhere(ctx, "greeting", "hello", 5*time.Second)
	// Replicas refuse writes.
	err := c.client("sessions-1", "").Set(ctx, "k", "v", 0).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "READONLY")
}

// writer writes key after key to whichever node is primary (as a client of the primary Service
// would), and counts a write as acknowledged only when WAIT says a replica has it.
type writer struct {
	acked   sync.Map // key -> struct{}
	nAcked  atomic.Int64
	nFailed atomic.Int64
}

func (w *writer) run(ctx context.Context, c *cluster) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		clients := map[string]*goredis.Client{}
		for i := 0; ctx.Err() == nil; i++ {
			primary := c.currentPrimary()
			cl, ok := clients[primary]
			if !ok {
				cl = c.client(primary, "")
				clients[primary] = cl
			}
			key := fmt.Sprintf("k%06d", i)
			pipe := cl.Pipeline()
			pipe.Set(ctx, key, i, 0)
			wait := pipe.Do(ctx, "WAIT", 1, 200)
			if _, err := pipe.Exec(ctx); err != nil {
				w.nFailed.Add(1)
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if n, err := wait.Int(); err == nil && n >= 1 {
				w.acked.Store(key, struct{}{})
				w.nAcked.Add(1)
			}
		}
	})
	return &wg
}

// lost counts the acknowledged writes that primary does not hold.
func (w *writer) lost(ctx context.Context, primary *goredis.Client) int {
	lost := 0
	w.acked.Range(func(k, _ any) bool {
		if n, err := primary.Exists(ctx, k.(string)).Result(); err != nil || n == 0 {
			lost++
		}
		return true
	})
	return lost
}

// primaries probes every node with a write, over and over until ctx ends, and returns the most
// nodes that accepted a write in the same round. A replica refuses it (READONLY) and a primary
// whose writes are held for a switchover does not answer in time: neither is writable.
func primaries(ctx context.Context, c *cluster) func() int {
	var most atomic.Int64
	var wg sync.WaitGroup
	clients := map[string]*goredis.Client{}
	for _, s := range c.servers {
		clients[s.Name] = goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, Protocol: 2, DisableIdentity: true,
			DialTimeout: 50 * time.Millisecond, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
		c.t.Cleanup(func() { _ = clients[s.Name].Close() })
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			var accepted atomic.Int64
			var round sync.WaitGroup
			for name, cl := range clients {
				round.Go(func() {
					if cl.Set(ctx, "writable-probe-"+name, 1, 0).Err() == nil {
						accepted.Add(1)
					}
				})
			}
			round.Wait()
			if n := accepted.Load(); n > most.Load() {
				most.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return func() int { wg.Wait(); return int(most.Load()) }
}

func TestFailoverLosesNoAcknowledgedWriteAndTheOldPrimaryRejoinsWithoutItsStaleWrites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t, 3, "")
	c.converge(ctx)
	old := c.currentPrimary()
	mostPrimaries := primaries(ctx, c)
	operator := c.operate(ctx, 100*time.Millisecond)
	w := &writer{}
	writes := w.run(ctx, c)
	require.Eventually(t, func() bool { return w.nAcked.Load() > 200 }, 10*time.Second, 10*time.Millisecond)

	// Given writes on the primary that no replica received (the replicas are frozen and cut off),
	// saved to its disk so that they come back with it
	for _, s := range c.servers {
		if s.Name != old {
			require.NoError(t, signal(s, syscall.SIGSTOP))
		}
	}
	stale := c.client(old, "")
	require.NoError(t, stale.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	require.NoError(t, stale.Set(ctx, "stale", "written only on the old primary", 0).Err())
	// SAVE is refused while a background save runs (a replica's sync, Redis's own save rules).
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, stale.Save(ctx).Err()) }, 10*time.Second, 20*time.Millisecond)

	// When the primary dies
	c.server(old).Kill()
	for _, s := range c.servers {
		if s.Name != old {
			require.NoError(t, signal(s, syscall.SIGCONT))
		}
	}

	// Then a replica is promoted and writes resume on it
	require.Eventually(t, func() bool { return c.currentPrimary() != old }, 15*time.Second, 10*time.Millisecond)
	newPrimary := c.currentPrimary()
	before := w.nAcked.Load()
	require.Eventually(t, func() bool { return w.nAcked.Load() > before+100 }, 10*time.Second, 10*time.Millisecond, "writes resume")

	// And the old primary, restarted with its stale write on disk, rejoins as a replica and drops it
	require.NoError(t, c.server(old).Restart())
	c.eventuallyReplicaOf(ctx, old, newPrimary)
	cancel()
	writes.Wait()
	operator.Wait()

	readCtx := context.Background()
	for _, name := range []string{newPrimary, old} {
		n, err := c.client(name, "").Exists(readCtx, "stale").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the old primary's unreplicated write is on %s", name)
	}
	lost := w.lost(readCtx, c.client(newPrimary, ""))
	t.Logf("acknowledged writes: %d, failed attempts during the failover: %d", w.nAcked.Load(), w.nFailed.Load())
	assert.Zero(t, lost, "acknowledged writes lost")
	assert.Equal(t, 1, mostPrimaries(), "writable primaries at the same moment")
}

func TestPrimaryRestartingEmptyDoesNotEmptyItsReplicas(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 2, "")
	c.converge(ctx)
	old := c.currentPrimary()
	require.NoError(t, c.client(old, "").Set(ctx, "data", "precious", 0).Err())
	require.NoError(t, c.client(old, "").Do(ctx, "WAIT", 1, 1000).Err())

	// The primary restarts at once with no data (an emptyDir after the pod moved)
	c.server(old).Kill()
	require.NoError(t, c.server(old).WipeData())
	require.NoError(t, c.server(old).Restart())
	c.converge(ctx)

	assert.NotEqual(t, old, c.currentPrimary(), "the empty node must not lead")
	c.eventuallyEverywhere(ctx, "data", "precious", 10*time.Second)
}

func TestSwitchoverLosesNoAcknowledgedWrite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t, 3, "")
	c.converge(ctx)
	mostPrimaries := primaries(ctx, c)
	w := &writer{}
	writes := w.run(ctx, c)
	require.Eventually(t, func() bool { return w.nAcked.Load() > 200 }, 10*time.Second, 10*time.Millisecond)

	view := topology.Observe(ctx, c.exec.Dial, c.members(), c.currentPrimary())
	from, to := view.Nodes[0], view.Nodes[2]
	require.Equal(t, c.currentPrimary(), from.Name)
	steps, err := c.exec.Switchover(ctx, from, to, view, 5*time.Second)
	require.NoError(t, err)
	c.mu.Lock()
	c.primary = to.Name
	c.mu.Unlock()
	var actions []string
	for _, s := range steps {
		actions = append(actions, string(s.Action)+" "+s.Node)
	}
	assert.Equal(t, []string{"Paused sessions-0", "Repointed sessions-0", "Promoted sessions-2", "Repointed sessions-1"}, actions)

	before := w.nAcked.Load()
	require.Eventually(t, func() bool { return w.nAcked.Load() > before+100 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	writes.Wait()

	lost := w.lost(context.Background(), c.client(to.Name, ""))
	assert.Zero(t, lost, "acknowledged writes lost")
	assert.Equal(t, 1, mostPrimaries(), "writable primaries at the same moment")
}

// The controller reports a switchover done once its target is promoted, whatever became of the
// other replicas (each is repointed by a later round): the steps say so even when one failed.
func TestASwitchoverThatCouldNotRepointAReplicaStillSaysItPromoted(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, "")
	c.converge(ctx)
	view := topology.Observe(ctx, c.exec.Dial, c.members(), c.currentPrimary())
	from, to := view.Nodes[0], view.Nodes[2]
	require.Equal(t, c.currentPrimary(), from.Name)

	// Given the third node gone after the view was taken (its pod deleted by a scale-in)
	c.server(view.Nodes[1].Name).Kill()

	// When the primary switches over
	steps, err := c.exec.Switchover(ctx, from, to, view, 5*time.Second)

	// Then the error names the replica not repointed, and the steps say the target was promoted
	require.ErrorContains(t, err, "pointing "+view.Nodes[1].Name+" at "+to.Name)
	var actions []string
	for _, s := range steps {
		actions = append(actions, string(s.Action)+" "+s.Node)
	}
	assert.Equal(t, []string{"Paused sessions-0", "Repointed sessions-0", "Promoted sessions-2"}, actions)
	info, err := c.exec.Dial(c.server(to.Name).Addr()).Replication(ctx)
	require.NoError(t, err)
	assert.Equal(t, redis.RolePrimary, info.Role)
}

func TestWrongPasswordIsAnAuthErrorThatDoesNotCarryThePassword(t *testing.T) {
	const password = "s3cret-Pa55 with spaces \"and\" quotes"
	c := newCluster(t, 1, password)
	ctx := context.Background()

	_, err := redis.NewDialer(redis.Options{Password: password})(c.servers[0].Addr()).Replication(ctx)
	require.NoError(t, err, "the right password, written into redis.conf by the operator, works")

	for _, wrong := range []string{"wrong-password", ""} {
		_, err := redis.NewDialer(redis.Options{Password: wrong})(c.servers[0].Addr()).Replication(ctx)
		require.Error(t, err)
		assert.True(t, errors.Is(err, redis.ErrAuth), "got %v", err)
		assert.NotContains(t, err.Error(), password)
		if wrong != "" {
			assert.NotContains(t, err.Error(), wrong)
		}
	}
	log := c.servers[0].Dir + "/redis.log"
	raw, err := readFile(log)
	require.NoError(t, err)
	assert.False(t, strings.Contains(raw, password), "redis.log holds the password")
}

func TestHungPrimaryIsReplacedAfterTheTimeoutAndItsClientsReconnectWhenItWakes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCluster(t, 3, "")
	c.converge(ctx)
	old := c.currentPrimary()
	held := c.client(old, "").Conn() // a client that keeps its connection, as pooled clients do
	defer held.Close()
	require.NoError(t, held.Ping(ctx).Err())
	operator := c.operate(ctx, 100*time.Millisecond)

	// When the primary hangs (its process frozen: it neither answers nor refuses)
	require.NoError(t, signal(c.server(old), syscall.SIGSTOP))
	hung := time.Now()

	// Then a replica replaces it, and not before the unreachable timeout
	require.Eventually(t, func() bool { return c.currentPrimary() != old }, 15*time.Second, 10*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(hung), c.policy.FailoverTimeout, "failed over before the timeout")
	newPrimary := c.currentPrimary()

	// And when it wakes it becomes a replica of the new primary and closes its clients'
	// connections, so that they reconnect to the new primary through the Service
	require.NoError(t, signal(c.server(old), syscall.SIGCONT))
	c.eventuallyReplicaOf(ctx, old, newPrimary)
	err := held.Set(ctx, "after-waking", 1, 0).Err()
	require.Error(t, err, "the held connection to the old primary is closed")
	assert.NotContains(t, err.Error(), "READONLY", "the connection was closed, not left to fail every write")
	cancel()
	operator.Wait()
}

func TestAPrimaryCutOffFromItsReplicasStopsTakingWritesWhenAsked(t *testing.T) {
	for _, tt := range []struct {
		name       string
		failover   *cachev1.FailoverSpec
		wantRefuse bool
	}{
		{"by default it keeps taking them", nil, false},
		{"with minReplicasToWrite 1 it refuses them", &cachev1.FailoverSpec{
			MinReplicasToWrite: ptr.To[int32](1), MaxReplicaLag: &metav1.Duration{Duration: time.Second}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rc := testenv.RedisCluster("test", "sessions", 3)
			rc.Spec.Failover = tt.failover
			c := newClusterOf(t, rc, "")
			c.converge(ctx)
			primary := c.client(c.currentPrimary(), "")
			require.NoError(t, primary.Set(ctx, "before", 1, 0).Err())

			// When the primary is cut off from both replicas (they are frozen: their links
			// stay open but nothing is acknowledged)
			var replicas []*redistest.Server
			for _, s := range c.servers {
				if s.Name != c.currentPrimary() {
					replicas = append(replicas, s)
					require.NoError(t, signal(s, syscall.SIGSTOP))
				}
			}
			defer func() {
				for _, s := range replicas {
					_ = signal(s, syscall.SIGCONT)
				}
			}()

			// Then, with write safety asked for, it refuses writes within the lag (and a
			// second, Redis's own clock), and takes them again once a replica is back
			if !tt.wantRefuse {
				time.Sleep(3 * time.Second)
				require.NoError(t, primary.Set(ctx, "cut-off", 1, 0).Err(), "the default is unchanged")
				return
			}
			require.Eventually(t, func() bool {
				err := primary.Set(ctx, "cut-off", 1, 0).Err()
				return err != nil && strings.HasPrefix(err.Error(), "NOREPLICAS")
			}, 5*time.Second, 50*time.Millisecond)
			require.NoError(t, signal(replicas[0], syscall.SIGCONT))
			require.Eventually(t, func() bool { return primary.Set(ctx, "back", 1, 0).Err() == nil }, 5*time.Second, 50*time.Millisecond)
		})
	}
}

func TestAFullRestartWithTheAppendOnlyFileKeepsEveryAcknowledgedWrite(t *testing.T) {
	ctx := context.Background()
	rc := testenv.RedisCluster("test", "sessions", 3)
	rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	c := newClusterOf(t, rc, "")
	c.converge(ctx)

	// Given writes that a replica acknowledged (WAIT 1), on a primary that is not the first
	// node (after a failover), so that electing by ordinal alone would pick the wrong one
	c.server(c.currentPrimary()).Kill()
	require.Eventually(t, func() bool { c.reconcile(ctx); return c.currentPrimary() != "sessions-0" }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, c.server("sessions-0").Restart())
	c.converge(ctx)
	primary := c.client(c.currentPrimary(), "")
	var acked []string
	for i := range 300 {
		key := fmt.Sprintf("k-%d", i)
		require.NoError(t, primary.Set(ctx, key, i, 0).Err())
		if n, err := primary.Do(ctx, "WAIT", 1, 1000).Int(); err == nil && n >= 1 {
			acked = append(acked, key)
		}
	}
	require.NotEmpty(t, acked)

	// When every redis-server is killed at once, once each has written what it acknowledged
	// (redistest.AOFWritten), and all start again on their data
	for _, s := range c.servers {
		cl := c.client(s.Name, "")
		require.EventuallyWithT(t, func(co *assert.CollectT) {
			written, err := redistest.AOFWritten(ctx, cl)
			require.NoError(co, err)
			assert.True(co, written, s.Name)
		}, 5*time.Second, 10*time.Millisecond)
	}
	for _, s := range c.servers {
		s.Kill()
	}
	for _, s := range c.servers {
		require.NoError(t, s.Restart())
	}

	// Then the cluster forms again around a node that has every acknowledged write, and its
	// replicas have them too
	c.converge(ctx)
	after := c.client(c.currentPrimary(), "")
	for _, key := range acked {
		require.NoError(t, after.Get(ctx, key).Err(), "%s, acknowledged before the restart, on %s", key, c.currentPrimary())
	}
	c.eventuallyEverywhere(ctx, acked[len(acked)-1], strconv.Itoa(len(acked)-1), 15*time.Second)
}

// The operator's context ends while it switches over (its pod evicted by the drain that evicts
// the primary's): the switchover still runs to its end, so the cluster is never left with the old
// primary demoted and nobody promoted.
func TestASwitchoverWhoseCallerGoesAwayStillPromotes(t *testing.T) {
	c := newCluster(t, 3, "")
	c.converge(context.Background())
	view := topology.Observe(context.Background(), c.exec.Dial, c.members(), c.currentPrimary())
	from, to := view.Nodes[0], view.Nodes[2]

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	steps, err := c.exec.Switchover(ended, from, to, view, 5*time.Second)

	require.NoError(t, err)
	assert.Len(t, steps, 4)
	info, err := c.exec.Dial(c.server(to.Name).Addr()).Replication(context.Background())
	require.NoError(t, err)
	assert.Equal(t, redis.RolePrimary, info.Role)
}
