//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

const (
	// converge bounds how long an operator takes to carry a scenario out, and a fresh one to
	// mend what a crashed one left.
	converge = 90 * time.Second
	// quiet is how long a converged operator must go without writing before its scenario
	// counts as done (a converged reconcile writes nothing).
	quiet = 2 * time.Second
)

// scenario is one change an operator carries out, crashed at each of its writes in turn.
type scenario struct {
	name string
	// tune sets the options of every operator of the scenario.
	tune func(*operator.Options)
	// given brings a run's namespace to where the scenario starts, with an operator that does
	// not crash (stopped when given returns).
	given func(t *testing.T, r *run)
	// when starts the change, with the crashing operator and the writer running.
	when func(t *testing.T, r *run, w *writer)
	// done says whether the change is carried out, on top of Ready for the generation.
	done func(r *run) error
	// cluster is a scenario of a RedisCluster in cluster mode: its writer is a cluster client,
	// and its invariants are the cluster's (crash_cluster_test.go).
	cluster bool
}

// TestCrashAtEveryWrite is Sieve's intermediate-state testing: for each scenario, it lists the
// writes an operator makes to carry it out, then, for every k, runs it again with an operator
// that dies right after its k-th write (the API server and the Redis nodes see nothing from it
// afterwards), starts a fresh operator (no state carried over), and checks what users rely on:
// the RedisCluster converges, exactly one node takes writes and it is the primary the labels
// and the status name, every other node replicates from it, none is left behind the fence or
// paused, and no write a client had acknowledged with WAIT 1 is lost. Everything is real
// (kube-apiserver, etcd, redis-server processes) except the StatefulSet controller and the
// kubelet, played by testenv.LocalNode, which keeps running through the crash.
func TestCrashAtEveryWrite(t *testing.T) {
	if os.Getenv("TEST_LOGS") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		log.SetLogger(logr.Discard())
	}
	_, cfg := testenv.StartFor(t)
	admin, err := client.NewWithWatch(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	suite := &crashSuite{cfg: cfg, admin: admin, slots: make(chan struct{}, *crashParallel)}

	// The scenarios run side by side, their runs (a baseline, then one per crash point) sharing
	// the suite's slots: one after the other, each scenario's baseline ran alone and its last
	// points ran with the slots half empty. The summary is printed once every scenario ended.
	scenarios := crashScenarios()
	summaries := make([][]string, len(scenarios))
	var tried atomic.Int64
	t.Cleanup(func() {
		fmt.Printf("\ncrash at every write (%d rounds): %d crash points\n  %s\n", *crashRounds, tried.Load(),
			strings.Join(slices.Concat(summaries...), "\n  "))
	})
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			tl := &tally{}
			// Each round lists the writes again (their order varies a little with timing), then
			// crashes at each of them.
			for round := 1; round <= *crashRounds; round++ {
				suite.round(t, sc, round, tl)
			}
			tried.Add(int64(tl.crashed + tl.convergedFirst))
			summaries[i] = append(summaries[i], fmt.Sprintf("%-32s crash points per run %v; tried %d: crashed at %d, converged before the k-th write %d",
				sc.name, tl.counted, tl.crashed+tl.convergedFirst, tl.crashed, tl.convergedFirst))
			for _, f := range tl.failed {
				summaries[i] = append(summaries[i], "  FAILED "+f)
			}
		})
	}
}

// tally is what one scenario's rounds saw, for the summary.
type tally struct {
	mu             sync.Mutex
	counted        []int
	crashed        int
	convergedFirst int
	failed         []string
}

