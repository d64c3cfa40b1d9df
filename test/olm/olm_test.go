//go:build olm

// Package olm_test installs, upgrades and removes the operator with Operator Lifecycle Manager
// (v0.38.0, its olm and catalog operators built from source) on the local cluster: from the
// catalog as OperatorHub does, and with what `operator-sdk run bundle` does. Nothing of the
// operator is installed by hand: OLM creates its ServiceAccount, RBAC and Deployment from the
// CSV, and the node runs the Deployment's pods as the manager binary built for each version.
package olm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/olm"
	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

const (
	pkg     = "redis-operator"
	waitFor = 3 * time.Minute
	tick    = 250 * time.Millisecond
)

var (
	cluster *localcluster.Cluster
	root    string
)

func TestMain(m *testing.M) {
	var err error
	if root, err = testenv.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	suite := localcluster.Suite{
		Name: "olm",
		Start: func(ctx context.Context, root, dir string) (*localcluster.Cluster, error) {
			started := time.Now()
			c, err := localcluster.StartWithOLM(ctx, root, dir, "0.1.0", "0.2.0")
			if err == nil {
				fmt.Printf("figure: local cluster with OLM started in %.1fs\n", time.Since(started).Seconds())
			}
			return c, err
		},
		Diagnose: diagnose,
	}
	os.Exit(suite.Run(m, root, func(c *localcluster.Cluster) { cluster = c }))
}

// diagnose prints what OLM made and every log, for a failed run.
func diagnose(c *localcluster.Cluster, dir string) {
	for _, q := range []struct{ title, what, jsonpath string }{
		{"what OLM made", "csv,deploy,pods,installplans,subscriptions,catalogsources", ""},
		{"what OLM v1 made", "clustercatalogs,clusterextensions", "{range .items[*]}{.metadata.name}: {.status.conditions}{\"\\n\"}{end}"},
		{"CSVs", "csv", "{range .items[*]}{.metadata.name}: {.status.phase} {.status.reason} {.status.message}{\"\\n\"}{end}"},
		{"pods", "pods", "{range .items[*]}{.metadata.name}: {.status.phase} {.status.message}{\"\\n\"}{end}"},
		{"plans and subscriptions", "installplans,subscriptions", "{range .items[*]}{.metadata.name}: {.status.phase} {.status.conditions}{\"\\n\"}{end}"},
	} {
		args := []string{"get", q.what, "-A", "-o", "wide"}
		if q.jsonpath != "" {
			args = []string{"get", q.what, "-A", "-o", "jsonpath=" + q.jsonpath}
		}
		out, _ := c.KubectlOutput(args...)
		fmt.Fprintf(os.Stderr, "--- %s\n%s\n", q.title, out)
	}
	out, _ := c.KubectlOutput("get", "pods", "-A", "-o", "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if namespace, name, ok := strings.Cut(line, " "); ok {
			logs, _ := c.KubectlOutput("logs", "-n", namespace, name, "--all-containers", "--tail=40")
			fmt.Fprintf(os.Stderr, "--- pod %s/%s (last 40 lines)\n%s\n", namespace, name, logs)
		}
	}
	for _, l := range []string{c.LogPath("catalog"), c.LogPath("olm"), c.LogPath("catalogd"), c.LogPath("operator-controller")} {
		if log, err := os.ReadFile(l); err == nil {
			fmt.Fprintf(os.Stderr, "--- %s (last 3 KiB)\n%s\n", l, log[max(0, len(log)-3072):])
		}
	}
}

// newNamespace is a users' namespace: it enforces the restricted Pod Security Standard, which
// the operator's, the Redis, the registry and the scorecard pods must pass.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	return newNamespaceEnforcing(t, name, "restricted")
}

// newRunBundleNamespace is a namespace operator-sdk run bundle installs into: the Pod Security
// Standard baseline enforced, restricted warned of. The CLI's registry pod (v1.42.3) does not
// meet restricted, even with --security-context-config restricted: it sets no runAsNonRoot, and
// its init container has no security context. The operator's and Redis's pods do (warned of,
// and the e2e and catalog stories enforce it).
func newRunBundleNamespace(t *testing.T, name string) string {
	t.Helper()
	return newNamespaceEnforcing(t, name, "baseline")
}

func newNamespaceEnforcing(t *testing.T, name, level string) string {
	t.Helper()
	require.NoError(t, cluster.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/warn": "restricted"}}}))
	return name
}

func csvPhase(c require.TestingT, namespace, name string) operatorsv1alpha1.ClusterServiceVersionPhase {
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, csv); err != nil {
		return ""
	}
	return csv.Status.Phase
}

