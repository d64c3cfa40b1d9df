// Package bench measures the operator against a real kube-apiserver. Its benchmarks print
// figures (`make bench`); they assert nothing about speed.
package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

const (
	clusters = 500
	workers  = 4 // the operator's default --max-concurrent-reconciles, and the baseline's parallelism
)

// BenchmarkReconcile500 creates 500 RedisClusters at once and reports:
//   - operator-s: time until every child exists and every status is written;
//   - plain-client-s: time for a plain client to apply the same children in the same run;
//   - ratio: the two divided, the operator's overhead over the bare writes;
//   - requests/cluster: API requests the operator sent per RedisCluster;
//   - resync-writes: write requests during a full resync of the converged clusters (must be 0).
func BenchmarkReconcile500(b *testing.B) {
	log.SetLogger(logr.Discard()) // the operator's logs would drown the figures
	env, cfg, err := testenv.Start()
	require.NoError(b, err)
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(b, err)
	ctx := context.Background()

	for range b.N {
		baseline := plainClientApply(b, ctx, c)
		opTime, requests := operatorConverges(b, ctx, c, cfg)
		resyncWrites := resync(b, ctx, cfg, requests.namespace)

		b.ReportMetric(opTime.Seconds(), "operator-s")
		b.ReportMetric(baseline.Seconds(), "plain-client-s")
		b.ReportMetric(opTime.Seconds()/baseline.Seconds(), "ratio")
		b.ReportMetric(float64(requests.total)/clusters, "requests/cluster")
		b.ReportMetric(float64(resyncWrites), "resync-writes")
		fmt.Printf("\n%d RedisClusters: operator %.2fs, plain client %.2fs (ratio %.2f), %.1f API requests per cluster, %d writes during a resync\n",
			clusters, opTime.Seconds(), baseline.Seconds(), opTime.Seconds()/baseline.Seconds(),
			float64(requests.total)/clusters, resyncWrites)
	}
}

// plainClientApply applies the same children the operator would, with no operator, as the floor.
func plainClientApply(b *testing.B, ctx context.Context, c client.Client) time.Duration {
	ns, err := testenv.CreateNamespace(ctx, c, "baseline")
	require.NoError(b, err)
	start := time.Now()
	parallel(b, func(i int) error {
		rc := testenv.RedisCluster(ns, fmt.Sprintf("rc-%d", i), 3)
		rc.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		for _, obj := range []runtime.ApplyConfiguration{
			resources.DesiredConfigMap(rc), resources.DesiredHeadlessService(rc),
			resources.DesiredClientService(rc), resources.DesiredReplicasService(rc),
			resources.DesiredPodDisruptionBudget(rc), resources.DesiredAuthConfSecret(rc, resources.RandomPassword()),
			resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 3}),
		} {
			if err := c.Apply(ctx, obj, client.FieldOwner("baseline"), client.ForceOwnership); err != nil {
				return err
			}
		}
		return nil
	})
	return time.Since(start)
}

type operatorRequests struct {
	namespace string
	total     int64
}

func operatorConverges(b *testing.B, ctx context.Context, c client.Client, cfg *rest.Config) (time.Duration, operatorRequests) {
	ns, err := testenv.CreateNamespace(ctx, c, "operator")
	require.NoError(b, err)
	counter := &testenv.RequestCounter{}
	stop := runOperator(b, counter.Wrap(cfg), ns)
	defer stop()

	start := time.Now()
	parallel(b, func(i int) error {
		return c.Create(ctx, testenv.RedisCluster(ns, fmt.Sprintf("rc-%d", i), 3))
	})
	for !converged(b, ctx, c, ns) {
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), operatorRequests{namespace: ns, total: counter.Total()}
}

// converged is true when every RedisCluster's status describes its spec and its StatefulSet exists.
func converged(b *testing.B, ctx context.Context, c client.Client, ns string) bool {
	rcs := &cachev1.RedisClusterList{}
	require.NoError(b, c.List(ctx, rcs, client.InNamespace(ns)))
	for _, rc := range rcs.Items {
		if rc.Status.ObservedGeneration != rc.Generation {
			return false
		}
	}
	sts := &appsv1.StatefulSetList{}
	require.NoError(b, c.List(ctx, sts, client.InNamespace(ns)))
	return len(rcs.Items) == clusters && len(sts.Items) == clusters
}

// resync starts a fresh operator over the converged clusters, which reconciles every one of
// them as a periodic resync would, and counts its writes.
func resync(b *testing.B, ctx context.Context, cfg *rest.Config, ns string) int64 {
	counter := &testenv.RequestCounter{}
	before := reconciles()
	stop := runOperator(b, counter.Wrap(cfg), ns)
	defer stop()
	require.Eventually(b, func() bool { return reconciles()-before >= clusters }, 5*time.Minute, 100*time.Millisecond)
	return counter.Writes()
}

// reconciles reads controller-runtime's count of finished RedisCluster reconciles, every result.
func reconciles() float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var total float64
	for _, family := range families {
		if family.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range family.GetMetric() {
			for _, label := range m.GetLabel() {
				if label.GetName() == "controller" && label.GetValue() == "rediscluster" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

func runOperator(b *testing.B, cfg *rest.Config, ns string) (stop func()) {
	mgr, err := operator.NewManager(cfg, operator.Options{
		WatchNamespaces:         []string{ns},
		MetricsAddr:             "0",
		ProbeAddr:               "0",
		SkipNameValidation:      true,
		MaxConcurrentReconciles: workers,
	})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		require.NoError(b, <-done)
	}
}

// parallel runs fn for 0..clusters-1 on a fixed number of workers.
func parallel(b *testing.B, fn func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range clusters {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}
