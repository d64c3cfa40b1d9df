package controllers_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

// readyCluster creates the sample with its pods running and waits until it is Ready.
func readyCluster(t *testing.T) (string, *cachev1.RedisCluster, *testenv.LocalNode) {
	t.Helper()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	node := runLocalNode(t, ns)
	return ns, eventuallyReady(t, rc), node
}

// writeReplicated writes a key on a pod's Redis and waits until every replica acknowledged it.
func writeReplicated(t *testing.T, node *testenv.LocalNode, pod, password, key, value string, replicas int) {
	t.Helper()
	c := redisClient(t, node, pod, password)
	require.NoError(t, c.Set(context.Background(), key, value, 0).Err())
	n, err := c.Do(context.Background(), "WAIT", replicas, 2000).Int()
	require.NoError(t, err)
	require.Equal(t, replicas, n, "replicas that acknowledged %s", key)
}

func getRC(c require.TestingT, rc *cachev1.RedisCluster) *cachev1.RedisCluster {
	got := &cachev1.RedisCluster{}
	require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
	return got
}

// podsByRole is what the Services see: the pods labelled primary and replica.
func podsByRole(c require.TestingT, ns string) map[string][]string {
	pods := &corev1.PodList{}
	require.NoError(c, k8sClient.List(context.Background(), pods, client.InNamespace(ns)))
	out := map[string][]string{}
	for _, p := range pods.Items {
		if role := p.Labels["cache.example.com/role"]; role != "" {
			out[role] = append(out[role], p.Name)
		}
	}
	return out
}

func eventReasons(c require.TestingT, rc *cachev1.RedisCluster) []string {
	var out []string
	for _, e := range eventsFor(c, rc) {
		out = append(out, e.Reason)
	}
	return out
}

// countEvents is how many of the RedisCluster's Events have reason.
func countEvents(c require.TestingT, rc *cachev1.RedisCluster, reason string) int {
	n := 0
	for _, r := range eventReasons(c, rc) {
		if r == reason {
			n++
		}
	}
	return n
}

func TestKilledPrimaryIsReplacedAndTheServiceFollows(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	password := secretValue(t, ns, "sessions-auth", "password")
	writeReplicated(t, node, "sessions-0", password, "k", "before", 2)

	order := watchPrimaryOrder(t, rc)

	// When the primary's Redis dies (the kubelet restarts it, empty and fenced)
	node.Server("sessions-0").Kill()

	// Then a replica with the data is primary, and the primary label moved to it alone
	var primary string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := getRC(c, rc)
		primary = got.Status.Primary
		assert.NotEqual(c, "sessions-0", primary)
		assert.Equal(c, []string{primary}, podsByRole(c, ns)["primary"])
	}, waitFor, tick)
	// The status named the new primary before its pod's label sent the Service's clients to it.
	var recorded, labelled map[string]int64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recorded, labelled = order()
		assert.Contains(c, recorded, primary, "the watch has delivered the status naming it")
		assert.Contains(c, labelled, primary, "the watch has delivered its pod's label")
	}, waitFor, tick)
	assert.Less(t, recorded[primary], labelled[primary], "status.primary written (resourceVersion) before the pod was labelled primary")
	v, err := redisClient(t, node, primary, password).Get(context.Background(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "before", v)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(c, rc), cachev1.EventFailedOver)
		got := getRC(c, rc)
		failing := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionFailingOver)
		require.NotNil(c, failing)
		assert.Equal(c, cachev1.ReasonFailoverComplete, failing.Reason)
	}, waitFor, tick)

	// And the old primary rejoins as a replica: Ready again with three serving nodes
	got := eventuallyReady(t, rc)
	assert.Len(t, got.Status.Nodes, 3)
	assert.ElementsMatch(t, []string{"sessions-0", otherReplica(primary)}, podsByRole(t, ns)["replica"])
}