func waitCSV(t *testing.T, namespace, name string) time.Duration {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, operatorsv1alpha1.CSVPhaseSucceeded, csvPhase(c, namespace, name))
	}, waitFor, tick, "CSV %s/%s Succeeded", namespace, name)
	return time.Since(start)
}

// catalogPoll is how often OLM looks for a new catalog image under the CatalogSource's name.
const catalogPoll = 15 * time.Second

// publishedCatalog is catalog/ as published, with only the bundles keep takes.
func publishedCatalog(t *testing.T, keep func(string) bool) *declcfg.DeclarativeConfig {
	t.Helper()
	fbc, err := localcluster.CatalogOf(context.Background(), root, keep)
	require.NoError(t, err)
	return fbc
}

// unpackJobs counts the bundle unpack Jobs OLM ran in its catalog namespace that completed.
func unpackJobs(t *testing.T) int {
	t.Helper()
	jobs := &batchv1.JobList{}
	require.NoError(t, cluster.Client.List(context.Background(), jobs, client.InNamespace(localcluster.OLMNamespace)))
	n := 0
	for _, j := range jobs.Items {
		if j.Status.Succeeded > 0 {
			n++
		}
	}
	return n
}

func catalogReady(c require.TestingT, namespace, name string) string {
	cs := &operatorsv1alpha1.CatalogSource{}
	require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, cs))
	if cs.Status.GRPCConnectionState == nil {
		return ""
	}
	return cs.Status.GRPCConnectionState.LastObservedState
}

func redisClusterReady(c require.TestingT, namespace string) bool {
	rc := &cachev1.RedisCluster{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "sessions"}, rc); err != nil {
		return false
	}
	return testenv.Ready(rc)
}

// podRestarts is each Redis pod's UID and restart count.
func podRestarts(t require.TestingT, namespace string) map[string]string {
	pods := &corev1.PodList{}
	require.NoError(t, cluster.Client.List(context.Background(), pods, client.InNamespace(namespace)))
	out := map[string]string{}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, "sessions-") {
			continue // the operator's and the catalog's pods change on purpose
		}
		restarts := int32(0)
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
		out[p.Name] = fmt.Sprintf("%s/%d", p.UID, restarts)
	}
	return out
}

// upgradeWatch is what a user of a RedisCluster sees while the operator is upgraded: a client
// writing through the primary Service (WAIT 1), and the RedisCluster's Ready condition every
// 100 ms.
type upgradeWatch struct {
	namespace string
	writer    *redistest.Writer
	notReady  atomic.Int64
	// unread counts observations the API server did not answer: they say nothing of the
	// RedisCluster (under load in CI, a Get can time out).
	unread atomic.Int64
	// why is what the first observations not Ready saw (condition, reason, message, nodes).
	mu   sync.Mutex
	why  []string
	stop chan struct{}
	done chan struct{}
}

// watchUpgrade starts watching the RedisCluster sessions in namespace; every also runs at each
// observation (nil: nothing).
func watchUpgrade(t *testing.T, namespace string, every func()) *upgradeWatch {
	t.Helper()
	u := &upgradeWatch{namespace: namespace, stop: make(chan struct{}), done: make(chan struct{})}
	u.writer = redistest.StartWriter(redistest.WriterOptions{
		Client:    func(ctx context.Context) (goredis.UniversalClient, error) { return primaryClient(ctx, namespace) },
		CloseEach: true, Wait: time.Second, Every: 20 * time.Millisecond, Prefix: "upgrade-",
	})
	t.Cleanup(u.writer.Stop)
	go func() {
		defer close(u.done)
		for {
			select {
			case <-u.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			rc := &cachev1.RedisCluster{}
			if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "sessions"}, rc); err != nil {
				u.unread.Add(1)
			} else if !testenv.Ready(rc) {
				u.notReady.Add(1)
				u.mu.Lock()
				if len(u.why) < 5 {
					ready := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionReady)
					u.why = append(u.why, fmt.Sprintf("%s: generation %d, observed %d, Ready %+v, nodes %+v", time.Now().Format(time.StampMilli),
						rc.Generation, rc.Status.ObservedGeneration, ready, rc.Status.Nodes))
				}
				u.mu.Unlock()
			}
			if every != nil {
				every()
			}
		}
	}()
	return u
}

