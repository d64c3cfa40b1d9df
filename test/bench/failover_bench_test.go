package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/controllers/replication"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/topology"
	"github.com/org/redis-operator/test/podrunner"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

const failoverRounds = 12

// BenchmarkFailover kills the primary of three real redis-server processes, run with the
// operator's redis.conf and managed by the operator's topology code as the controller runs it:
// held connections whose break wakes a check at once, and a check every default interval
// otherwise. It times until a client writing to the recorded primary (as the primary Service
// would send it) gets a write accepted again, and reports p50 and p95 over the rounds.
func BenchmarkFailover(b *testing.B) {
	for range b.N {
		times := failoverTimes(b)
		slices.Sort(times)
		p50, p95 := percentile(times, 50), percentile(times, 95)
		b.ReportMetric(p50.Seconds(), "p50-s")
		b.ReportMetric(p95.Seconds(), "p95-s")
		fmt.Printf("\nfailover, %d rounds, check every %s: p50 %.3fs, p95 %.3fs, min %.3fs, max %.3fs\n",
			len(times), controllers.DefaultCheckInterval, p50.Seconds(), p95.Seconds(), times[0].Seconds(), times[len(times)-1].Seconds())
	}
}

func failoverTimes(b *testing.B) []time.Duration {
	ctx := context.Background()
	procs, err := podrunner.StartRedisCluster(ctx, b.TempDir(), testenv.RedisCluster("bench", "sessions", 3), "")
	require.NoError(b, err)
	var servers []*redistest.Server
	var members []topology.Member
	for i, p := range procs {
		defer p.Stop()
		servers = append(servers, p.Server)
		members = append(members, topology.Member{Name: p.Name, Ordinal: i, Addr: p.Addr()})
	}
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.Addr)
	}
	// A break of a held connection wakes the loop, as it queues a reconcile in the controller.
	wake := make(chan struct{}, 1)
	pool := redis.NewPool(redis.Options{Timeout: redis.DefaultTimeout}, func(string) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer pool.Close()
	policy := topology.Policy{FailoverTimeout: replication.DefaultUnreachableTimeout}
	var downtime topology.Downtime
	var recorded atomic.Value // the primary the operator recorded, as status.primary holds it
	recorded.Store("")
	primaryNow := func() string { return recorded.Load().(string) }
	// One reconcile's failover, as the controller runs it: observe, then decide and act.
	reconcile := func() topology.Round {
		exec := topology.Executor{Dial: pool.Hold("sessions", redis.Login{}, addrs)}
		view := topology.Observe(ctx, exec.Dial, members, primaryNow())
		round, _ := exec.Reconcile(ctx, view, &downtime, policy, nil)
		recorded.Store(round.Primary())
		return round
	}
	converge := func() {
		require.Eventually(b, func() bool { return reconcile().Settled() }, 30*time.Second, 50*time.Millisecond)
	}
	serverOf := func(name string) *redistest.Server {
		for _, s := range servers {
			if s.Name == name {
				return s
			}
		}
		return nil
	}

	var times []time.Duration
	for round := range failoverRounds {
		converge()
		old := primaryNow()
		cl := goredis.NewClient(&goredis.Options{Addr: serverOf(old).Addr(), MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		require.NoError(b, cl.Set(ctx, "round", round, 0).Err())
		require.NoError(b, cl.Do(ctx, "WAIT", 2, 1000).Err())
		cl.Close()

		// The operator's loop runs on its own clock; the kill lands anywhere in its period. As
		// the controller requeues, the next check comes after the round's NextCheck, or at once
		// when a held connection breaks.
		stop := make(chan struct{})
		loopDone := make(chan struct{})
		go func() {
			defer close(loopDone)
			next := time.NewTimer(controllers.DefaultCheckInterval)
			defer next.Stop()
			for {
				select {
				case <-stop:
					return
				case <-next.C:
				case <-wake:
				}
				next.Reset(reconcile().NextCheck(controllers.DefaultCheckInterval))
			}
		}()
		time.Sleep(time.Duration(round) * controllers.DefaultCheckInterval / failoverRounds)
		killed := time.Now()
		serverOf(old).Kill()
		for {
			if current := primaryNow(); current != old {
				c := goredis.NewClient(&goredis.Options{Addr: serverOf(current).Addr(), MaxRetries: -1, Protocol: 2, DisableIdentity: true,
					DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
				err := c.Set(ctx, "after", round, 0).Err()
				c.Close()
				if err == nil {
					break
				}
			}
			if time.Since(killed) > 30*time.Second {
				b.Fatalf("round %d: no primary accepted writes 30s after the kill", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
		times = append(times, time.Since(killed))
		close(stop)
		<-loopDone
		require.NoError(b, serverOf(old).Restart())
	}
	return times
}

func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i]
}