// round lists the writes scenario sc takes with an operator that does not crash, then runs it
// once per write with an operator that crashes after it, in parallel.
func (s *crashSuite) round(t *testing.T, sc scenario, round int, tl *tally) {
	baseline := s.try(t, sc, 0)
	require.NotEmpty(t, baseline.writes, "the scenario writes nothing")
	points := crashPoints(baseline.writes)
	tl.counted = append(tl.counted, points)
	if round == 1 {
		t.Logf("%s: %d writes (%s), %d of them crash points: %s", sc.name, len(baseline.writes), countKinds(baseline.writes), points,
			strings.Join(baseline.writes, "; "))
	}
	t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
		for k := 1; k <= points; k++ {
			t.Run(strconv.Itoa(k), func(t *testing.T) {
				t.Parallel()
				s.crashAt(t, sc, k, tl)
			})
		}
	}) // returns once its parallel subtests are done
}

// crashAt runs scenario sc with an operator that crashes after its k-th write and counts the
// outcome; a failed point goes into the summary with why, which CI shows where it cuts the
// middle of the log.
func (s *crashSuite) crashAt(t *testing.T, sc scenario, k int, tl *tally) {
	defer func() {
		if !t.Failed() {
			return
		}
		reason, ok := s.failures.Load(t.Name())
		if !ok {
			reason = "an invariant (the log says which)"
		}
		tl.mu.Lock()
		tl.failed = append(tl.failed, fmt.Sprintf("at %d: %v", k, reason))
		tl.mu.Unlock()
	}()
	out := s.try(t, sc, k)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if out.crashed {
		tl.crashed++
	} else {
		tl.convergedFirst++
	}
}

// countKinds sums writes by kind: "9 API, 4 Redis".
func countKinds(writes []string) string {
	redisWrites := 0
	for _, w := range writes {
		if strings.HasPrefix(w, "redis ") {
			redisWrites++
		}
	}
	return fmt.Sprintf("%d API, %d Redis", len(writes)-redisWrites, redisWrites)
}

type crashSuite struct {
	cfg   *rest.Config
	admin client.WithWatch
	// slots bounds the runs at once: each runs a RedisCluster's redis-servers and two operators.
	slots chan struct{}
	// failures holds, by test name, why a run failed (when it knows): the summary prints it.
	failures sync.Map
}

// outcome is what one run saw.
type outcome struct {
	writes  []string
	crashed bool
}

// try runs scenario s in a namespace of its own with an operator that crashes after its
// limit-th write (never with 0), then a fresh operator, and checks the invariants.
func (s *crashSuite) try(t *testing.T, sc scenario, limit int) outcome {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	r := s.newRun(t, sc)
	sc.given(t, r)

	w := r.startWriter()
	crash := newCrashAfter(limit)
	stop := r.startOperator(t, crash)
	sc.when(t, r, w)
	crashed := r.untilCrashOrConverged(t, crash)
	if crashed {
		stop()
		writes := crash.Writes()
		t.Logf("crashed after crash point %d: %s", limit, writes[len(writes)-1])
		// A fresh operator mends what the crash left: it converges and stops writing.
		fresh := newCrashAfter(0)
		stop = r.startOperator(t, fresh)
		r.untilCrashOrConverged(t, fresh)
	}
	defer stop()
	w.stop()
	if sc.cluster {
		r.checkClusterInvariants(t, w)
	} else {
		r.checkInvariants(t, w)
	}
	return outcome{writes: crash.Writes(), crashed: crashed}
}

// run is one try of a scenario: its namespace, its Redis nodes, and the operators' settings.
type run struct {
	suite *crashSuite
	sc    scenario
	ns    string
	node  *testenv.LocalNode
	rc    *cachev1.RedisCluster
	// passwords are every password the nodes may have had, newest last.
	mu        sync.Mutex
	passwords []string
	// keys were written before the scenario, each with its value as its name: all must survive.
	keys []string
}

func (s *crashSuite) newRun(t *testing.T, sc scenario) *run {
	ns, err := testenv.CreateNamespace(context.Background(), s.admin, "crash")
	require.NoError(t, err)
	node := testenv.RunLocalNode(t, s.admin, ns)
	r := &run{suite: s, sc: sc, ns: ns, node: node}
	sample, err := testenv.Sample(ns)
	require.NoError(t, err)
	r.rc = sample
	return r
}