// finish stops watching and asserts the RedisCluster stayed Ready and lost no acknowledged write.
func (u *upgradeWatch) finish(t *testing.T) {
	t.Helper()
	u.writer.Stop()
	close(u.stop)
	<-u.done
	u.mu.Lock()
	assert.Zero(t, u.notReady.Load(), "observations of the RedisCluster not Ready during the upgrade: %v", u.why)
	u.mu.Unlock()
	if n := u.unread.Load(); n > 0 {
		fmt.Printf("figure: observations the API server did not answer during the upgrade: %d\n", n)
	}
	acked, _, _ := u.writer.Result()
	reader, err := primaryClient(context.Background(), u.namespace)
	require.NoError(t, err)
	defer reader.Close()
	lost := redistest.Missing(context.Background(), reader, acked)
	assert.Empty(t, lost, "writes acknowledged with WAIT 1 and then lost")
	assert.NotEmpty(t, acked)
	fmt.Printf("figure: writes during the upgrade: %d acknowledged, %d lost\n", len(acked), len(lost))
}

// operatorStaysRunning waits until one operator pod runs in namespace, then checks for 5 s that
// it is still that pod and has not restarted (an operator that crashes once started is Succeeded
// first).
func operatorStaysRunning(t *testing.T, namespace string) {
	t.Helper()
	running := func(c require.TestingT) (name string, restarts int32) {
		pods := &corev1.PodList{}
		require.NoError(c, cluster.Client.List(context.Background(), pods, client.InNamespace(namespace), client.MatchingLabels{"control-plane": "controller-manager"}))
		var names []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				names = append(names, p.Name)
				for _, cs := range p.Status.ContainerStatuses {
					restarts += cs.RestartCount
				}
			}
		}
		require.Len(c, names, 1, "one operator pod Running in %s", namespace)
		return names[0], restarts
	}
	var pod string
	require.EventuallyWithT(t, func(c *assert.CollectT) { pod, _ = running(c) }, waitFor, tick)
	for range 10 {
		time.Sleep(500 * time.Millisecond)
		name, restarts := running(t)
		require.Equal(t, pod, name, "the operator's pod was replaced")
		require.Zero(t, restarts, "the operator's container restarted")
	}
}

