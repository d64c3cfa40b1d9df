// Package bench measures the operator against a real kube-apiserver. Its benchmarks print
// figures (`make bench`); they assert nothing about speed.
package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/org/redis-operator/test/procfs"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

// clusters is 500 (100 with BENCH_SMOKE=1).
var clusters = sized(500, 100)

const workers = operator.DefaultMaxConcurrentReconciles // the baseline's parallelism, and the creating client's

// BenchmarkReconcile500 creates 500 RedisClusters at once and reports:
//   - operator-s: time from the first create until every child exists and every status is written;
//   - plain-client-s: time for a plain client to send the same writes, one request each, in the
//     same run (see plainClientApply), and ratio, the two divided: the operator's overhead;
//   - children-only-s and children-ratio: the same against a client that writes only the
//     children (the floor as first measured, stricter: it leaves out 2 of the 10 writes);
//   - requests/cluster: API requests the operator sent per RedisCluster, also printed by verb
//     and resource, with the reconciles per RedisCluster;
//   - resync-writes: write requests during a full resync of the converged clusters (must be 0).
//
// What the profile (`-cpuprofile`, and the per-verb counts printed here) showed, when the ratio
// was 2.5 and a new RedisCluster cost 14.4 requests and 2 reconciles:
//   - three uncached GETs of Secrets per new RedisCluster: the generated password Secret read
//     (missing), created, read again, then the auth Secret read (missing) before its apply.
//     Now a RedisCluster that was never reconciled creates its password Secret first and
//     applies the auth Secret unread when its password was just made: 0 GETs.
//   - one Event per created child, which the event recorder folds into a series (a POST and a
//     PATCH) showing only the first child's name. Now one Event names every child created.
//   - a second reconcile per RedisCluster, woken by the creation of its own children, which
//     often read the RedisCluster from a cache that did not yet hold the status just written,
//     and wrote it again (1.3 status patches per RedisCluster). Creations of children no
//     longer wake a reconcile: 1 reconcile, 1 status patch.
//   - the benchmark itself listed the 1000 objects every 100ms while it waited, which loaded
//     the API server it timed (a fifth of the process's CPU in the profile). It lists once the
//     status patches are all sent.
//   - what remains is the API server: both cores are busy serving it (the operator process is
//     about a quarter of one), so the time follows the number of requests, and the operator's
//     watches, which the plain client does not have.
//
// The ratio varied from 1.13 to 1.47 between runs of one round each. Each run is now three rounds,
// each a plain client's and the operator's in turn, each on an API server of its own, printing each
// round's ratio with the CPU that the API server, etcd and this process (the operator and the
// creating clients) used in each half, and the median of the three ratios.
//
// The operator runs with its production defaults (workers, client QPS and burst).
func BenchmarkReconcile500(b *testing.B) {
	log.SetLogger(logr.Discard()) // the operator's logs would drown the figures
	ctx := context.Background()

	for range b.N {
		var ratios, childrenRatios []float64
		var opTime, baseline, childrenOnly time.Duration
		var requests operatorRequests
		fmt.Printf("\n%d new RedisClusters, %d rounds (%s): seconds, and CPU seconds of the API server, etcd and this process\n",
			clusters, reconcileRounds(), time.Now().Format(time.DateOnly))
		fmt.Printf("| %5s | %14s | %10s | %27s | %27s | %5s |\n", "round", "children only s", "plain s", "CPU: apiserver/etcd/this", "operator s; CPU", "ratio")
		var opCfg *rest.Config
		for round := range reconcileRounds() {
			// Each half on an API server of its own: one that holds the objects of an earlier
			// half spends more CPU on every request (each round was 30 to 40% slower than the one
			// before on a shared one, so the half that ran last was slowed most).
			withAPIServer(b, func(_ *rest.Config, c client.Client) { childrenOnly = plainClientApply(b, ctx, c, true) })
			var plainCPU, opCPU controlPlaneCPU
			withAPIServer(b, func(_ *rest.Config, c client.Client) {
				plainCPU = measureCPU(b, func() { baseline = plainClientApply(b, ctx, c, false) })
			})
			if round < reconcileRounds()-1 {
				withAPIServer(b, func(cfg *rest.Config, c client.Client) {
					opCPU = measureCPU(b, func() { opTime, requests = operatorConverges(b, ctx, c, cfg) })
				})
			} else {
				// The last one stays for the resync.
				var c client.Client
				opCfg, c = apiServer(b)
				opCPU = measureCPU(b, func() { opTime, requests = operatorConverges(b, ctx, c, opCfg) })
			}
			ratios = append(ratios, opTime.Seconds()/baseline.Seconds())
			childrenRatios = append(childrenRatios, opTime.Seconds()/childrenOnly.Seconds())
			fmt.Printf("| %5d | %15.2f | %10.2f | %27s | %7.2f; %18s | %5.2f |\n", round+1, childrenOnly.Seconds(), baseline.Seconds(), plainCPU,
				opTime.Seconds(), opCPU, ratios[round])
		}
		resyncWrites := resync(b, ctx, opCfg, requests.namespace)

		ratio := median(ratios)
		b.ReportMetric(opTime.Seconds(), "operator-s")
		b.ReportMetric(baseline.Seconds(), "plain-client-s")
		b.ReportMetric(ratio, "ratio")
		b.ReportMetric(slices.Max(ratios), "max-ratio")
		b.ReportMetric(childrenOnly.Seconds(), "children-only-s")
		b.ReportMetric(median(childrenRatios), "children-ratio")
		b.ReportMetric(float64(requests.total)/float64(clusters), "requests/cluster")
		b.ReportMetric(float64(resyncWrites), "resync-writes")
		fmt.Printf("ratio operator / plain client: median %.2f (rounds %.2f; goal: at most 1.3 in every round); against the children-only client: median %.2f; "+
			"%.1f API requests per cluster, %d writes during a resync\n",
			ratio, ratios, median(childrenRatios), float64(requests.total)/float64(clusters), resyncWrites)
		fmt.Printf("per cluster: %.1f reconciles;", requests.reconciles/float64(clusters))
		for _, kind := range slices.Sorted(maps.Keys(requests.byKind)) {
			if n := float64(requests.byKind[kind]) / float64(clusters); n >= 0.01 {
				fmt.Printf(" %s %.2f;", kind, n)
			}
		}
		fmt.Println()
	}
}