// metricValue reads a series from the registry the manager serves: a gauge's or a counter's
// value, a histogram's count; false when the series does not exist.
func metricValue(c require.TestingT, name string, labels map[string]string) (float64, bool) {
	families, err := metrics.Registry.Gather()
	require.NoError(c, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestMetricsFollowTheNodesThroughAFailover(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	node0 := map[string]string{"namespace": ns, "rediscluster": "sessions", "pod": "sessions-0"}
	cluster := map[string]string{"namespace": ns, "rediscluster": "sessions"}
	onPod := func(pod string) map[string]string {
		return map[string]string{"namespace": ns, "rediscluster": "sessions", "pod": pod}
	}
	// Given a ready cluster: every node up and serving, sessions-0 the primary, replicas' lag known
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, pod := range []string{"sessions-0", "sessions-1", "sessions-2"} {
			up, ok := metricValue(c, "redis_operator_node_up", onPod(pod))
			assert.True(c, ok && up == 1, "%s up", pod)
			serving, _ := metricValue(c, "redis_operator_node_serving", onPod(pod))
			assert.Equal(c, 1.0, serving, "%s serving", pod)
			_, lagKnown := metricValue(c, "redis_operator_replica_lag_bytes", onPod(pod))
			assert.Equal(c, pod != "sessions-0", lagKnown, "%s has a lag when it is a replica", pod)
			checked, _ := metricValue(c, "redis_operator_node_last_successful_check_timestamp_seconds", onPod(pod))
			assert.InDelta(c, float64(time.Now().Unix()), checked, 5)
			// and its load, read at the first check and every 10s after
			memory, _ := metricValue(c, "redis_operator_node_memory_used_bytes", onPod(pod))
			assert.Positive(c, memory, "%s memory used", pod)
			clients, _ := metricValue(c, "redis_operator_node_connected_clients", onPod(pod))
			assert.GreaterOrEqual(c, clients, 1.0, "%s clients: the operator's own at least", pod)
			_, ok = metricValue(c, "redis_operator_node_memory_max_bytes", onPod(pod))
			assert.True(c, ok, "%s maxmemory", pod)
			_, ok = metricValue(c, "redis_operator_node_evicted_keys_total", onPod(pod))
			assert.True(c, ok, "%s evicted keys", pod)
		}
		primary, _ := metricValue(c, "redis_operator_node_primary", node0)
		assert.Equal(c, 1.0, primary)
	}, waitFor, tick)
	for _, reason := range []string{cachev1.ReasonFailover, cachev1.ReasonSwitchover} {
		changes, ok := metricValue(t, "redis_operator_primary_changes_total", map[string]string{"namespace": ns, "rediscluster": "sessions", "reason": reason})
		assert.True(t, ok && changes == 0, "%s: counted from 0, so that increase() sees the first", reason)
	}
	writable, _ := metricValue(t, "redis_operator_writable_primary", cluster)
	assert.Equal(t, 1.0, writable)
	ready, _ := metricValue(t, "redis_operator_rediscluster_condition", map[string]string{"namespace": ns, "rediscluster": "sessions", "type": cachev1.ConditionReady, "reason": cachev1.ReasonAllReplicasReady})
	assert.Equal(t, 1.0, ready)
	lagSeconds, ok := metricValue(t, "redis_operator_replica_lag_seconds", onPod("sessions-1"))
	assert.True(t, ok && lagSeconds < 5, "a replica in sync acknowledged within seconds")

	// When the primary's Redis dies
	node.Server("sessions-0").Kill()

	// Then a failover is counted and timed, the primary series moves, and the time without a
	// writable primary is counted
	got := &cachev1.RedisCluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = getRC(c, rc)
		require.NotEqual(c, "sessions-0", got.Status.Primary)
		failovers, _ := metricValue(c, "redis_operator_primary_changes_total", map[string]string{"namespace": ns, "rediscluster": "sessions", "reason": cachev1.ReasonFailover})
		assert.Equal(c, 1.0, failovers)
		timed, _ := metricValue(c, "redis_operator_primary_change_duration_seconds", map[string]string{"namespace": ns, "rediscluster": "sessions", "reason": cachev1.ReasonFailover})
		assert.Equal(c, 1.0, timed)
		primary, _ := metricValue(c, "redis_operator_node_primary", onPod(got.Status.Primary))
		assert.Equal(c, 1.0, primary)
		old, _ := metricValue(c, "redis_operator_node_primary", node0)
		assert.Equal(c, 0.0, old)
		without, _ := metricValue(c, "redis_operator_no_writable_primary_seconds_total", cluster)
		assert.Greater(c, without, 0.0)
	}, waitFor, tick)

	// And when the RedisCluster is deleted, its series go
	require.NoError(t, k8sClient.Delete(context.Background(), got))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := metricValue(c, "redis_operator_node_up", node0)
		assert.False(c, ok)
		_, ok = metricValue(c, "redis_operator_node_expired_keys_total", node0)
		assert.False(c, ok)
		_, ok = metricValue(c, "redis_operator_primary_changes_total", cluster)
		assert.False(c, ok)
	}, waitFor, tick)
}

