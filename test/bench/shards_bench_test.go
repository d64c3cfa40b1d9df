package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/testenv"
)

// scaleOutKeys is the dataset moved on a scale-out: 100k keys of 100 bytes.
const scaleOutKeys = 100_000

// BenchmarkScaleOutShards runs the operator binary over a RedisCluster in cluster mode of 3
// shards x 2 real redis-server nodes holding 100k keys, grows it to 5 shards, and reports how
// fast keys and slots move (from the patch until Ready with 5 shards, new pods' start
// included), and a cluster client's write p99 before and during the move.
func BenchmarkScaleOutShards(b *testing.B) {
	cfg, c := apiServer(b)
	ctx := context.Background()
	for range b.N {
		ns, err := testenv.CreateNamespace(ctx, c, "shards")
		require.NoError(b, err)
		node := runLocalNode(b, c, ns)
		op := startOperatorProcess(b, cfg, ns)

		rc := testenv.RedisCluster(ns, "orders", 2)
		rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: 2 * time.Second}}
		require.NoError(b, c.Create(ctx, rc))
		shardsReady := func(n int) func(context.Context) bool {
			return func(ctx context.Context) bool {
				got := &cachev1.RedisCluster{}
				return c.Get(ctx, client.ObjectKeyFromObject(rc), got) == nil && got.Status.ObservedGeneration == got.Generation &&
					meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady) && len(got.Status.Shards) == n
			}
		}
		waitFor(b, op, "3 shards Ready", 5*time.Minute, 100*time.Millisecond, shardsReady(3))
		require.NoError(b, c.Get(ctx, client.ObjectKeyFromObject(rc), rc))
		var addrs []string
		for _, n := range rc.Status.Nodes {
			addrs = append(addrs, node.Server(n.Name).Addr())
		}
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Password: password(b, ctx, c, ns, "orders"),
			Protocol: 2, DisableIdentity: true, MaxRedirects: 8})
		defer cc.Close()
		value := "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		for i := 0; i < scaleOutKeys; i += 1000 {
			_, err := cc.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for k := i; k < i+1000; k++ {
					p.Set(ctx, fmt.Sprintf("key:%d", k), value, 0)
				}
				return nil
			})
			require.NoError(b, err)
		}

		quiet := writeLatencies(ctx, cc, 3*time.Second, nil)

		done := make(chan struct{})
		during := make(chan []time.Duration, 1)
		go func() { during <- writeLatencies(ctx, cc, time.Hour, done) }()
		start := time.Now()
		patch := client.MergeFrom(rc.DeepCopy())
		rc.Spec.Cluster.Shards = 5
		require.NoError(b, c.Patch(ctx, rc, patch))
		waitFor(b, op, "5 shards Ready", 10*time.Minute, 50*time.Millisecond, shardsReady(5))
		took := time.Since(start)
		close(done)
		moving := <-during

		require.NoError(b, c.Get(ctx, client.ObjectKeyFromObject(rc), rc))
		moved := int64(0)
		for _, sh := range rc.Status.Shards[3:] {
			n, err := goredis.NewClient(&goredis.Options{Addr: node.Server(sh.Primary).Addr(), Password: password(b, ctx, c, ns, "orders"),
				Protocol: 2, DisableIdentity: true}).DBSize(ctx).Result()
			require.NoError(b, err)
			moved += n
		}
		total, err := cc.DBSize(ctx).Result()
		require.NoError(b, err)
		slots := 2 * 16384 / 5
		b.ReportMetric(took.Seconds(), "scale-out-s")
		b.ReportMetric(float64(moved)/took.Seconds(), "keys-moved/s")
		b.ReportMetric(float64(slots)/took.Seconds(), "slots-moved/s")
		b.ReportMetric(p99(quiet).Seconds()*1000, "quiet-p99-ms")
		b.ReportMetric(p99(moving).Seconds()*1000, "moving-p99-ms")
		fmt.Printf("\ncluster mode, 3 -> 5 shards x 2 redis-server nodes, %d keys of 100 bytes, operator binary: Ready with 5 shards %.1fs after the patch "+
			"(new pods' start included); %d keys and about %d slots moved: %.0f keys/s, %.0f slots/s; %d keys after (%d before); "+
			"cluster client SET p99 %.2f ms before (%d writes), %.2f ms during the move (%d writes)\n",
			scaleOutKeys, took.Seconds(), moved, slots, float64(moved)/took.Seconds(), float64(slots)/took.Seconds(), total, scaleOutKeys,
			p99(quiet).Seconds()*1000, len(quiet), p99(moving).Seconds()*1000, len(moving))
	}
}