// startOperator runs an operator for the run's namespace; crash, when not nil, is its death.
// The returned func stops it.
func (r *run) startOperator(t *testing.T, crash *crashAfter) func() {
	cfg := r.suite.cfg
	opts := operator.Options{WatchNamespaces: []string{r.ns}, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true}
	if r.sc.tune != nil {
		r.sc.tune(&opts)
	}
	if crash != nil {
		cfg = crash.wrap(cfg)
		opts.RedisHook = redisHook{c: crash}
	}
	mgr, err := operator.NewManager(cfg, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			// A crashed operator's manager ends with the errors of its refused requests.
			if crash == nil || !crash.isDead() {
				assert.NoError(t, err, "the operator stopped with an error")
			}
		case <-time.After(time.Minute):
			t.Errorf("the operator did not stop within a minute")
		}
	})
}

// untilCrashOrConverged waits until the operator crashes (true) or carries the scenario out
// and stops writing (false).
func (r *run) untilCrashOrConverged(t *testing.T, crash *crashAfter) bool {
	deadline := time.Now().Add(converge)
	for time.Now().Before(deadline) {
		select {
		case <-crash.crashed:
			return true
		case <-time.After(100 * time.Millisecond):
		}
		if crash.quietFor() > quiet && r.converged() == nil {
			return false
		}
	}
	why := fmt.Sprintf("neither crashed nor converged within %s: %v", converge, r.converged())
	r.suite.failures.Store(t.Name(), why)
	t.Fatalf("%s; writes: %s", why, strings.Join(crash.Writes(), "; "))
	return false
}

func (r *run) get() (*cachev1.RedisCluster, error) {
	rc := &cachev1.RedisCluster{}
	err := r.suite.admin.Get(context.Background(), client.ObjectKeyFromObject(r.rc), rc)
	return rc, err
}

// converged: Ready for the current generation, every pod labelled with its role in replication
// mode, and the scenario's change carried out. Ready does not wait for the labels: a replica is
// labelled once its link is up, which a full sync under load took more than the quiet time to
// bring (CI, 2026-12-06 and 07: the label written after the harness had judged the run
// converged crashed that operator, and no fresh one came to write it).
func (r *run) converged() error {
	if err := r.ready(); err != nil {
		return err
	}
	if !r.sc.cluster {
		pods, err := r.pods()
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Labels[resources.LabelRole] == "" {
				return fmt.Errorf("pod %s has no role label yet", p.Name)
			}
		}
	}
	if r.sc.done != nil {
		return r.sc.done(r)
	}
	return nil
}

// ready: Ready for the current generation.
func (r *run) ready() error {
	rc, err := r.get()
	if err != nil {
		return err
	}
	if rc.Status.ObservedGeneration != rc.Generation {
		return fmt.Errorf("observedGeneration %d of %d", rc.Status.ObservedGeneration, rc.Generation)
	}
	if !meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionReady) {
		return fmt.Errorf("not Ready: %v", meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionReady))
	}
	return nil
}

func (r *run) pods() ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.suite.admin.List(context.Background(), pods, client.InNamespace(r.ns)); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items, nil
}

// password is the one the operator is asked to use now.
func (r *run) password() (string, error) {
	rc, err := r.get()
	if err != nil {
		return "", err
	}
	name, key := resources.PasswordSource(rc)
	s := &corev1.Secret{}
	if err := r.suite.admin.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: name}, s); err != nil {
		return "", err
	}
	return string(s.Data[key]), nil
}