func TestAHungReplicaLeavesTheReplicasServiceAndReturnsWhenResumed(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	hung := otherReplica(rc.Status.Primary)

	// When a replica's Redis hangs (its process frozen: it neither answers nor refuses)
	require.NoError(t, node.Server(hung).Signal(syscall.SIGSTOP))
	resumed := false
	defer func() {
		if !resumed {
			_ = node.Server(hung).Signal(syscall.SIGCONT)
		}
	}()

	// Then its pod leaves the replicas Service, the RedisCluster says so, and the primary stays
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotContains(c, podsByRole(c, ns)["replica"], hung)
		got := getRC(c, rc)
		assert.Equal(c, rc.Status.Primary, got.Status.Primary)
		assert.False(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady))
	}, waitFor, tick)

	// And when it resumes, it serves again
	require.NoError(t, node.Server(hung).Signal(syscall.SIGCONT))
	resumed = true
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, podsByRole(c, ns)["replica"], hung)
	}, waitFor, tick)
	got := eventuallyReady(t, rc)
	assert.Equal(t, rc.Status.Primary, got.Status.Primary, "no failover for a hung replica")
}

func otherReplica(primary string) string {
	if primary == "sessions-1" {
		return "sessions-2"
	}
	return "sessions-1"
}

func TestScaleInMovesThePrimaryOffTheRemovedPodFirst(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	password := secretValue(t, ns, "sessions-auth", "password")
	// Given a primary on a higher ordinal, after a failover (with data written, the restarted,
	// empty sessions-0 cannot lead again)
	writeReplicated(t, node, "sessions-0", password, "k", "kept", 2)
	node.Server("sessions-0").Kill()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, "sessions-0", getRC(c, rc).Status.Primary)
	}, waitFor, tick)
	rc = eventuallyReady(t, rc)

	// When the cluster scales in to one node
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Replicas = 1
	require.NoError(t, k8sClient.Patch(context.Background(), rc, patch))

	// Then the primary switches over to sessions-0 before its pod goes, and no data is lost
	got := eventuallyReady(t, rc)
	assert.Equal(t, "sessions-0", got.Status.Primary)
	eventuallyStatefulSet(t, ns, "sessions", func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(1), ptr.Deref(sts.Spec.Replicas, 0))
	})
	v, err := redisClient(t, node, "sessions-0", password).Get(context.Background(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "kept", v)
	assert.Contains(t, eventReasons(t, rc), cachev1.EventSwitchedOver)
}

func TestVersionUpgradeReplacesReplicasFirstThenSwitchesOver(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	password := secretValue(t, ns, "sessions-auth", "password")
	writeReplicated(t, node, "sessions-0", password, "k", "kept", 2)

	// When the version changes (the local node runs this machine's redis-server for any image)
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Version = "7.0"
	require.NoError(t, k8sClient.Patch(context.Background(), rc, patch))

	// Then every pod is replaced, replicas first, the primary after a switchover
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sts := &appsv1.StatefulSet{}
		require.NoError(c, k8sClient.Get(context.Background(), key(ns, "sessions"), sts))
		assert.Equal(c, "redis:7.0", sts.Spec.Template.Spec.Containers[0].Image)
		assert.Equal(c, sts.Generation, sts.Status.ObservedGeneration)
		pods := &corev1.PodList{}
		require.NoError(c, k8sClient.List(context.Background(), pods, client.InNamespace(ns)))
		require.Len(c, pods.Items, 3)
		for _, p := range pods.Items {
			assert.Equal(c, sts.Status.UpdateRevision, p.Labels[appsv1.ControllerRevisionHashLabelKey], "pod %s", p.Name)
		}
		assert.True(c, meta.IsStatusConditionFalse(getRC(c, rc).Status.Conditions, cachev1.ConditionProgressing))
	}, 60*time.Second, tick)
	got := eventuallyReady(t, rc)

	var order []string
	for _, e := range eventsFor(t, rc) {
		if e.Reason == cachev1.EventReplacingPod || e.Reason == cachev1.EventSwitchedOver {
			order = append(order, e.Reason+" "+strings.Fields(e.Note)[0]+" "+strings.Fields(e.Note)[1])
		}
	}
	require.Len(t, order, 4, "events: %v", order)
	assert.Equal(t, []string{"ReplacingPod Replacing pod", "ReplacingPod Replacing pod", "SwitchedOver Switching the"}, order[:3])
	assert.NotEqual(t, "sessions-0", got.Status.Primary, "the old primary was replaced last, after the switchover")
	v, err := redisClient(t, node, got.Status.Primary, password).Get(context.Background(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "kept", v)
}