// The catalog story: install from the catalog as OperatorHub does, run a RedisCluster under the
// OLM-installed operator, then let a new catalog drive the upgrade by itself.
func TestCatalogInstallAndUpgrade(t *testing.T) {
	ctx := context.Background()
	only010 := func(name string) bool { return name == pkg+".v0.1.0" }

	// Given the catalog with 0.1.0 only, published as a catalog image with its bundle image, and
	// a CatalogSource of that image in OLM's global catalog namespace (OLM runs its registry pod
	// and polls the image for a new one)
	published010 := time.Now()
	require.NoError(t, cluster.PublishCatalog(ctx, localcluster.CatalogImage, publishedCatalog(t, only010)))
	fmt.Printf("figure: catalog and bundle images of 0.1.0 built and pushed in %.1fs\n", time.Since(published010).Seconds())
	require.NoError(t, cluster.ServeCatalogImage(ctx, localcluster.OLMNamespace, pkg, localcluster.CatalogImage, catalogPoll))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "READY", catalogReady(c, localcluster.OLMNamespace, pkg))
	}, waitFor, tick)

	// When a platform team subscribes in the global OperatorGroup (AllNamespaces)
	subscribed := time.Now()
	sub := &operatorsv1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Name: pkg, Namespace: localcluster.OperatorsNamespace},
		Spec: &operatorsv1alpha1.SubscriptionSpec{Package: pkg, Channel: "stable", CatalogSource: pkg,
			CatalogSourceNamespace: localcluster.OLMNamespace, InstallPlanApproval: operatorsv1alpha1.ApprovalAutomatic},
	}
	require.NoError(t, cluster.Client.Create(ctx, sub))

	// Then OLM unpacks the bundle image with a Job, installs 0.1.0 and its Deployment becomes Available
	waitCSV(t, localcluster.OperatorsNamespace, pkg+".v0.1.0")
	fmt.Printf("figure: Subscription -> CSV 0.1.0 Succeeded in %.1fs\n", time.Since(subscribed).Seconds())
	assert.Equal(t, 1, unpackJobs(t), "OLM unpacked 0.1.0's bundle image with a Job")
	cluster.MustKubectl(t, "-n", localcluster.OperatorsNamespace, "wait", "deployment/redis-operator-controller-manager", "--for=condition=Available", "--timeout=60s")
	sa := "system:serviceaccount:" + localcluster.OperatorsNamespace + ":redis-operator-controller-manager"
	for verb, want := range map[string]string{"patch statefulsets": "yes", "list redisclusters.cache.example.com": "yes", "list secrets": "no", "delete deployments": "no"} {
		out, _ := cluster.KubectlOutput(append([]string{"auth", "can-i", "--as", sa, "-n", "default"}, strings.Fields(verb)...)...)
		assert.Equal(t, want, strings.TrimSpace(out), "can the operator %s", verb)
	}

	// And the sample becomes Ready under the OLM-installed operator
	ns := newNamespace(t, "catalog-story")
	cluster.MustKubectl(t, "-n", ns, "apply", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
	require.Eventually(t, func() bool { return redisClusterReady(t, ns) }, waitFor, tick, "RedisCluster Ready")
	before := podRestarts(t, ns)

	// And a client writes through the primary Service while the operator is upgraded, and the
	// leader election Lease shows how long no operator led
	lease := client.ObjectKey{Namespace: localcluster.OperatorsNamespace, Name: "redis-operator.cache.example.com"}
	leader := func() string {
		l := &coordinationv1.Lease{}
		if err := cluster.Client.Get(ctx, lease, l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	oldLeader := leader()
	require.NotEmpty(t, oldLeader, "the 0.1.0 operator leads")
	lastOld := time.Now()
	var firstNew time.Time
	upgrade := watchUpgrade(t, ns, func() {
		switch holder := leader(); {
		case holder == oldLeader:
			lastOld = time.Now()
		case holder != "" && firstNew.IsZero():
			firstNew = time.Now()
		}
	})

	// When the next release is published: a new catalog image under the same name, with 0.2.0
	// and its bundle image; nobody touches the cluster
	published := time.Now()
	require.NoError(t, cluster.PublishCatalog(ctx, localcluster.CatalogImage, publishedCatalog(t, nil)))

	// Then OLM finds it at its next poll and upgrades by itself: 0.2.0 Succeeded and 0.1.0 gone
	waitCSV(t, localcluster.OperatorsNamespace, pkg+".v0.2.0")
	fmt.Printf("figure: catalog image pushed -> CSV 0.2.0 Succeeded in %.1fs (registry poll every %s)\n", time.Since(published).Seconds(), catalogPoll)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, csvPhase(c, localcluster.OperatorsNamespace, pkg+".v0.1.0"), "the old CSV is gone")
	}, waitFor, tick)
	cluster.MustKubectl(t, "-n", localcluster.OperatorsNamespace, "wait", "deployment/redis-operator-controller-manager", "--for=condition=Available", "--timeout=60s")
	assert.Equal(t, 2, unpackJobs(t), "OLM unpacked 0.2.0's bundle image with a Job too")
	// The new operator takes the lease (the watcher above times it) and keeps running
	require.Eventually(t, func() bool { l := leader(); return l != "" && l != oldLeader }, waitFor, tick, "a new operator takes the lease")
	operatorStaysRunning(t, localcluster.OperatorsNamespace)

	// And Redis never noticed: Ready throughout, no acknowledged write lost, no pod restarted
	upgrade.finish(t)
	assert.Equal(t, before, podRestarts(t, ns), "no Redis pod restarted or was replaced because the operator changed")
	if assert.False(t, firstNew.IsZero(), "a new operator took the lease") {
		fmt.Printf("figure: operator leader handover during the upgrade: %.1fs without a leader (100 ms resolution)\n", firstNew.Sub(lastOld).Seconds())
	}

	// And failover still works under the upgraded operator
	primary := primaryPodName(t, ns)
	killed := time.Now()
	id, err := cluster.ContainerID(ctx, ns, primary, "redis")
	require.NoError(t, err)
	require.NoError(t, cluster.KillContainer(ctx, id))
	require.Eventually(t, func() bool {
		c, err := primaryClient(ctx, ns)
		if err != nil {
			return false
		}
		defer c.Close()
		return primaryPodName(t, ns) != primary && c.Set(ctx, "after-failover", 1, 0).Err() == nil
	}, waitFor, 20*time.Millisecond, "a new primary takes writes")
	fmt.Printf("figure: failover under the OLM-upgraded operator: writes accepted again %.2fs after the primary's Redis died\n", time.Since(killed).Seconds())

	deploy := &appsv1.Deployment{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: localcluster.OperatorsNamespace, Name: "redis-operator-controller-manager"}, deploy))
	assert.Equal(t, localcluster.OperatorImage("0.2.0"), deploy.Spec.Template.Spec.Containers[0].Image)

	// Bad input: a Subscription to a channel the catalog does not have says so in its conditions
	bad := &operatorsv1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Name: "no-such-channel", Namespace: localcluster.OperatorsNamespace},
		Spec: &operatorsv1alpha1.SubscriptionSpec{Package: pkg, Channel: "nightly", CatalogSource: pkg,
			CatalogSourceNamespace: localcluster.OLMNamespace},
	}
	require.NoError(t, cluster.Client.Create(ctx, bad))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &operatorsv1alpha1.Subscription{}
		require.NoError(c, cluster.Client.Get(ctx, client.ObjectKeyFromObject(bad), got))
		cond := got.Status.GetCondition(operatorsv1alpha1.SubscriptionResolutionFailed)
		assert.Equal(c, corev1.ConditionTrue, cond.Status)
		assert.Contains(c, cond.Message, "nightly")
	}, waitFor, tick, "the Subscription reports ResolutionFailed")
	require.NoError(t, cluster.Client.Delete(ctx, bad))

	// And a catalog that goes down shows in the CatalogSource's connection state
	pods := &corev1.PodList{}
	require.NoError(t, cluster.Client.List(ctx, pods, client.InNamespace(localcluster.OLMNamespace)))
	for i := range pods.Items {
		require.NoError(t, cluster.Client.Delete(ctx, &pods.Items[i]))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, "READY", catalogReady(c, localcluster.OLMNamespace, pkg))
	}, waitFor, tick, "the CatalogSource is no longer READY")
	fmt.Printf("figure: catalog down -> CatalogSource state %s\n", catalogReady(t, localcluster.OLMNamespace, pkg))

	// Cleanup: the next story installs the operator for one namespace, which a global install would overlap.
	require.NoError(t, cluster.Client.Delete(ctx, sub))
	cluster.MustKubectl(t, "-n", localcluster.OperatorsNamespace, "delete", "csv", pkg+".v0.2.0", "--wait")
	cluster.MustKubectl(t, "-n", localcluster.OLMNamespace, "delete", "catalogsource", pkg)
}