// withAPIServer runs fn against a kube-apiserver and etcd of its own, stopped after.
func withAPIServer(b *testing.B, fn func(*rest.Config, client.Client)) {
	env, cfg, err := testenv.Start()
	require.NoError(b, err)
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(b, err)
	fn(cfg, c)
}

// reconcileRounds is 3 (1 with BENCH_SMOKE=1).
func reconcileRounds() int { return sized(3, 1) }

func median(values []float64) float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// controlPlaneCPU is the CPU time the API server, etcd and this process used.
type controlPlaneCPU struct{ apiserver, etcd, self time.Duration }

func (c controlPlaneCPU) String() string {
	return fmt.Sprintf("%.1f/%.1f/%.1f", c.apiserver.Seconds(), c.etcd.Seconds(), c.self.Seconds())
}

// measureCPU runs fn and says what CPU the benchmark's kube-apiserver, its etcd (children of this
// process) and this process used meanwhile.
func measureCPU(b *testing.B, fn func()) controlPlaneCPU {
	before := controlPlaneCPUNow(b)
	fn()
	return controlPlaneCPUNow(b).since(before)
}

// controlPlaneCPUNow is the CPU the benchmark's kube-apiserver and etcd (children of this
// process) and this process used so far.
func controlPlaneCPUNow(b *testing.B) controlPlaneCPU {
	var out controlPlaneCPU
	entries, err := os.ReadDir("/proc")
	require.NoError(b, err)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procfs.Read(pid)
		if err != nil || st.PPID != os.Getpid() {
			continue
		}
		switch st.Comm {
		case "kube-apiserver":
			out.apiserver += st.CPU
		case "etcd":
			out.etcd += st.CPU
		}
	}
	self, err := cpuTime(os.Getpid())
	require.NoError(b, err)
	out.self = self
	return out
}

func (c controlPlaneCPU) since(before controlPlaneCPU) controlPlaneCPU {
	return controlPlaneCPU{apiserver: c.apiserver - before.apiserver, etcd: c.etcd - before.etcd, self: c.self - before.self}
}