func TestPasswordFromTheUsersSecret(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-redis", Namespace: ns}, Data: map[string][]byte{"pw": []byte("user's own password")}}
	require.NoError(t, k8sClient.Create(context.Background(), secret))
	rc := testenv.RedisCluster(ns, "sessions", 2)
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "my-redis", Key: "pw"}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	node := runLocalNode(t, ns)

	eventuallyReady(t, rc)

	assert.NoError(t, redisClient(t, node, "sessions-0", "user's own password").Ping(context.Background()).Err())
	err := k8sClient.Get(context.Background(), key(ns, "sessions-auth"), &corev1.Secret{})
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "no password is generated when the user gives one")
}

func TestMissingPasswordSecretIsExplained(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := testenv.RedisCluster(ns, "sessions", 3)
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "absent"}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := getRC(c, rc)
		degraded := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, cachev1.ReasonSecretNotFound, degraded.Reason)
		assert.Contains(c, degraded.Message, `absent`)
		assert.Contains(c, eventReasons(c, rc), cachev1.EventSecretNotFound)
	}, waitFor, tick)
	// Nothing runs without its password.
	err := k8sClient.Get(context.Background(), key(ns, "sessions"), &appsv1.StatefulSet{})
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "no StatefulSet without a password")
}

// Secrets are not watched: a password Secret created after its RedisCluster is found at the next
// retry, and the retries' back-off is capped (a minute by default; controller-runtime's own cap
// is 16 minutes), so that it is found soon even after the RedisCluster waited long.
func TestAPasswordSecretCreatedLateIsFoundAtTheCappedRetry(t *testing.T) {
	t.Parallel()
	const maxRetryDelay = 200 * time.Millisecond
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.MaxRetryDelay = maxRetryDelay })
	rc := testenv.RedisCluster(ns, "sessions", 1)
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "late"}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))

	// Given a RedisCluster whose Secret has been missing for 12s: uncapped, the back-off
	// would by now be several seconds long
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		degraded := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, cachev1.ReasonSecretNotFound, degraded.Reason)
	}, waitFor, tick)
	time.Sleep(12 * time.Second)

	// When the Secret is created
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: ns}, Data: map[string][]byte{"password": []byte("late-password-51c2")}}
	require.NoError(t, k8sClient.Create(context.Background(), secret))

	// Then the next retry, at most the cap away, finds it and creates the StatefulSet
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8sClient.Get(context.Background(), key(ns, "sessions"), &appsv1.StatefulSet{}))
	}, 10*maxRetryDelay, tick, "the StatefulSet within the capped retry delay")
}

// podUIDs are the UIDs of the namespace's pods by name: a pod replaced has another.
func podUIDs(t *testing.T, namespace string) map[string]string {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, k8sClient.List(context.Background(), pods, client.InNamespace(namespace)))
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = string(p.UID)
	}
	return out
}

