package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/testenv"
)

var powerOffRounds = sized(8, 1)

// BenchmarkNodePowerOff runs the local cluster on three real nodes and, round after round, powers
// off the machine of the primary of a RedisCluster of two (spec.failover.unreachableTimeout 3s, a
// pod on each of the two nodes the operator does not run on: the scenario loses a Redis machine,
// not the operator's). It reports:
//   - poweroff-writable-p50-s, -p95-s: from the power going until a client opening a new
//     connection to the primary Service's ClusterIP on every attempt gets a write accepted (the
//     operator's unreachableTimeout, its check, the promotion, the role label, kube-proxy's sync).
//
// Each round powers the machine on again and waits until the RedisCluster is Ready with both
// nodes (the old primary a replica of the new one), so the next round loses the other machine.
func BenchmarkNodePowerOff(b *testing.B) {
	// The harness's clients log nothing (controller-runtime warns, with a stack, of a logger
	// never set: CI at fbb1b84).
	log.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	require.NoError(b, err)
	for range b.N {
		ctx := context.Background()
		cluster, err := localcluster.StartOnRealNodes(ctx, root, b.TempDir(), 3)
		require.NoError(b, err)
		b.Cleanup(cluster.Stop)

		const ns = "poweroff"
		operator, err := cluster.OperatorPod(ctx)
		require.NoError(b, err)
		operatorNode := podNode(b, cluster, localcluster.OperatorNamespace, operator)
		require.NoError(b, cluster.Kubectl("create", "namespace", ns))
		rc := testenv.RedisCluster(ns, "sessions", 2)
		rc.Spec.Failover = &cachev1.FailoverSpec{UnreachableTimeout: &metav1.Duration{Duration: 3 * time.Second}}
		rc.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{operatorNode}}},
			}}},
		}}
		require.NoError(b, cluster.Client.Create(ctx, rc))
		waitReady(b, cluster, ns)

		var writable []time.Duration
		for range powerOffRounds {
			writable = append(writable, powerOffPrimary(b, cluster, ns))
		}
		slices.Sort(writable)
		b.ReportMetric(percentile(writable, 50).Seconds(), "poweroff-writable-p50-s")
		b.ReportMetric(percentile(writable, 95).Seconds(), "poweroff-writable-p95-s")
		fmt.Printf("\nthe primary's machine powered off (3 real nodes, unreachableTimeout 3s): a write accepted through the Service p50 %.2fs, p95 %.2fs, max %.2fs over %d rounds\n",
			percentile(writable, 50).Seconds(), percentile(writable, 95).Seconds(), writable[len(writable)-1].Seconds(), len(writable))
	}
}

// powerOffPrimary powers off the machine of the primary of sessions in ns and times until a
// write through the primary Service is accepted; it then powers the machine on and waits until
// the RedisCluster is Ready again.
func powerOffPrimary(b *testing.B, cluster *localcluster.Cluster, ns string) time.Duration {
	ctx := context.Background()
	password, err := cluster.SecretValue(ctx, ns, "sessions-auth", "password")
	require.NoError(b, err)
	addr, err := cluster.ServiceAddress(ctx, ns, "sessions")
	require.NoError(b, err)
	primary, err := cluster.PodBehind(ctx, ns, "sessions")
	require.NoError(b, err)
	machine := podNode(b, cluster, ns, primary)
	w := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Dialer: cluster.Dial})
	require.NoError(b, w.Set(ctx, "before", time.Now().String(), 0).Err())
	require.NoError(b, w.Do(ctx, "WAIT", 1, 2000).Err())
	w.Close()

	off := time.Now()
	require.NoError(b, cluster.PowerOff(machine))
	var took time.Duration
	for took == 0 && time.Since(off) < time.Minute {
		c := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, MaxRetries: -1, Dialer: cluster.Dial,
			DialTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
		if c.Set(ctx, "after", 1, 0).Err() == nil {
			took = time.Since(off)
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(b, cluster.PowerOn(machine))
	require.NotZero(b, took, "no write accepted through the Service a minute after %s lost power", machine)
	// Ready again with the old primary serving as a replica (not Ready from before the loss).
	require.Eventually(b, func() bool {
		rc := &cachev1.RedisCluster{}
		if cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sessions"}, rc) != nil {
			return false
		}
		for _, n := range rc.Status.Nodes {
			if n.Name == primary && n.Role == cachev1.RoleReplica && n.State == cachev1.NodeServing {
				return true
			}
		}
		return false
	}, 3*time.Minute, 100*time.Millisecond, "%s back as a replica after %s powered on", primary, machine)
	waitReady(b, cluster, ns)
	return took
}

// podNode is the node a pod runs on.
func podNode(b *testing.B, cluster *localcluster.Cluster, ns, name string) string {
	pod := &corev1.Pod{}
	require.NoError(b, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod))
	require.NotEmpty(b, pod.Spec.NodeName)
	return pod.Spec.NodeName
}
