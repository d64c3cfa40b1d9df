//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/testenv"
)

// A client outside the Kubernetes cluster reaches replication mode through spec.expose's
// NodePort Services: the client runs in the control plane's network namespace, outside every
// node, and dials a node's address and the node port, as an application on a VM would; the
// node's kube-proxy forwards to the pod. The primary's address follows a failover (the
// primary's Redis killed), and every write acknowledged through it before (WAIT 1) is read
// after through the same address; the replicas' address reaches a replica.
func TestAClientOutsideReachesThePrimaryThroughANodePortAcrossAFailover(t *testing.T) {
	besideOtherStories(t)
	needsLocalNode(t, "dials the nodes' own addresses")
	ctx := context.Background()
	rc := testenv.RedisCluster(ns, "outside", 3)
	rc.Spec.Failover = &cachev1.FailoverSpec{UnreachableTimeout: &metav1.Duration{Duration: unreachableTimeout}}
	rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
	require.NoError(t, cluster.Client.Create(ctx, rc))
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), rc) })
	rc = readyAgain(t, rc)
	pw, err := cluster.SecretValue(ctx, ns, "outside-auth", "password")
	require.NoError(t, err)

	// The primary's node port on a node that does not run the primary: kube-proxy takes the
	// connection there and sends it on.
	primary := rc.Status.Primary
	writer, node := outsideClient(t, "outside-ext", pw, nodeOf(t, ns, primary))
	defer writer.Close()
	reader, _ := outsideClient(t, "outside-ext-ro", pw, "")
	defer reader.Close()
	assert.Equal(t, "master", role(t, writer), "outside-ext reaches the primary")
	assert.Equal(t, "slave", role(t, reader), "outside-ext-ro reaches a replica")

	// write writes until n more keys are acknowledged by a replica (WAIT 1), within 30s; a
	// write that fails or is not acknowledged is not counted, and its key not used again.
	var acked []string
	next := 0
	write := func(n int) {
		want := len(acked) + n
		for deadline := time.Now().Add(30 * time.Second); len(acked) < want && time.Now().Before(deadline); next++ {
			key := fmt.Sprintf("outside:%d", next)
			if writer.Set(ctx, key, key, 0).Err() != nil {
				continue
			}
			if got, err := writer.Do(ctx, "WAIT", 1, 1000).Int(); err == nil && got >= 1 {
				acked = append(acked, key)
			}
		}
	}
	write(200)
	require.Len(t, acked, 200, "writes through the node port, each acknowledged by a replica")

	// When the primary's Redis is killed
	killRedis(t, primary)

	// Then the same address reaches the new primary, with every acknowledged write
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, primary, redisClusterNamed(c, "outside").Status.Primary)
		if role := roleOf(c, writer); role != "master" {
			// A connection made while the Service still selected the old pod (its Redis back
			// at once, now a replica) stays with it; an application reconnects on READONLY.
			opts := writer.Options()
			_ = writer.Close()
			writer = goredis.NewClient(opts)
			t.Cleanup(func() { _ = writer.Close() })
			assert.Equal(c, "master", role)
		}
	}, waitFor, tick, "outside-ext follows the failover")
	write(100)
	assert.Len(t, acked, 300, "writes through the same address after the failover")
	for _, key := range acked {
		got, err := writer.Get(ctx, key).Result()
		if !assert.NoError(t, err, key) || !assert.Equal(t, key, got) {
			break
		}
	}
	t.Logf("through %s (node %s): %d writes acknowledged across the failover, none lost", writer.Options().Addr, node, len(acked))
}

// outsideClient connects to service's node port at the internal address of a node other than
// skip, from outside the nodes, once that node's kube-proxy forwards it, and says which node.
// Every node should: one that does not within 30s is logged with its kube-proxy's log (a CI run
// saw node-1 refuse a node port for 30s after the suite's drains, which this run alone never
// did), and the next is tried; the test fails when none does.
func outsideClient(t *testing.T, service, password, skip string) (*goredis.Client, string) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: service}, svc))
	require.Equal(t, corev1.ServiceTypeNodePort, svc.Spec.Type)
	port := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	for _, name := range cluster.Nodes() {
		if name == skip {
			continue
		}
		n := &corev1.Node{}
		require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Name: name}, n))
		var ip string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		require.NotEmpty(t, ip, "node %s has an internal address", name)
		c := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(ip, port), Password: password, Dialer: cluster.Dial, MaxRetries: -1,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(tick) {
			if err = c.Ping(ctx).Err(); err == nil {
				return c, name
			}
		}
		_ = c.Close()
		t.Logf("%s's node port %s on %s (%s) not forwarded within 30s: %v; its kube-proxy:\n%s", service, port, name, ip, err, cluster.NodeLog(name, "kube-proxy"))
	}
	t.Fatalf("no node forwards %s's node port %s", service, port)
	return nil, ""
}

func role(t *testing.T, c *goredis.Client) string {
	t.Helper()
	var got string
	require.EventuallyWithT(t, func(col *assert.CollectT) { got = roleOf(col, c) }, 10*time.Second, tick)
	return got
}

// roleOf is the first word of ROLE from the node the client reaches.
func roleOf(col require.TestingT, c *goredis.Client) string {
	r, err := c.Do(context.Background(), "ROLE").Slice()
	require.NoError(col, err)
	require.NotEmpty(col, r)
	s, _ := r[0].(string)
	return s
}