func TestPasswordChangeReachesRunningNodesAndAWrongOneIsExplained(t *testing.T) {
	t.Parallel()
	const first, second, third = "first-password-1f8d", "second-password-93ac", "third-password-5e0b"
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.SecretResync = 500 * time.Millisecond })
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-redis", Namespace: ns}, Data: map[string][]byte{"password": []byte(first)}}
	require.NoError(t, k8sClient.Create(context.Background(), secret))
	rc := testenv.RedisCluster(ns, "sessions", 2)
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "my-redis"}, PreviousPasswordValidFor: &metav1.Duration{Duration: 4 * time.Second}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	node := runLocalNode(t, ns)
	eventuallyReady(t, rc)
	before := podUIDs(t, ns)
	readyDropped := watchReady(t, rc)

	// When the Secret changes under running nodes
	secret.Data["password"] = []byte(second)
	require.NoError(t, k8sClient.Update(context.Background(), secret))

	// Then every node takes the new password, live (no pod is replaced), and the old one still
	// works beside it, so that clients can move to the new one without an error
	changed := time.Now()
	for _, pod := range []string{"sessions-0", "sessions-1"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, redisClient(t, node, pod, second).Ping(context.Background()).Err())
		}, waitFor, tick, pod)
		assert.NoError(t, redisClient(t, node, pod, first).Ping(context.Background()).Err(), "the old password still works on %s", pod)
	}
	require.Less(t, time.Since(changed), 4*time.Second, "checked within the old password's time")
	previousKept := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-auth-previous"), previousKept), "the rotation's state is in the API")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// Events are sent in the background: the rotation can be done before its Event is stored.
		assert.Contains(c, eventReasons(c, rc), cachev1.EventPasswordChanged)
	}, waitFor, tick)

	// And when its time is up, the old password is removed from every node, and its Secret
	for _, pod := range []string{"sessions-0", "sessions-1"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Error(c, redisClient(t, node, pod, first).Ping(context.Background()).Err())
		}, waitFor, tick, "the old password no longer works on %s", pod)
	}
	assert.GreaterOrEqual(t, time.Since(changed), 4*time.Second, "not before its time")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(context.Background(), key(ns, "sessions-auth-previous"), &corev1.Secret{})
		assert.True(c, apierrors.IsNotFound(err), "sessions-auth-previous is deleted")
		assert.Contains(c, eventReasons(c, rc), cachev1.EventPreviousPasswordRemoved)
	}, waitFor, tick)
	eventuallyReady(t, rc)
	assert.Equal(t, before, podUIDs(t, ns))
	// and the RedisCluster was Ready all along: the password file's Secret was written twice,
	// and no pod changed (found by the fault suite: each write dropped Ready for one reconcile)
	assert.Empty(t, readyDropped(), "Ready through the whole rotation")

	// When a node's password is changed behind the operator's back, which logs in as its own
	// user, the Secret's is given back at the next read of the Secrets
	require.NoError(t, redisClient(t, node, "sessions-1", second).ConfigSet(context.Background(), "requirepass", third).Err())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, redisClient(t, node, "sessions-1", second).Ping(context.Background()).Err())
	}, waitFor, tick, "the Secret's password works again on sessions-1")

	// When the operator's own user is deleted there too, at once (a transaction): nothing it
	// knows logs in
	_, err := redisClient(t, node, "sessions-1", second).TxPipelined(context.Background(), func(p goredis.Pipeliner) error {
		// requirepass to a new value: Redis ignores a CONFIG SET to the value it has
		p.ConfigSet(context.Background(), "requirepass", third+"-again")
		p.Do(context.Background(), "ACL", "DELUSER", "redis-operator")
		return nil
	})
	require.NoError(t, err)

	// Then the status and an Event say Redis refuses the password, and name the Secret
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		degraded := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, cachev1.ReasonAuthenticationFailed, degraded.Reason)
		assert.Contains(c, degraded.Message, "my-redis")
		assert.Contains(c, eventReasons(c, rc), cachev1.EventAuthenticationFailed)
	}, waitFor, tick)

	// and no password is in a log line, an Event or the status
	got := getRC(t, rc)
	for _, pw := range []string{first, second, third, third + "-again"} {
		assert.NotContains(t, operatorLogs.String(), pw)
		for _, e := range eventsFor(t, rc) {
			assert.NotContains(t, e.Note, pw)
		}
		for _, c := range got.Status.Conditions {
			assert.NotContains(t, c.Message, pw)
		}
	}
}

// stoppedPasswordCluster is a Ready two-node RedisCluster whose password is in the user's
// Secret my-redis, with no operator running any more.
func stoppedPasswordCluster(t *testing.T, password string) (string, *cachev1.RedisCluster, *testenv.LocalNode) {
	t.Helper()
	ns := newNamespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-redis", Namespace: ns}, Data: map[string][]byte{"password": []byte(password)}}
	require.NoError(t, k8sClient.Create(context.Background(), secret))
	rc := testenv.RedisCluster(ns, "sessions", 2)
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "my-redis"}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	node := runLocalNode(t, ns)
	operator := startOperator(t, adminCfg, ns)
	eventuallyReady(t, rc)
	operator.stop()
	return ns, rc, node
}

// changeUsersPassword writes a new password into the user's Secret my-redis.
func changeUsersPassword(t *testing.T, ns, password string) {
	t.Helper()
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "my-redis"), secret))
	secret.Data["password"] = []byte(password)
	require.NoError(t, k8sClient.Update(context.Background(), secret))
}

// eventuallyEveryNodeTakes waits until both nodes take the password, and the RedisCluster is Ready.
func eventuallyEveryNodeTakes(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, password string) {
	t.Helper()
	for _, pod := range []string{"sessions-0", "sessions-1"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, redisClient(t, node, pod, password).Ping(context.Background()).Err())
		}, waitFor, tick, pod)
	}
	eventuallyReady(t, rc)
}

