package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/testenv"
)

const (
	applyRounds          = 3
	serviceFailoverRound = 6
)

// BenchmarkLocalCluster runs the operator binary on the local cluster (real control plane, pods
// as redis-server processes) and reports:
//   - apply-to-ready-s: from `kubectl apply` of the sample until its Ready condition, median;
//   - service-failover-p50-s, -p95-s: from killing the primary's Redis until a client that
//     resolves the primary Service on every attempt gets a write accepted.
func BenchmarkLocalCluster(b *testing.B) {
	root, err := testenv.RepoRoot()
	require.NoError(b, err)
	for range b.N {
		dir := b.TempDir()
		ctx := context.Background()
		cluster, err := localcluster.Start(ctx, root, dir)
		require.NoError(b, err)
		require.NoError(b, cluster.StartOperator(ctx))

		var ready []time.Duration
		for i := range applyRounds {
			ns := fmt.Sprintf("apply-%d", i)
			require.NoError(b, cluster.Kubectl("create", "namespace", ns))
			start := time.Now()
			require.NoError(b, cluster.Kubectl("apply", "-n", ns, "-f", root+"/config/samples/cache_v1_rediscluster.yaml"))
			waitReady(b, cluster, ns)
			ready = append(ready, time.Since(start))
		}
		slices.Sort(ready)

		var failovers []time.Duration
		for range serviceFailoverRound {
			failovers = append(failovers, serviceFailover(b, cluster, "apply-0"))
			waitReady(b, cluster, "apply-0")
		}
		slices.Sort(failovers)
		cluster.Stop()

		b.ReportMetric(ready[len(ready)/2].Seconds(), "apply-to-ready-s")
		b.ReportMetric(percentile(failovers, 50).Seconds(), "service-failover-p50-s")
		b.ReportMetric(percentile(failovers, 95).Seconds(), "service-failover-p95-s")
		fmt.Printf("\nlocal cluster: kubectl apply to Ready %v (median of %d); failover through the Service p50 %.3fs, p95 %.3fs over %d rounds\n",
			ready[len(ready)/2].Round(time.Millisecond), applyRounds, percentile(failovers, 50).Seconds(), percentile(failovers, 95).Seconds(), len(failovers))
	}
}

func waitReady(b *testing.B, cluster *localcluster.Cluster, ns string) {
	require.Eventually(b, func() bool {
		rc := &cachev1.RedisCluster{}
		if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sessions"}, rc); err != nil {
			return false
		}
		return rc.Status.ObservedGeneration == rc.Generation && meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionReady) &&
			len(rc.Status.Nodes) == int(rc.Spec.Replicas)
	}, 3*time.Minute, 20*time.Millisecond)
}

func serviceFailover(b *testing.B, cluster *localcluster.Cluster, ns string) time.Duration {
	ctx := context.Background()
	password, err := cluster.SecretValue(ctx, ns, "sessions-auth", "password")
	require.NoError(b, err)
	addrs, err := cluster.WaitServiceEndpoints(ctx, ns, "sessions", 1)
	require.NoError(b, err)
	pod := podAt(b, cluster, ns, addrs[0])
	// A cluster holding data, replicated: the restarted, empty primary cannot lead again.
	w := goredis.NewClient(&goredis.Options{Addr: addrs[0], Password: password})
	require.NoError(b, w.Set(ctx, "before-failover", time.Now().String(), 0).Err())
	require.NoError(b, w.Do(ctx, "WAIT", 2, 2000).Err())
	w.Close()

	killed := time.Now()
	cluster.Agent.Server(ns, pod).Kill()
	for time.Since(killed) < time.Minute {
		addrs, err := cluster.ServiceEndpoints(ctx, ns, "sessions")
		if err == nil && len(addrs) == 1 {
			c := goredis.NewClient(&goredis.Options{Addr: addrs[0], Password: password, MaxRetries: -1,
				DialTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
			err := c.Set(ctx, "after-failover", 1, 0).Err()
			c.Close()
			if err == nil {
				return time.Since(killed)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("no write accepted through the Service a minute after killing %s", pod)
	return 0
}

func podAt(b *testing.B, cluster *localcluster.Cluster, ns, addr string) string {
	pods := &corev1.PodList{}
	require.NoError(b, cluster.Client.List(context.Background(), pods, client.InNamespace(ns)))
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && len(addr) > len(p.Status.PodIP) && addr[:len(p.Status.PodIP)+1] == p.Status.PodIP+":" {
			return p.Name
		}
	}
	b.Fatalf("no pod at %s", addr)
	return ""
}