// plainClientApply does, with no operator, what the operator's timed run sends to the API
// server, one request each: create the RedisCluster (the operator's run times its creation
// too), create the password Secret, apply the seven other children, write a status of the same
// shape. It is the floor; the operator's extra is its Events, its watches and its work.
//
// With childrenOnly, it only writes the eight children of RedisClusters that are not there:
// the floor as the issue first measured it (a stricter one: the operator's run also creates
// the RedisClusters and writes their status).
func plainClientApply(b *testing.B, ctx context.Context, c client.Client, childrenOnly bool) time.Duration {
	ns, err := testenv.CreateNamespace(ctx, c, "baseline")
	require.NoError(b, err)
	start := time.Now()
	parallel(b, func(i int) error {
		rc := testenv.RedisCluster(ns, fmt.Sprintf("rc-%d", i), 3)
		if childrenOnly {
			rc.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		} else if err := c.Create(ctx, rc); err != nil {
			return err
		}
		if err := c.Create(ctx, resources.GeneratedPasswordSecret(rc, resources.RandomPassword())); err != nil {
			return err
		}
		for _, obj := range []runtime.ApplyConfiguration{
			resources.DesiredAuthConfSecret(rc, resources.RandomPassword(), nil, nil), resources.DesiredConfigMap(rc),
			resources.DesiredHeadlessService(rc), resources.DesiredClientService(rc), resources.DesiredReplicasService(rc),
			resources.DesiredPodDisruptionBudget(rc), resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 3}),
		} {
			if err := c.Apply(ctx, obj, client.FieldOwner("baseline"), client.ForceOwnership); err != nil {
				return err
			}
		}
		if childrenOnly {
			return nil
		}
		return c.Status().Patch(ctx, withStatus(rc), client.MergeFrom(rc))
	})
	return time.Since(start)
}

// withStatus is rc with a status of the shape the operator writes for a new RedisCluster.
func withStatus(rc *cachev1.RedisCluster) *cachev1.RedisCluster {
	out := rc.DeepCopy()
	out.Status.ObservedGeneration = rc.Generation
	for _, c := range []string{cachev1.ConditionPersistent, cachev1.ConditionFailingOver, cachev1.ConditionProgressing,
		cachev1.ConditionDegraded, cachev1.ConditionReady} {
		meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
			Type: c, Status: metav1.ConditionFalse, Reason: "Baseline", ObservedGeneration: rc.Generation,
			Message: "A condition message of about the length the operator writes",
		})
	}
	return out
}

type operatorRequests struct {
	namespace  string
	total      int64
	byKind     map[string]int64
	reconciles float64
}

func operatorConverges(b *testing.B, ctx context.Context, c client.Client, cfg *rest.Config) (time.Duration, operatorRequests) {
	ns, err := testenv.CreateNamespace(ctx, c, "operator")
	require.NoError(b, err)
	counter := &testenv.RequestCounter{}
	before := reconciles()
	stop := runOperator(b, counter.Wrap(cfg), ns)
	defer stop()

	start := time.Now()
	parallel(b, func(i int) error {
		return c.Create(ctx, testenv.RedisCluster(ns, fmt.Sprintf("rc-%d", i), 3))
	})
	// Listing 1000 objects every 100ms would load the API server the operator is timed
	// against: list only once every RedisCluster's status was written once.
	for counter.ByKind()["PATCH redisclusters/status"] < int64(clusters) || !converged(b, ctx, c, ns) {
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), operatorRequests{namespace: ns, total: counter.Total(), byKind: counter.ByKind(), reconciles: reconciles() - before}
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
	require.Eventually(b, func() bool { return reconciles()-before >= float64(clusters) }, 5*time.Minute, 100*time.Millisecond)
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
		MaxConcurrentReconciles: operator.DefaultMaxConcurrentReconciles,
		KubeAPIQPS:              operator.DefaultKubeAPIQPS,
		KubeAPIBurst:            operator.DefaultKubeAPIBurst,
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
func parallel(b *testing.B, fn func(i int) error) { parallelN(b, clusters, fn) }

// parallelN runs fn for 0..n-1 on a fixed number of workers.
func parallelN(b *testing.B, n int, fn func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
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
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}