// redis opens a connection to the pod's Redis with whichever known password it takes.
func (r *run) redis(ctx context.Context, ip string) (*goredis.Client, error) {
	current, err := r.password()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if !slices.Contains(r.passwords, current) {
		r.passwords = append(r.passwords, current)
	}
	candidates := slices.Clone(r.passwords)
	r.mu.Unlock()
	slices.Reverse(candidates)
	var errs []error
	for _, password := range candidates {
		c := goredis.NewClient(&goredis.Options{
			Addr: net.JoinHostPort(ip, strconv.Itoa(redistest.Port)), Password: password,
			MaxRetries: -1, Protocol: 2, DisableIdentity: true, PoolSize: 1,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
		err := c.Ping(ctx).Err()
		if err == nil {
			return c, nil
		}
		_ = c.Close()
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// writer is a client writing as long as it runs: each key to the pod labelled primary, kept as
// acknowledged when WAIT 1 says a replica has it (in cluster mode, through a cluster client,
// which follows MOVED and ASK).
type writer struct {
	*redistest.Writer
	// closeClient closes the cluster client of a writer in cluster mode.
	closeClient func()
}

func (r *run) startWriter() *writer {
	if r.sc.cluster {
		return r.startClusterWriter()
	}
	return &writer{Writer: redistest.StartWriter(redistest.WriterOptions{
		Client: func(ctx context.Context) (goredis.UniversalClient, error) {
			pods := &corev1.PodList{}
			if err := r.suite.admin.List(ctx, pods, client.InNamespace(r.ns), client.MatchingLabels{resources.LabelRole: resources.RolePrimary}); err != nil {
				return nil, err
			}
			if len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
				return nil, fmt.Errorf("%d pods labelled primary", len(pods.Items))
			}
			return r.redis(ctx, pods.Items[0].Status.PodIP)
		},
		CloseEach: true, Wait: 200 * time.Millisecond, Every: 20 * time.Millisecond, Prefix: "key-",
	}), closeClient: func() {}}
}

func (w *writer) stop() {
	w.Stop()
	w.closeClient()
}

// checkInvariants checks, once the RedisCluster converged, what users rely on.
func (r *run) checkInvariants(t *testing.T, w *writer) {
	t.Helper()
	ctx := context.Background()
	if err := r.converged(); err != nil {
		// Seen in CI, rarely (version upgrade, 2026-12-06 and 07): converged, then a pod not
		// ready. What the local node did to each pod goes with the failure into the summary.
		why := fmt.Sprintf("converged, then not: %v; the local node: %s", err, r.node.History())
		r.suite.failures.Store(t.Name(), why)
		r.logEvents(t)
		t.Fatal(why)
	}
	var pods []corev1.Pod

	// Exactly one primary, named by the status and the labels; the others replicate from it,
	// none from the fence. Replicas may still be connecting: checked until they are.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rc, err := r.get()
		require.NoError(c, err)
		pods, err = r.pods()
		require.NoError(c, err)
		require.Len(c, pods, int(rc.Spec.Replicas), "pods")
		var primaries []string
		roles := map[string]string{}
		for _, p := range pods {
			rdb, err := r.redis(ctx, p.Status.PodIP)
			require.NoError(c, err, "pod %s", p.Name)
			info, err := rdb.Info(ctx, "replication").Result()
			_ = rdb.Close()
			require.NoError(c, err)
			fields := infoFields(info)
			if fields["role"] == "master" {
				primaries = append(primaries, p.Name)
				continue
			}
			roles[p.Name] = fields["master_host"] + ":" + fields["master_port"] + " " + fields["master_link_status"]
		}
		require.Len(c, primaries, 1, "nodes that are primaries; the others replicate from %v", roles)
		primary := primaries[0]
		assert.Equal(c, primary, rc.Status.Primary, "status.primary")
		for _, p := range pods {
			want := resources.RoleReplica
			if p.Name == primary {
				want = resources.RolePrimary
			} else {
				ip := podIP(pods, primary)
				assert.Equal(c, net.JoinHostPort(ip, strconv.Itoa(redistest.Port))+" up", roles[p.Name], "%s replicates from the primary", p.Name)
				assert.NotContains(c, roles[p.Name], strings.Replace(topology.FenceAddr, "127.0.0.1:", "127.0.0.1 ", 1), "%s is behind the fence", p.Name)
			}
			assert.Equal(c, want, p.Labels[resources.LabelRole], "the role label of %s", p.Name)
		}
	}, 20*time.Second, 200*time.Millisecond)

	// The primary takes a write at once (no pause left on it), and holds every acknowledged one.
	rc, err := r.get()
	require.NoError(t, err)
	rdb, err := r.redis(ctx, podIP(pods, rc.Status.Primary))
	require.NoError(t, err)
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, "probe", "after", 0).Err(), "the primary takes a write within a second")
	acked, tried, _ := w.Result()
	if r.sc.name != "bootstrap" {
		require.NotEmpty(t, acked, "the writer had writes acknowledged (%d tried)", tried)
	}
	lost := redistest.Missing(ctx, rdb, acked)
	assert.Empty(t, lost, "acknowledged writes lost, of %d acknowledged", len(acked))
}

