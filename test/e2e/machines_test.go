//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/localcluster"
)

// The e2e cluster's three real nodes, each in a zone of its own, and what happens to machines,
// done to them, before any RedisCluster relies on it: a Redis pod on each node reaches the
// others at their pods' addresses; a node powered off takes its pod with it (nothing reaches
// it, the node goes NotReady) and, powered on, comes back Ready with its pod running again; a
// frozen node's pod accepts connections and answers nothing until it thaws; a cut node's pod is
// out of reach until it joins again. (The suite checks, once the cluster stops, that the
// machine is as it found it.)
func TestMachinesLoseAndRegainPowerFreezeAndAreCut(t *testing.T) {
	needsNodes(t, 3)
	ctx := context.Background()
	require.Equal(t, []string{"node-1", "node-2", "node-3"}, cluster.Nodes())
	for i, name := range cluster.Nodes() {
		n := &corev1.Node{}
		require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Name: name}, n))
		assert.Equal(t, fmt.Sprintf("zone-%d", i+1), n.Labels[localcluster.ZoneLabel], name)
		assert.Equal(t, name, n.Labels[corev1.LabelHostname])
	}

	ns := "machines"
	require.NoError(t, cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	t.Cleanup(func() {
		_ = cluster.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	ips := map[string]string{}
	for _, name := range cluster.Nodes() {
		require.NoError(t, cluster.Client.Create(ctx, redisPodOn(ns, name)))
	}
	for _, name := range cluster.Nodes() {
		ips[name] = waitPodRunning(t, ns, "redis-"+name, time.Time{})
		assert.True(t, strings.HasPrefix(ips[name], "10.244."+strings.TrimPrefix(name, "node-")+"."), "%s's pod in its CIDR: %s", name, ips[name])
	}
	// Pods reach pods on other nodes, by their own addresses (redis-cli in the pod, through
	// kubectl exec and the node's kubelet).
	for from, to := range map[string]string{"node-1": "node-2", "node-2": "node-3", "node-3": "node-1"} {
		out := cluster.MustKubectl(t, "-n", ns, "exec", "redis-"+from, "--", "redis-cli", "-h", ips[to], "ping")
		assert.Equal(t, "PONG", strings.TrimSpace(out), "%s's pod reaches %s's", from, to)
	}

	// Power off node-2: its pod is unreachable at once, the node NotReady once its lease lapses.
	require.NoError(t, cluster.PowerOff("node-2"))
	assert.Error(t, ping(ctx, ips["node-2"], time.Second), "node-2's pod after its node lost power")
	assert.NoError(t, ping(ctx, ips["node-1"], time.Second), "node-1's pod is not touched")
	off := time.Now()
	waitNodeReady(t, "node-2", false, 90*time.Second)
	t.Logf("node-2 NotReady %.1fs after it lost power", time.Since(off).Seconds())
	// Powered on, it comes back with what it kept on disk: the kubelet starts its pod again.
	require.NoError(t, cluster.PowerOn("node-2"))
	on := time.Now()
	waitNodeReady(t, "node-2", true, 90*time.Second)
	// The pod's status says Running at its old address until the kubelet, back, reports the
	// container it started again (in a new sandbox, at an address of its own).
	ips["node-2"] = waitPodRunning(t, ns, "redis-node-2", on)
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		assert.NoError(co, ping(ctx, ips["node-2"], time.Second))
	}, 60*time.Second, 250*time.Millisecond)
	t.Logf("node-2's pod answers %.1fs after power on", time.Since(on).Seconds())

	// Freeze node-3: its pod's connections open (the kernel answers) and nothing comes back.
	require.NoError(t, cluster.FreezeNode("node-3"))
	assert.Error(t, ping(ctx, ips["node-3"], time.Second), "a frozen node's pod answers nothing")
	require.NoError(t, cluster.ThawNode("node-3"))
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		assert.NoError(co, ping(ctx, ips["node-3"], time.Second))
	}, 30*time.Second, 250*time.Millisecond, "node-3's pod answers once thawed")

	// Cut node-1: out of reach of the control plane's network and of the other nodes' pods.
	require.NoError(t, cluster.CutNode("node-1"))
	assert.Error(t, ping(ctx, ips["node-1"], time.Second), "a cut node's pod is out of reach")
	out, err := cluster.KubectlOutput("-n", ns, "exec", "redis-node-3", "--", "redis-cli", "-h", ips["node-1"], "-t", "1", "ping")
	assert.False(t, err == nil && strings.TrimSpace(out) == "PONG", "node-3's pod does not reach node-1's: %s", out)
	require.NoError(t, cluster.JoinNode("node-1"))
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		assert.NoError(co, ping(ctx, ips["node-1"], time.Second))
	}, 30*time.Second, 250*time.Millisecond, "node-1's pod answers once joined")

}

// redisPodOn is a Redis pod bound to the node name (its hostname label), as a test's workload.
func redisPodOn(ns, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis-" + nodeName},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: nodeName},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](images.RedisUID), FSGroup: ptr.To[int64](images.RedisUID)},
			Containers: []corev1.Container{{
				Name: "redis", Image: "docker.io/library/redis:7.2",
				Command:   []string{"redis-server", "--port", "6379", "--save", "", "--protected-mode", "no"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
			}},
		},
	}
}

// waitPodRunning waits until the pod's container runs, started after since, and returns the
// pod's address.
func waitPodRunning(t *testing.T, ns, name string, since time.Time) string {
	t.Helper()
	var ip string
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		p := &corev1.Pod{}
		require.NoError(co, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p))
		running := false
		for _, s := range p.Status.ContainerStatuses {
			running = running || (s.State.Running != nil && !s.State.Running.StartedAt.Time.Before(since.Truncate(time.Second)))
		}
		assert.True(co, running, "%s running since %s: %+v", name, since, p.Status.ContainerStatuses)
		assert.NotEmpty(co, p.Status.PodIP)
		ip = p.Status.PodIP
	}, 120*time.Second, 250*time.Millisecond)
	return ip
}

// waitNodeReady waits until the node's Ready condition is ready.
func waitNodeReady(t *testing.T, name string, ready bool, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(co, cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
		got := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				got = cond.Status == corev1.ConditionTrue
			}
		}
		assert.Equal(co, ready, got, "%s Ready", name)
	}, within, 250*time.Millisecond)
}

// ping sends PING to the Redis at ip from the control plane's network, within timeout; the
// error when it gets no PONG.
func ping(ctx context.Context, ip string, timeout time.Duration) error {
	rdb := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(ip, "6379"), MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, Dialer: cluster.Dial})
	defer rdb.Close()
	return rdb.Ping(ctx).Err()
}