// Found by the fault suite (crash at every write, password change): an operator that starts
// after the password Secret changed, or restarts after writing the new password file but before
// giving the nodes the new password, knew no password the running nodes take, and left the
// RedisCluster AuthenticationFailed for good. The old password is now kept in a Secret before
// the file changes.
func TestAPasswordChangedWhileTheOperatorWasAwayReachesTheNodes(t *testing.T) {
	t.Parallel()
	const first, second = "first-password-28c4", "second-password-b61f"
	ns, rc, node := stoppedPasswordCluster(t, first)

	// Given an operator that wrote the new password file, and stopped before the nodes had the
	// new password (played by a stopped operator, the Secret changed, and the file written)
	changeUsersPassword(t, ns, second)
	previous := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sessions-auth-previous", Namespace: ns}, Data: map[string][]byte{"password": []byte(first)}}
	require.NoError(t, k8sClient.Create(context.Background(), previous))
	conf := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-auth-conf"), conf))
	conf.Data["auth.conf"] = []byte(resources.AuthConf(second))
	require.NoError(t, k8sClient.Update(context.Background(), conf))

	// When a new operator process starts
	startOperator(t, adminCfg, ns)

	// Then every node takes the new password, and the RedisCluster is Ready
	eventuallyEveryNodeTakes(t, node, rc, second)
}

// The same, when the operator was away as the Secret changed: it keeps the old password itself
// before writing the new file.
func TestAPasswordChangedWhileNoOperatorRanReachesTheNodes(t *testing.T) {
	t.Parallel()
	const first, second = "first-password-4a0e", "second-password-7d93"
	ns, rc, node := stoppedPasswordCluster(t, first)

	// When the Secret changes with no operator running, and one starts
	changeUsersPassword(t, ns, second)
	startOperator(t, adminCfg, ns)

	// Then every node takes the new password, and the old one is kept where a restart finds it
	eventuallyEveryNodeTakes(t, node, rc, second)
	assert.Equal(t, first, secretValue(t, ns, "sessions-auth-previous", "password"))
}

func TestABrokenConnectionToANodeChecksItAtOnce(t *testing.T) {
	t.Parallel()
	// Given a ready cluster, and then an operator whose periodic check would not come for an hour
	ns := newNamespace(t)
	first := startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	node := runLocalNode(t, ns)
	rc = eventuallyReady(t, rc)
	first.stop()
	password := secretValue(t, ns, "sessions-auth", "password")
	replica := otherReplica(rc.Status.Primary)
	before, err := redisClient(t, node, replica, password).ClientID(context.Background()).Result()
	require.NoError(t, err)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.CheckInterval = time.Hour })
	heldConnectionsChecked(t, node, replica, password, before)

	// and a replica made a primary behind the operator's back, which no check sees yet
	c := redisClient(t, node, replica, password)
	require.NoError(t, c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err())
	time.Sleep(time.Second)
	role, err := c.Do(context.Background(), "ROLE").Slice()
	require.NoError(t, err)
	require.Equal(t, "master", role[0], "nothing checked the node in the meantime")

	// When the operator's held connections to that node break (as when its redis-server dies)
	require.NoError(t, c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err())
	require.NoError(t, c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err())

	// Then the operator checks it at once, and makes it a replica of the primary again
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		role, err := redisClient(t, node, replica, password).Do(context.Background(), "ROLE").Slice()
		require.NoError(c, err)
		assert.Equal(c, "slave", role[0])
	}, 10*time.Second, tick)
}

// heldConnectionsChecked waits until an operator started after the client ID since has opened its
// held connections to pod (the connections it names redis.ClientName: its subscribed watch,
// and its command connection) and checked the node through the command connection (its last
// command not one of the CLIENT commands a connection starts with): its first reconcile has read
// the node.
func heldConnectionsChecked(t *testing.T, node *testenv.LocalNode, pod, password string, since int64) {
	t.Helper()
	test := redisClient(t, node, pod, password)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := test.ClientList(context.Background()).Result()
		require.NoError(c, err)
		watched, checked := false, false
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			fields := map[string]string{} // id=7 addr=... name=redis-operator ... flags=P ... cmd=subscribe
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				fields[k] = v
			}
			if id, err := strconv.ParseInt(fields["id"], 10, 64); err != nil || id <= since || fields["name"] != redis.ClientName {
				continue
			}
			if strings.Contains(fields["flags"], "P") {
				watched = true
			} else if !strings.HasPrefix(fields["cmd"], "client|") {
				checked = true
			}
		}
		assert.True(c, watched, "a subscribed connection: %s", list)
		assert.True(c, checked, "a connection that checked the node: %s", list)
	}, waitFor, tick)
}