// runMake runs a make target as a user would, against the local cluster, and returns what it
// printed; it must succeed.
func runMake(t *testing.T, args ...string) string { return makeTarget(t, true, args...) }

// sdkSaid is what operator-sdk logged in out, its messages unquoted: logrus writes
// msg="OLM has successfully installed \"redis-operator.v0.1.0\"" when not on a terminal.
func sdkSaid(out string) string {
	var said []string
	for _, line := range strings.Split(out, "\n") {
		_, msg, ok := strings.Cut(line, " msg=")
		if !ok {
			continue
		}
		if quoted, err := strconv.QuotedPrefix(msg); err == nil {
			msg, _ = strconv.Unquote(quoted)
		} else {
			msg, _, _ = strings.Cut(msg, " ")
		}
		said = append(said, msg)
	}
	return strings.Join(said, "\n")
}

// runMakeFailing runs a make target that must fail.
func runMakeFailing(t *testing.T, args ...string) string { return makeTarget(t, false, args...) }

func makeTarget(t *testing.T, succeed bool, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.AdminKubeconfig)
	out, err := cmd.CombinedOutput()
	if succeed {
		require.NoError(t, err, "make %s:\n%s", strings.Join(args, " "), out)
	} else {
		require.Error(t, err, "make %s should fail:\n%s", strings.Join(args, " "), out)
	}
	t.Logf("make %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// brokenBundle is a copy of bundle/ whose CSV lost the descriptor of spec.replicas.
func brokenBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(root, "bundle"))))
	csv := filepath.Join(dir, "manifests", "redis-operator.clusterserviceversion.yaml")
	raw, err := os.ReadFile(csv)
	require.NoError(t, err)
	broken := strings.Replace(string(raw), "\n        path: replicas\n", "\n        path: replicaCount\n", 1)
	require.NotEqual(t, string(raw), broken)
	require.NoError(t, os.WriteFile(csv, []byte(broken), 0o644))
	return dir
}