func podIP(pods []corev1.Pod, name string) string {
	for _, p := range pods {
		if p.Name == name {
			return p.Status.PodIP
		}
	}
	return ""
}

func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// The scenarios: bootstrap, failover, switchover for a scale-in, a version upgrade (a rollout
// with a switchover), a slot move, and a password change in either mode.
func crashScenarios() []scenario {
	ready := func(t *testing.T, r *run) {
		stop := r.startOperator(t, nil)
		defer stop()
		require.NoError(t, r.suite.admin.Create(context.Background(), r.rc))
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, r.ready()) }, converge, 100*time.Millisecond)
	}
	patch := func(t *testing.T, r *run, change func(*cachev1.RedisCluster)) {
		rc, err := r.get()
		require.NoError(t, err)
		base := client.MergeFrom(rc.DeepCopy())
		change(rc)
		require.NoError(t, r.suite.admin.Patch(context.Background(), rc, base))
	}
	var primaryBefore sync.Map // run -> the primary when the scenario started
	return []scenario{{
		name:  "bootstrap",
		given: func(*testing.T, *run) {},
		when: func(t *testing.T, r *run, _ *writer) {
			require.NoError(t, r.suite.admin.Create(context.Background(), r.rc))
		},
	}, {
		name:  "failover",
		given: ready,
		when: func(t *testing.T, r *run, w *writer) {
			rc, err := r.get()
			require.NoError(t, err)
			primaryBefore.Store(r, rc.Status.Primary)
			waitForWriterAcks(t, w)
			r.node.Server(rc.Status.Primary).Kill()
		},
		done: func(r *run) error {
			rc, err := r.get()
			if err != nil {
				return err
			}
			if before, _ := primaryBefore.Load(r); rc.Status.Primary == before {
				return fmt.Errorf("the primary is still %s", before)
			}
			return nil
		},
	}, {
		name: "switchover for scale-in",
		given: func(t *testing.T, r *run) {
			ready(t, r)
			// The primary moves off sessions-0, so that scaling in to one node needs a switchover.
			stop := r.startOperator(t, nil)
			defer stop()
			w := r.startWriter()
			waitForWriterAcks(t, w)
			w.stop()
			r.node.Server("sessions-0").Kill()
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				rc, err := r.get()
				require.NoError(c, err)
				assert.NotEqual(c, "sessions-0", rc.Status.Primary)
				assert.NoError(c, r.ready())
			}, converge, 100*time.Millisecond)
		},
		when: func(t *testing.T, r *run, w *writer) {
			waitForWriterAcks(t, w)
			patch(t, r, func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = 1 })
		},
		done: func(r *run) error {
			sts := &appsv1.StatefulSet{}
			if err := r.suite.admin.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.rc.Name}, sts); err != nil {
				return err
			}
			if ptr.Deref(sts.Spec.Replicas, 0) != 1 {
				return fmt.Errorf("the StatefulSet has %d replicas", ptr.Deref(sts.Spec.Replicas, 0))
			}
			return podsAt(r, 1, "")
		},
	}, {
		name:  "version upgrade",
		given: ready,
		when: func(t *testing.T, r *run, w *writer) {
			waitForWriterAcks(t, w)
			patch(t, r, func(rc *cachev1.RedisCluster) { rc.Spec.Version = "7.0" })
		},
		done: func(r *run) error {
			sts := &appsv1.StatefulSet{}
			if err := r.suite.admin.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.rc.Name}, sts); err != nil {
				return err
			}
			if image := sts.Spec.Template.Spec.Containers[0].Image; image != "redis:7.0" {
				return fmt.Errorf("the StatefulSet runs %s", image)
			}
			if sts.Status.ObservedGeneration != sts.Generation {
				return fmt.Errorf("the StatefulSet's status is behind")
			}
			return podsAt(r, 3, sts.Status.UpdateRevision)
		},
	}, slotMoveScenario(ready), passwordChangeScenario(ready, false), passwordChangeScenario(ready, true)}
}

