package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The control plane every test in this package shares: a real kube-apiserver and etcd.
// It runs no controllers of its own (no StatefulSet controller, no garbage collector), so
// tests write a StatefulSet's status where the StatefulSet controller would.
// Each test that runs Redis has a namespace, an operator and redis-server processes of its own,
// and runs beside the others (t.Parallel): they wait on Redis and the API server far more than
// they use the CPU. Two stay alone: they add users to the API server (AddUser).
var (
	operatorLogs lockedBuffer
	env          *testenv.Env
	adminCfg     *rest.Config
	k8sClient    client.WithWatch
)

const (
	waitFor = 20 * time.Second
	tick    = 50 * time.Millisecond
)

func TestMain(m *testing.M) {
	// The operator's logs are kept, so that tests can check what they hold, and go to stderr
	// too when TEST_LOGS is set; otherwise they would drown the test output.
	var logs io.Writer = &operatorLogs
	if os.Getenv("TEST_LOGS") != "" {
		logs = io.MultiWriter(&operatorLogs, os.Stderr)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logs)))
	var err error
	env, adminCfg, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8sClient, err = client.NewWithWatch(adminCfg, client.Options{Scheme: operator.NewScheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stopBackupShared()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// runningOperator is one operator process's worth of manager, watching one namespace.
type runningOperator struct {
	mgr      ctrl.Manager
	requests *testenv.RequestCounter
	// stop stops the operator before the test ends; it is stopped at the end anyway.
	stop func()
}

// startOperator runs the operator as the given identity, watching only namespace, until the
// test ends. Every request it sends is counted.
func startOperator(t *testing.T, cfg *rest.Config, namespace string, tune ...func(*operator.Options)) *runningOperator {
	t.Helper()
	requests := &testenv.RequestCounter{}
	opts := operator.Options{
		WatchNamespaces:    []string{namespace},
		MetricsAddr:        "0",
		ProbeAddr:          "0",
		SkipNameValidation: true,
	}
	for _, f := range tune {
		f(&opts)
	}
	mgr, err := operator.NewManager(requests.Wrap(cfg), opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		require.NoError(t, <-done)
	})
	t.Cleanup(stop)
	return &runningOperator{mgr: mgr, requests: requests, stop: stop}
}

// assertHealthChecksWriteNothing waits until the operator's cache has the RedisCluster Ready,
// then asserts that three health checks of it write nothing: no status, no child.
func assertHealthChecksWriteNothing(t *testing.T, op *runningOperator, rc *cachev1.RedisCluster) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cached := &cachev1.RedisCluster{}
		require.NoError(c, op.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(rc), cached))
		// Ready for the current generation: a Ready of the generation before a spec change
		// would let the change's own status write fall in the window below
		assert.True(c, testenv.Ready(cached), "Ready for generation %d: %+v", cached.Generation, cached.Status.Conditions)
	}, waitFor, tick)
	writes, kinds := op.requests.Writes(), op.requests.ByKind()
	since := time.Now().Add(-time.Second) // Events carry seconds
	time.Sleep(3 * controllers.DefaultCheckInterval)
	grew := map[string]int64{}
	for k, v := range op.requests.ByKind() {
		if v > kinds[k] {
			grew[k] = v - kinds[k]
		}
	}
	if !assert.Equal(t, writes, op.requests.Writes(), "a Ready RedisCluster's health checks write nothing: %v", grew) {
		events := &corev1.EventList{}
		require.NoError(t, k8sClient.List(context.Background(), events, client.InNamespace(rc.Namespace)))
		for _, e := range events.Items {
			if !e.LastTimestamp.Time.Before(since) {
				t.Logf("Event in the window: %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}

// watchReady watches every version of the RedisCluster the API server stores from now on, and
// returns a func that stops watching and says each time Ready was not True ("False
// ReplicasNotReady: 2 of 2 Redis nodes are ready"). A watch sees every write, where polling
// would miss a condition that flipped for one reconcile.
func watchReady(t *testing.T, rc *cachev1.RedisCluster) func() []string {
	t.Helper()
	wc, err := client.NewWithWatch(adminCfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	list := &cachev1.RedisClusterList{}
	w, err := wc.Watch(context.Background(), list, client.InNamespace(rc.Namespace),
		client.MatchingFields{"metadata.name": rc.Name})
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		notTrue []string
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			got, ok := e.Object.(*cachev1.RedisCluster)
			if !ok {
				continue
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
				mu.Lock()
				notTrue = append(notTrue, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message))
				mu.Unlock()
			}
		}
	}()
	stop := sync.OnceValue(func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return notTrue
	})
	t.Cleanup(func() { stop() })
	return stop
}

// watchPrimaryOrder watches the RedisCluster and its namespace's pods from now on, and returns a
// func that says, for each node, the resourceVersion of the first write seen so far that named it
// status.primary and of the first that labelled its pod primary (absent: no such write seen yet:
// a watch may deliver a write after a read has returned it). It watches until the test ends.
// The two count on one scale: an API server on one etcd gives every write the next revision of
// the whole store (Kubernetes tells clients not to compare them; a test on envtest's one etcd may).
func watchPrimaryOrder(t *testing.T, rc *cachev1.RedisCluster) func() (recorded, labelled map[string]int64) {
	t.Helper()
	wc, err := client.NewWithWatch(adminCfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	clusters, err := wc.Watch(context.Background(), &cachev1.RedisClusterList{}, client.InNamespace(rc.Namespace),
		client.MatchingFields{"metadata.name": rc.Name})
	require.NoError(t, err)
	pods, err := wc.Watch(context.Background(), &corev1.PodList{}, client.InNamespace(rc.Namespace))
	require.NoError(t, err)
	var (
		mu                 sync.Mutex
		recorded, labelled = map[string]int64{}, map[string]int64{}
		done               sync.WaitGroup
	)
	first := func(seen map[string]int64, name, version string) {
		rv, err := strconv.ParseInt(version, 10, 64)
		if err != nil || name == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[name]; !ok {
			seen[name] = rv
		}
	}
	done.Go(func() {
		for e := range clusters.ResultChan() {
			if got, ok := e.Object.(*cachev1.RedisCluster); ok {
				first(recorded, got.Status.Primary, got.ResourceVersion)
			}
		}
	})
	done.Go(func() {
		for e := range pods.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && p.Labels[resources.LabelRole] == resources.RolePrimary {
				first(labelled, p.Name, p.ResourceVersion)
			}
		}
	})
	t.Cleanup(func() {
		clusters.Stop()
		pods.Stop()
		done.Wait()
	})
	return func() (map[string]int64, map[string]int64) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(recorded), maps.Clone(labelled)
	}
}

// newNamespace gives a test a namespace of its own.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := testenv.CreateNamespace(context.Background(), k8sClient, "rc")
	require.NoError(t, err)
	return ns
}