// The operator-sdk story, as make targets: run bundle (0.1.0, for one namespace), run
// bundle-upgrade (to 0.2.0), cleanup. Installed for its own namespace (OwnNamespace), the
// operator reconciles RedisClusters there alone and holds no right elsewhere.
func TestRunBundleUpgradeAndCleanupForOneNamespace(t *testing.T) {
	ctx := context.Background()
	ns := newRunBundleNamespace(t, "team-a")
	other := newNamespace(t, "team-b")
	nsArg := "RUN_BUNDLE_NAMESPACE=" + ns

	// Given the bundle images of the releases in catalog/ in the cluster's registry
	released := publishedCatalog(t, nil)
	require.NoError(t, cluster.PublishBundles(ctx, released))

	// When the previous release's bundle image is run, as OperatorHub.io's upgrade test does
	// (operator-sdk run bundle)
	out := runMake(t, "run-bundle", "BUNDLE_IMG="+released.Bundles[0].Image, nsArg)
	assert.Contains(t, sdkSaid(out), `OperatorGroup "operator-sdk-og" created`)
	assert.Contains(t, sdkSaid(out), `OLM has successfully installed "redis-operator.v0.1.0"`)
	cluster.MustKubectl(t, "-n", ns, "wait", "deployment/redis-operator-controller-manager", "--for=condition=Available", "--timeout=60s")

	// The operator may act in its namespace and nowhere else
	sa := "system:serviceaccount:" + ns + ":redis-operator-controller-manager"
	for _, check := range []struct{ namespace, verb, want string }{
		{ns, "patch statefulsets", "yes"}, {ns, "list redisclusters.cache.example.com", "yes"},
		{other, "patch statefulsets", "no"}, {other, "list redisclusters.cache.example.com", "no"},
		{other, "get secrets", "no"},
	} {
		out, _ := cluster.KubectlOutput(append([]string{"auth", "can-i", "--as", sa, "-n", check.namespace}, strings.Fields(check.verb)...)...)
		assert.Equal(t, check.want, strings.TrimSpace(out), "can the operator %s in %s", check.verb, check.namespace)
	}

	// and reconciles its namespace's RedisClusters, not another's
	for _, n := range []string{ns, other} {
		cluster.MustKubectl(t, "-n", n, "apply", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
	}
	require.Eventually(t, func() bool { return redisClusterReady(t, ns) }, waitFor, tick, "RedisCluster Ready in %s", ns)
	rc := &cachev1.RedisCluster{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: other, Name: "sessions"}, rc))
	assert.Empty(t, rc.Status.Conditions, "nobody reconciles %s", other)
	before := podRestarts(t, ns)

	// Given the Prometheus Operator's CRDs (the bundle does not carry its monitoring objects:
	// OLM would fail the whole install on a cluster without these CRDs)
	cluster.MustKubectl(t, "apply", "--server-side", "-f", filepath.Join(root, "bin", "prometheus-crds"))

	// When a developer builds this tree's bundle image, pushes it to the cluster's registry and
	// upgrades to it (operator-sdk run bundle-upgrade), while a client writes
	upgrade := watchUpgrade(t, ns, nil)
	upgraded := time.Now()
	out = runMake(t, "bundle-build", "bundle-push", "run-bundle-upgrade", nsArg)
	assert.Contains(t, sdkSaid(out), `Successfully upgraded to "redis-operator.v0.2.0"`)
	fmt.Printf("figure: bundle image built and pushed, run bundle-upgrade 0.1.0 -> 0.2.0: CSV Succeeded in %.1fs\n", time.Since(upgraded).Seconds())

	// Then the new operator runs and stays so, and the RedisCluster stayed Ready with every
	// acknowledged write
	operatorStaysRunning(t, ns)
	upgrade.finish(t)
	assert.Equal(t, before, podRestarts(t, ns), "the upgrade restarted no Redis pod")

	// Then the upgraded operator installs its ServiceMonitor and PrometheusRule in its namespace,
	// owned by the metrics Service OLM created
	monitoringObjects := func(c require.TestingT) string {
		out, err := cluster.KubectlOutput("-n", ns, "get", "servicemonitors,prometheusrules", "-o",
			`jsonpath={range .items[*]}{.kind}/{.metadata.name} owned by {.metadata.ownerReferences[0].name}{"\n"}{end}`)
		require.NoError(c, err, out)
		return out
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "ServiceMonitor/redis-operator-controller-manager-metrics-monitor owned by redis-operator-controller-manager-metrics-service\n"+
			"PrometheusRule/redis-operator-rules owned by redis-operator-controller-manager-metrics-service\n", monitoringObjects(c))
	}, waitFor, tick)

	// The operator's log, through the API server as a user reads it, says which version runs.
	// Read until it answers: right after an upgrade OLM may roll the Deployment once more (the
	// new CSV goes back to Pending, RequirementsNotMet, while the ServiceAccount still names the
	// old CSV as its owner, a race OLM mends by itself), and kubectl logs can pick the pod
	// being replaced.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		logs, err := cluster.KubectlOutput("-n", ns, "logs", "deployment/redis-operator-controller-manager", "--tail=-1")
		require.NoError(c, err, logs)
		assert.Contains(c, logs, `"version":"0.2.0"`)
	}, waitFor, tick, "the operator's log names the version that runs")
	waitCSV(t, ns, pkg+".v0.2.0")

	// The scorecard passes every test, run as operator-sdk scorecard runs them: a pod each
	scorecard := runMake(t, "scorecard-run", "SCORECARD_NAMESPACE="+ns)
	assert.Equal(t, 8, strings.Count(scorecard, "State: pass"), "every scorecard test passes:\n%s", scorecard)

	// and a bundle broken on purpose fails, saying why
	broken := brokenBundle(t)
	failed := runMakeFailing(t, "scorecard-run", "SCORECARD_NAMESPACE="+ns, "BUNDLE_DIR="+broken, "SCORECARD_ARGS=--selector=suite=olm -o json")
	list := scapiv1alpha3.TestList{}
	require.NoError(t, json.Unmarshal([]byte(failed[strings.Index(failed, "{"):strings.LastIndex(failed, "}")+1]), &list), failed)
	states := map[string]scapiv1alpha3.State{}
	for _, test := range list.Items {
		for _, r := range test.Status.Results {
			states[r.Name] = r.State
			if r.Name == "olm-spec-descriptors" {
				assert.Contains(t, strings.Join(r.Errors, " "), "replicas")
			}
		}
	}
	assert.Equal(t, scapiv1alpha3.FailState, states["olm-spec-descriptors"], "the broken bundle fails olm-spec-descriptors: %v", states)

	out = runMake(t, "cleanup-bundle", nsArg)
	assert.Contains(t, sdkSaid(out), `Operator "redis-operator" uninstalled`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, csvPhase(c, ns, pkg+".v0.2.0"))
		deploys := &appsv1.DeploymentList{}
		require.NoError(c, cluster.Client.List(ctx, deploys, client.InNamespace(ns)))
		assert.Empty(c, deploys.Items, "the operator's Deployment is gone")
	}, waitFor, tick)
	// The monitoring objects go with the operator's metrics Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, monitoringObjects(c))
	}, waitFor, tick)
	// The CRD and the RedisClusters stay: nothing of the users' is lost
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sessions"}, rc))
}