func TestAChildChangedUnderARunningClusterIsPutBack(t *testing.T) {
	t.Parallel()
	// Given a ready cluster, whose health check no longer compares children that did not change
	ns, _, _ := readyCluster(t)
	time.Sleep(2 * time.Second)

	// When someone edits a field the operator owns on a Service, and deletes the ConfigMap
	svc := &corev1.Service{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-replicas"), svc))
	svc.Spec.Selector[resources.LabelRole] = resources.RolePrimary
	require.NoError(t, k8sClient.Update(context.Background(), svc, client.FieldOwner("kubectl-edit")))
	require.NoError(t, k8sClient.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sessions-config"}}))

	// Then both are put back
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc := &corev1.Service{}
		require.NoError(c, k8sClient.Get(context.Background(), key(ns, "sessions-replicas"), svc))
		assert.Equal(c, resources.RoleReplica, svc.Spec.Selector[resources.LabelRole])
		require.NoError(c, k8sClient.Get(context.Background(), key(ns, "sessions-config"), &corev1.ConfigMap{}))
	}, waitFor, tick)
}

func TestDeletingEveryPodOfAPersistentClusterKeepsEveryAcknowledgedWrite(t *testing.T) {
	t.Parallel()
	// Given a RedisCluster with storage (the append-only file on), and writes a replica acknowledged
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := testenv.RedisCluster(ns, "sessions", 3)
	rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	node := runLocalNode(t, ns)
	rc = eventuallyReady(t, rc)
	password := secretValue(t, ns, "sessions-auth", "password")
	primary := redisClient(t, node, rc.Status.Primary, password)
	var acked []string
	for i := range 100 {
		k := fmt.Sprintf("k-%d", i)
		require.NoError(t, primary.Set(context.Background(), k, i, 0).Err())
		if n, err := primary.Do(context.Background(), "WAIT", 1, 1000).Int(); err == nil && n >= 1 {
			acked = append(acked, k)
		}
	}
	require.NotEmpty(t, acked)
	ips := map[string]string{}
	for _, n := range rc.Status.Nodes {
		ips[n.Name] = node.Server(n.Name).IP
		aofWritten(t, node, n.Name, password)
	}

	// When every pod is deleted at once (new pods, new addresses, the same volumes; the local
	// node kills their processes, once each has written what it acknowledged: aofWritten)
	require.NoError(t, k8sClient.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns)))

	// Then the cluster forms again on its new pods, and every acknowledged write is there
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, ip := range ips {
			s := node.Server(name)
			require.NotNil(c, s)
			assert.NotEqual(c, ip, s.IP, "%s has a new address", name)
		}
	}, waitFor, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rc = getRC(c, rc)
		assert.True(c, meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionReady))
		role, err := redisClient(t, node, rc.Status.Primary, password).Do(context.Background(), "ROLE").Slice()
		require.NoError(c, err)
		assert.Equal(c, "master", role[0], "the primary in the status is a primary on its new pod")
	}, waitFor, tick)
	after := redisClient(t, node, rc.Status.Primary, password)
	for _, k := range acked {
		require.NoError(t, after.Get(context.Background(), k).Err(), "%s on %s", k, rc.Status.Primary)
	}
	// And nothing is said lost: the nodes came back with their data
	assert.Nil(t, meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDataLost))
	assert.Zero(t, countEvents(t, rc, cachev1.EventDataLost))
}

// TestDeletingEveryPodOfAClusterWithoutStorageIsReportedAsDataLost: without spec.storage every
// node's data lives in its pod; with every pod gone at once, nothing can keep it, and the
// operator makes one of the empty new nodes primary for the cluster to serve. It must say so:
// a Warning Event, the DataLost condition, the metric, and the reason (no spec.storage).
func TestDeletingEveryPodOfAClusterWithoutStorageIsReportedAsDataLost(t *testing.T) {
	t.Parallel()
	ns, rc, node := readyCluster(t)
	password := secretValue(t, ns, "sessions-auth", "password")
	writeReplicated(t, node, rc.Status.Primary, password, "k", "before", 2)
	lostBefore, _ := metricValue(t, "redis_operator_data_lost_total", map[string]string{"namespace": ns, "rediscluster": "sessions"})

	// When every pod is deleted at once
	require.NoError(t, k8sClient.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns)))

	// Then the cluster serves again, empty, and says that the data is lost, and why
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rc = getRC(c, rc)
		assert.True(c, meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionReady))
		lost := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDataLost)
		require.NotNil(c, lost)
		assert.Equal(c, metav1.ConditionTrue, lost.Status)
		assert.Equal(c, cachev1.ReasonNodesRestartedWithoutData, lost.Reason)
		assert.Contains(c, lost.Message, "was made primary holding no data")
		assert.Contains(c, lost.Message, "Without spec.storage a node keeps nothing across a restart")
	}, waitFor, tick)
	assert.Equal(t, 1, countEvents(t, rc, cachev1.EventDataLost))
	lostAfter, ok := metricValue(t, "redis_operator_data_lost_total", map[string]string{"namespace": ns, "rediscluster": "sessions"})
	require.True(t, ok)
	assert.Equal(t, lostBefore+1, lostAfter)
	assert.Equal(t, int64(0), redisClient(t, node, rc.Status.Primary, password).Exists(context.Background(), "k").Val(),
		"the key is gone: what is reported is true")
}