// passwordChangeScenario is a change of the password Secret under a writer, with the old
// password valid beside the new one for 1s: the crash points cover its removal too. In cluster
// mode (3 shards of 2 nodes) every node of every shard takes the new password and refuses the
// old one.
func passwordChangeScenario(ready func(*testing.T, *run), cluster bool) scenario {
	name := "password change"
	if cluster {
		name += " in cluster mode"
	}
	return scenario{
		name:    name,
		cluster: cluster,
		tune:    func(o *operator.Options) { o.SecretResync = 200 * time.Millisecond },
		given: func(t *testing.T, r *run) {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-redis", Namespace: r.ns},
				Data: map[string][]byte{"password": []byte("first-password-7c1e")}}
			require.NoError(t, r.suite.admin.Create(context.Background(), secret))
			r.rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "my-redis"},
				PreviousPasswordValidFor: &metav1.Duration{Duration: time.Second}}
			if cluster {
				r.rc.Spec.Replicas = 2
				r.rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
			}
			ready(t, r)
		},
		when: func(t *testing.T, r *run, w *writer) {
			waitForWriterAcks(t, w)
			secret := &corev1.Secret{}
			require.NoError(t, r.suite.admin.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: "my-redis"}, secret))
			secret.Data["password"] = []byte("second-password-90ad")
			require.NoError(t, r.suite.admin.Update(context.Background(), secret))
		},
		done: func(r *run) error {
			pods, err := r.pods()
			if err != nil {
				return err
			}
			ping := func(pod corev1.Pod, password string) error {
				c := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(redistest.Port)),
					Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
				defer c.Close()
				return c.Ping(context.Background()).Err()
			}
			for _, p := range pods {
				if err := ping(p, "second-password-90ad"); err != nil {
					return fmt.Errorf("%s does not take the new password: %w", p.Name, err)
				}
				if ping(p, "first-password-7c1e") == nil {
					return fmt.Errorf("%s still takes the old password after its time", p.Name)
				}
			}
			// The rotation is over: its state is gone from the API
			err = r.suite.admin.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: "sessions-auth-previous"}, &corev1.Secret{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("sessions-auth-previous is still there (%w)", err)
			}
			return nil
		},
	}
}

// podsAt: exactly n pods, each at revision (any when empty).
func podsAt(r *run, n int, revision string) error {
	pods, err := r.pods()
	if err != nil {
		return err
	}
	if len(pods) != n {
		return fmt.Errorf("%d pods, want %d", len(pods), n)
	}
	for _, p := range pods {
		if revision != "" && p.Labels[appsv1.ControllerRevisionHashLabelKey] != revision {
			return fmt.Errorf("pod %s is at an old revision", p.Name)
		}
	}
	return nil
}

// waitForWriterAcks holds a change until the writer has a write acknowledged: the ones that
// must survive it.
func waitForWriterAcks(t *testing.T, w *writer) {
	t.Helper()
	require.Eventually(t, func() bool { return w.Acked() > 0 }, converge, 20*time.Millisecond, "the writer has a write acknowledged")
}