// primaryPodName is the pod the primary Service sends clients to.
func primaryPodName(t require.TestingT, namespace string) string {
	pod, err := cluster.PodBehind(context.Background(), namespace, "sessions")
	require.NoError(t, err)
	return pod
}

// primaryClient connects to the primary Service's ClusterIP from the node.
func primaryClient(ctx context.Context, namespace string) (*goredis.Client, error) {
	if _, err := cluster.WaitServiceEndpoints(ctx, namespace, "sessions", 1); err != nil {
		return nil, err
	}
	addr, err := cluster.ServiceAddress(ctx, namespace, "sessions")
	if err != nil {
		return nil, err
	}
	pw, err := cluster.SecretValue(ctx, namespace, "sessions-auth", "password")
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(&goredis.Options{Addr: addr, Password: pw, MaxRetries: -1, Dialer: cluster.Dial,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second}), nil
}

// A release for disconnected clusters (features.operators.openshift.io/disconnected "true"):
// make bundle-pinned names every image of the bundle by the digest of the image built here; a
// cluster whose node pulls only from a mirror holding those images by digest (no tag) installs
// it (operator-sdk run bundle of the bundle image by digest), and a RedisCluster without
// spec.image runs the Redis image the bundle pins (RELATED_IMAGE_REDIS_7_2).
func TestADisconnectedClusterInstallsThePinnedReleaseFromItsMirror(t *testing.T) {
	ctx := context.Background()
	ns := newRunBundleNamespace(t, "offline")
	pinned := t.TempDir()

	// Given the release's images built here and its bundle pinned to their digests, which
	// OpenShift's gates pass
	runMake(t, "bundle-pinned", "PINNED_DIR="+pinned)
	problems, err := olm.BundleGateProblems(filepath.Join(pinned, "bundle"))
	require.NoError(t, err)
	assert.Empty(t, problems)
	runMake(t, "bundle-build", "BUNDLE_ROOT="+pinned)
	built := map[string]v1.Image{}
	for _, layout := range []string{"operator", "redis", "bundle"} {
		name, img, err := images.Load(filepath.Join(root, "bin", "images", layout))
		require.NoError(t, err)
		digest, err := img.Digest()
		require.NoError(t, err)
		repository, _, _ := strings.Cut(name, ":") // example.com/redis-operator:v0.2.0, docker.io/library/redis:7.2
		built[repository+"@"+digest.String()] = img
	}
	csv := pinnedCSV(t, pinned)
	manager := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
	redisImage := ""
	for _, env := range manager.Env {
		if env.Name == "RELATED_IMAGE_REDIS_7_2" {
			redisImage = env.Value
		}
	}
	require.Contains(t, built, manager.Image, "the CSV runs the operator image built here, by digest")
	require.Contains(t, built, redisImage, "the CSV's Redis image is the one built here, by digest")
	var bundleImage string
	for image := range built {
		if strings.HasPrefix(image, "example.com/redis-operator-bundle@") {
			bundleImage = image
		}
	}

	// and a node that pulls only from the mirror, which holds them by digest alone
	forgot, restore, err := cluster.PullOnlyFromMirror(ctx, built)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, restore()) })
	fmt.Printf("figure: the node forgot %d names of the release's images it had pulled before: %v\n", len(forgot), forgot)

	// When the pinned bundle image is run (the catalog operator-sdk serves names it by digest)
	started := time.Now()
	runMake(t, "bundle-push", "BUNDLE_IMG="+bundleImage)
	out := runMake(t, "run-bundle", "BUNDLE_IMG="+bundleImage, "RUN_BUNDLE_NAMESPACE="+ns)
	assert.Contains(t, sdkSaid(out), `OLM has successfully installed "redis-operator.v0.2.0"`)
	cluster.MustKubectl(t, "-n", ns, "wait", "deployment/redis-operator-controller-manager", "--for=condition=Available", "--timeout=60s")
	fmt.Printf("figure: disconnected install of the pinned bundle: operator Available in %.1fs\n", time.Since(started).Seconds())

	// and a RedisCluster that names no image is applied
	cluster.MustKubectl(t, "-n", ns, "apply", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
	require.Eventually(t, func() bool { return redisClusterReady(t, ns) }, waitFor, tick, "RedisCluster Ready in %s", ns)

	// Then the operator and every Redis pod run the images the bundle pins, which the node
	// pulled from the mirror by digest
	podImages := cluster.MustKubectl(t, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name in (redis-operator,redis)",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image}{"\n"}{end}`)
	fmt.Printf("figure: pods of the disconnected install and their images:\n%s", podImages)
	lines := strings.Split(strings.TrimSpace(podImages), "\n")
	require.Len(t, lines, 4, "the operator and three Redis pods:\n%s", podImages)
	for _, line := range lines {
		pod, image, _ := strings.Cut(line, "=")
		if strings.HasPrefix(pod, "redis-operator-controller-manager-") {
			assert.Equal(t, manager.Image, image)
		} else {
			assert.Equal(t, redisImage, image, "pod %s", pod)
		}
	}
	held, err := cluster.NodeImages(ctx)
	require.NoError(t, err)
	// (the bundle under the registry's own address, where operator-sdk run bundle names it)
	registryHost, _, err := localcluster.LocalTLSRegistry(ctx, cluster.Client)
	require.NoError(t, err)
	assert.Subset(t, held, []string{manager.Image, redisImage, registryHost + "/" + bundleImage}, "the node pulled them by digest")

	// while a pod that names the Redis image by tag cannot have it: the mirror holds no tag
	byTag := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-tag"}, Spec: corev1.PodSpec{
		SecurityContext: localcluster.RestrictedPodSecurity(),
		Containers: []corev1.Container{{Name: "redis", Image: "docker.io/library/redis:7.2", ImagePullPolicy: corev1.PullAlways,
			SecurityContext: localcluster.RestrictedContainerSecurity()}}}}
	require.NoError(t, cluster.Client.Create(ctx, byTag))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pod := &corev1.Pod{}
		require.NoError(c, cluster.Client.Get(ctx, client.ObjectKeyFromObject(byTag), pod))
		require.Len(c, pod.Status.ContainerStatuses, 1)
		waiting := pod.Status.ContainerStatuses[0].State.Waiting
		require.NotNil(c, waiting)
		assert.Contains(c, []string{"ErrImagePull", "ImagePullBackOff"}, waiting.Reason)
	}, waitFor, tick, "a pull by tag fails")
	require.NoError(t, cluster.Client.Delete(ctx, byTag))

	// The RedisCluster goes before the operator (its finalizer is the operator's), then
	// cleanup removes the operator
	cluster.MustKubectl(t, "-n", ns, "delete", "rediscluster", "sessions", "--timeout=60s")
	out = runMake(t, "cleanup-bundle", "RUN_BUNDLE_NAMESPACE="+ns)
	assert.Contains(t, sdkSaid(out), `Operator "redis-operator" uninstalled`)
}

// pinnedCSV reads the CSV of the bundle make bundle-pinned wrote under dir.
func pinnedCSV(t *testing.T, dir string) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "bundle", "manifests", pkg+".clusterserviceversion.yaml"))
	require.NoError(t, err)
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	require.NoError(t, yaml.Unmarshal(raw, csv))
	return csv
}