func TestASpecTheAPIServerRefusesDoesNotStopFailover(t *testing.T) {
	t.Parallel()
	// Given a ready cluster whose spec then asks, again and again, for a pod the API server
	// refuses (a toleration with a value but no key must use the operator Exists): the CRD
	// takes each one, the StatefulSet does not, and every reconcile fails. Ten failures on top
	// of the retries' own put the back-off of the failed reconciles at its one-minute cap.
	ns, rc, node := readyCluster(t)
	old := rc.Status.Primary
	for i := range 10 {
		patch := client.MergeFrom(rc.DeepCopy())
		rc.Spec.Tolerations = []corev1.Toleration{{Value: fmt.Sprintf("refused-%d", i)}}
		rc.Spec.Failover = &cachev1.FailoverSpec{UnreachableTimeout: &metav1.Duration{Duration: time.Second}}
		require.NoError(t, k8sClient.Patch(context.Background(), rc, patch))
		time.Sleep(100 * time.Millisecond)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		degraded := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, cachev1.ReasonApplyFailed, degraded.Reason)
		assert.Contains(c, degraded.Message, "tolerations")
	}, waitFor, tick)

	// When the primary's Redis hangs: its connections stay open, so nothing wakes the operator
	// but its health check
	require.NoError(t, node.Server(old).Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = node.Server(old).Signal(syscall.SIGCONT) })

	// Then a replica still replaces it after unreachableTimeout (1s), at the health check's
	// period and not at the refused spec's next retry, and the pods' labels follow, while the
	// spec stays refused
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := getRC(c, rc)
		assert.NotEqual(c, old, got.Status.Primary)
		assert.Equal(c, []string{got.Status.Primary}, podsByRole(c, ns)["primary"])
		degraded := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, cachev1.ReasonApplyFailed, degraded.Reason)
	}, waitFor, tick)
}

// TestNodesStartedWithoutALiveSettingGetItFromTheNextOperator: a node whose primary pings it
// every 10s (Redis's default, as under an earlier build) gets the ping period the witness rule
// needs from the next operator process, live: no pod is replaced, none restarts.
func TestNodesStartedWithoutALiveSettingGetItFromTheNextOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	node := runLocalNode(t, ns)
	rc = eventuallyReady(t, rc)
	password := secretValue(t, ns, "sessions-auth", "password")
	runID := func(name string) string {
		info := redisClient(t, node, name, password).Info(ctx, "server").Val()
		_, rest, _ := strings.Cut(info, "run_id:")
		id, _, _ := strings.Cut(rest, "\r\n")
		return id
	}
	runs := map[string]string{}
	for _, n := range rc.Status.Nodes {
		c := redisClient(t, node, n.Name, password)
		require.Equal(t, "1", c.ConfigGet(ctx, "repl-ping-replica-period").Val()["repl-ping-replica-period"], "%s starts with it", n.Name)
		require.NoError(t, c.ConfigSet(ctx, "repl-ping-replica-period", "10").Err())
		runs[n.Name] = runID(n.Name)
	}

	// When the next operator process starts
	op.stop()
	startOperator(t, adminCfg, ns)

	// Then every node pings its replicas every second again, on the same process
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name := range runs {
			got := redisClient(t, node, name, password).ConfigGet(ctx, "repl-ping-replica-period").Val()
			assert.Equal(c, "1", got["repl-ping-replica-period"], name)
		}
	}, waitFor, tick)
	for name, id := range runs {
		assert.Equal(t, id, runID(name), "%s's Redis is the same process", name)
	}
}
