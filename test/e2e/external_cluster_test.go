//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/partition"
	"github.com/org/redis-operator/test/testenv"
)

// A cluster client outside the Kubernetes cluster reaches cluster mode through spec.expose's
// NodePort Services: every node announces its Kubernetes node's address and its own Service's
// node ports, so that MOVED, ASK and CLUSTER SLOTS name addresses an outside client can use.
// The clients run in the control plane's network namespace, outside every node; that namespace
// routes to pod IPs too, so their dialer refuses every address but a node's, as a network outside
// would: a pod IP handed out fails the test instead of quietly working. Stories: a go-redis
// ClusterClient writes and reads 10,000 keys over every shard; redis-cli -c writes 10,000 more;
// a shard's primary hangs (its replica promoted, clients follow MOVED), then the cluster grows
// from 3 shards to 4 (slots move, clients follow ASK and MOVED), under three writers whose
// acknowledged writes (WAIT 1) are all read back; then it shrinks back to 3 (the last shard's
// slots move back, its nodes and their Services go), and rolls out a new version (every pod
// replaced, each shard's replica taking over first).
func TestAClusterClientOutsideFollowsTheAnnouncedNodePorts(t *testing.T) {
	besideOtherStories(t)
	needsLocalNode(t, "dials the nodes' own addresses")
	ctx := context.Background()
	rc := shardedCluster(t, "outshards", func(rc *cachev1.RedisCluster) {
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
	})
	pw, outside, seed := reachedFromOutside(t, rc)

	// A ClusterClient seeded with one node's outside address writes and reads 10,000 keys.
	cc := outside.clusterClient(seed, pw)
	defer cc.Close()
	keys := 10_000
	writeAndReadBack(t, cc, "outside", keys)
	var held []string
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, primary *goredis.Client) error {
		n, err := primary.DBSize(ctx).Result()
		held = append(held, fmt.Sprintf("%s: %d keys", primary.Options().Addr, n))
		if err == nil && n == 0 {
			err = fmt.Errorf("%s holds no key", primary.Options().Addr)
		}
		return err
	}))
	t.Logf("10,000 keys over every shard from outside: %s", strings.Join(held, ", "))

	// A node answers a key it does not serve with MOVED to another node's outside address.
	assert.Contains(t, outside.nodes, movedTo(t, seed, pw, outside.Dial), "MOVED names a node's address")

	// redis-cli -c from outside writes 10,000 keys, following MOVED as it goes.
	host, port, _ := net.SplitHostPort(seed)
	var script strings.Builder
	for i := range keys {
		fmt.Fprintf(&script, "SET cli:%d %d\n", i, i)
	}
	cli, err := cluster.CommandOutside(ctx, "redis-cli", "-c", "-h", host, "-p", port)
	require.NoError(t, err)
	cli.Env = append(os.Environ(), "REDISCLI_AUTH="+pw)
	cli.Stdin = strings.NewReader(script.String())
	out, err := cli.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, keys, strings.Count(string(out), "OK"), "redis-cli -c: every SET answered OK: %.500s", out)
	for i := range keys {
		got, err := cc.Get(ctx, fmt.Sprintf("cli:%d", i)).Int()
		require.NoError(t, err)
		require.Equal(t, i, got)
	}

	// Under three outside writers, shard 0's primary hangs (its Redis frozen) past the node
	// timeout: Redis Cluster promotes its replica; thawed, it rejoins as the new primary's
	// replica. Then the cluster grows to 4 shards. (A SIGKILL is a story of its own:
	// TestAShardPrimarysRedisKilledWithoutStorageLosesNoAcknowledgedWrite.)
	frozen := rc.Status.Shards[0].Primary
	report, after := shardedScenario{
		client: outside.scenarioClient(seed, pw),
		partition: func(t *testing.T, _ *partition.Net) {
			id, err := cluster.ContainerID(ctx, ns, frozen, "redis")
			require.NoError(t, err)
			require.NoError(t, cluster.FreezeContainer(ctx, id))
			thawed := false
			defer func() {
				if !thawed {
					_ = cluster.ThawContainer(context.Background(), id)
				}
			}()
			replaced(t, rc, frozen)
			require.NoError(t, cluster.ThawContainer(ctx, id))
			thawed = true
			readyAgain(t, rc)
			// A patch, as a user's kubectl sends: an update of what was read would conflict
			// with the operator's status writes meanwhile (CI run 65).
			cluster.MustKubectl(t, "-n", ns, "patch", "rediscluster/outshards", "--type=merge", "-p", `{"spec":{"cluster":{"shards":4}}}`)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got := redisClusterNamed(c, "outshards")
				assert.Len(c, got.Status.Shards, 4)
				assert.True(c, testenv.Ready(got), "Ready: %+v", got.Status.Conditions)
			}, 3*waitFor, tick, "the cluster grows to 4 shards")
			// And shrinks back to 3: the last shard's slots move to the others, then its
			// nodes and their Services go.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				shrunk := redisClusterNamed(c, "outshards")
				shrunk.Spec.Cluster.Shards = 3
				require.NoError(c, cluster.Client.Update(ctx, shrunk))
			}, waitFor, tick)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got := redisClusterNamed(c, "outshards")
				assert.Len(c, got.Status.Shards, 3)
				assert.True(c, testenv.Ready(got), "Ready: %+v", got.Status.Conditions)
				err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "outshards-shard3-0-ext"}, &corev1.Service{})
				assert.True(c, apierrors.IsNotFound(err), "the drained shard's Services go: %v", err)
			}, 3*waitFor, tick, "the cluster shrinks to 3 shards")
			// A rolling upgrade: each shard's replica replaced (a new pod, a new node ID, its
			// Service's node port announced again), its replica taking over with CLUSTER
			// FAILOVER, then the old primary's pod replaced.
			cluster.MustKubectl(t, "-n", ns, "patch", "rediscluster/outshards", "--type=merge", "-p", `{"spec":{"version":"7.0"}}`)
			whileProgressing(t, waitFor, "outshards", "every pod replaced by one of the new version", upgradeSteps(rc, 3, "redis:7.0"))
		},
	}.run(t, rc)
	assert.Empty(t, report.Lost, "acknowledged writes lost")
	assert.Positive(t, report.Acknowledged, "writes acknowledged")
	require.Len(t, after.Status.Shards, 3)
	reader := outside.clusterClient(announcedEverywhere(t, after, pw, outside), pw)
	defer reader.Close()
	for i := 0; i < keys; i += 97 {
		got, err := reader.Get(ctx, fmt.Sprintf("outside:%d", i)).Int()
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	assert.Empty(t, outside.refusedAddrs(), "dials of an address that is not a node's")
}

// A shard primary's pod lost at once with spec.expose and no storage (its Redis killed and its
// pod force-deleted, as a forced eviction or a kubelet that lost the pod would): its
// replacement keeps its Service's address. At Redis Cluster's default node timeout the new pod
// starts before the old node is marked failed, and a replica replicates an address, not a node
// ID: a new, empty node answering there would be the replica's primary again. Each new pod waits
// out the old node's failover before its Redis starts; the replica takes over with the shard's
// keys, no acknowledged write of three outside writers is lost, the 3,000 keys written before
// are all read back, and the old node is forgotten everywhere (every node announces what it
// should, and names no other).
func TestAShardPrimarysPodForceDeletedComesBackBehindItsServiceWithoutLosingAWrite(t *testing.T) {
	besideOtherStories(t)
	needsLocalNode(t, "dials the nodes' own addresses; kills a container from the machine")
	ctx := context.Background()
	rc := shardedCluster(t, "forced", func(rc *cachev1.RedisCluster) {
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
		rc.Spec.Cluster.NodeTimeout = nil // the default: longer than a new pod takes to start
	})
	pw, outside, seed := reachedFromOutside(t, rc)
	cc := outside.clusterClient(seed, pw)
	defer cc.Close()
	keys := 3000
	writeAndReadBack(t, cc, "before", keys)

	lost := rc.Status.Shards[0].Primary
	report, after := shardedScenario{
		client: outside.scenarioClient(seed, pw),
		partition: func(t *testing.T, _ *partition.Net) {
			killRedis(t, lost)
			out, err := cluster.KubectlOutput("delete", "pod", "-n", ns, lost, "--grace-period=0", "--force")
			require.NoError(t, err, out)
			replaced(t, rc, lost)
		},
	}.run(t, rc)
	assert.Empty(t, report.Lost, "acknowledged writes lost")
	assert.Positive(t, report.Acknowledged, "writes acknowledged")
	reader := outside.clusterClient(announcedEverywhere(t, after, pw, outside), pw)
	defer reader.Close()
	for i := range keys {
		got, err := reader.Get(ctx, fmt.Sprintf("before:%d", i)).Int()
		require.NoError(t, err, "before:%d", i)
		require.Equal(t, i, got)
	}
	assert.Contains(t, append(after.Status.Shards[0].Replicas, after.Status.Shards[0].Primary), lost, "its new pod joins its shard")
	assert.Empty(t, outside.refusedAddrs(), "dials of an address that is not a node's")
}

// reachedFromOutside waits until every node of rc, exposed by NodePort, announces its outside
// address everywhere; it returns rc's password, a dialer from outside the nodes, and the first
// node's outside address.
func reachedFromOutside(t *testing.T, rc *cachev1.RedisCluster) (string, *outsideDialer, string) {
	t.Helper()
	pw, err := cluster.SecretValue(context.Background(), ns, rc.Name+"-auth", "password")
	require.NoError(t, err)
	outside := &outsideDialer{nodes: nodeAddresses(t)}
	return pw, outside, announcedEverywhere(t, rc, pw, outside)
}

// writeAndReadBack writes n keys <prefix>:<i> through cc, pipelined 1000 at a time, and reads
// each back.
func writeAndReadBack(t *testing.T, cc *goredis.ClusterClient, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		_, err := cc.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := start; i < min(start+1000, n); i++ {
				p.Set(ctx, fmt.Sprintf("%s:%d", prefix, i), i, 0)
			}
			return nil
		})
		require.NoError(t, err)
	}
	for i := range n {
		got, err := cc.Get(ctx, fmt.Sprintf("%s:%d", prefix, i)).Int()
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
}

// outsideDialer dials from outside the nodes (the control plane's network namespace), and only
// the nodes' own addresses: the pods' are refused, as a network outside the cluster would.
type outsideDialer struct {
	nodes   []string
	mu      sync.Mutex
	refused []string
}

func (d *outsideDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(d.nodes, host) {
		d.mu.Lock()
		if !slices.Contains(d.refused, addr) {
			d.refused = append(d.refused, addr)
		}
		d.mu.Unlock()
		return nil, fmt.Errorf("%s is not a node's address: not reachable from outside", addr)
	}
	// go-redis bounds only its own dialer by DialTimeout: a SYN nobody answers would hold a
	// check for the kernel's minutes.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cluster.Dial(ctx, network, addr)
}

func (d *outsideDialer) refusedAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.refused)
}

func (d *outsideDialer) clusterClient(seed, password string) *goredis.ClusterClient {
	return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{seed}, Password: password, Dialer: d.Dial,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRedirects: 8})
}

// scenarioClient gives a sharded scenario's writers and reader cluster clients from outside,
// seeded with one node's outside address, each closed at the test's end.
func (d *outsideDialer) scenarioClient(seed, password string) func(*testing.T, *cachev1.RedisCluster) *goredis.ClusterClient {
	return func(t *testing.T, _ *cachev1.RedisCluster) *goredis.ClusterClient {
		c := d.clusterClient(seed, password)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// nodeAddresses are the Kubernetes nodes' internal addresses.
func nodeAddresses(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, name := range cluster.Nodes() {
		n := &corev1.Node{}
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				out = append(out, a.Address)
			}
		}
	}
	require.Len(t, out, len(cluster.Nodes()))
	return out
}

// announcedEverywhere waits until every node of rc announces its pod's Kubernetes node address
// and its Service's node ports, as every node's CLUSTER SHARDS says, read from outside; it
// returns the first node's outside address.
func announcedEverywhere(t *testing.T, rc *cachev1.RedisCluster, password string, outside *outsideDialer) string {
	t.Helper()
	return announcedAs(t, rc, password, outside.Dial, func(c *assert.CollectT, pod *corev1.Pod, svc *corev1.Service) string {
		require.Equal(c, corev1.ServiceTypeNodePort, svc.Spec.Type)
		require.NotEmpty(c, pod.Status.HostIP)
		return net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	})
}

// announcedAs waits until every node of rc announces the address addrOf gives for its pod and
// its Service, as every node's CLUSTER SHARDS says, read through dial; it returns the first.
func announcedAs(t *testing.T, rc *cachev1.RedisCluster, password string, dial func(context.Context, string, string) (net.Conn, error),
	addrOf func(*assert.CollectT, *corev1.Pod, *corev1.Service) string) string {
	t.Helper()
	ctx := context.Background()
	var want []string
	var refused error
	var refusedAddr string
	ok := assert.EventuallyWithT(t, func(c *assert.CollectT) {
		want = nil
		got := redisClusterNamed(c, rc.Name)
		for _, n := range got.Status.Nodes {
			pod := &corev1.Pod{}
			require.NoError(c, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Name}, pod))
			svc := &corev1.Service{}
			require.NoError(c, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Name + "-ext"}, svc))
			want = append(want, addrOf(c, pod, svc))
		}
		slices.Sort(want)
		for _, addr := range want {
			node := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Dialer: dial, MaxRetries: -1,
				DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
			shards, err := node.ClusterShards(ctx).Result()
			_ = node.Close()
			if err != nil {
				refused, refusedAddr = err, addr
			}
			require.NoError(c, err, addr)
			var named []string
			for _, s := range shards {
				for _, n := range s.Nodes {
					// A TLS node names only its tls-port.
					named = append(named, net.JoinHostPort(n.IP, strconv.Itoa(int(cmp.Or(n.Port, n.TLSPort)))))
				}
			}
			slices.Sort(named)
			assert.Equal(c, want, named, "the nodes %s names", addr)
		}
	}, 2*waitFor, tick, "every node announces its outside address, and every node knows the others by theirs")
	if !ok && refused != nil {
		// A CI run of the replication-mode test saw one node refuse a node port for 30s, once.
		_, port, _ := net.SplitHostPort(refusedAddr)
		for _, n := range append([]string{""}, cluster.Nodes()...) {
			t.Logf("last refusal, of %s: %v; rules with %s in %q's namespace (\"\": the control plane's):\n%s", refusedAddr, refused, port, n, cluster.NodeRules(n, port))
		}
		t.FailNow()
	}
	return want[0]
}

// movedTo is where the node at addr sends a client for a key it does not serve (MOVED).
func movedTo(t *testing.T, addr, password string, dial func(context.Context, string, string) (net.Conn, error)) string {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Dialer: dial, MaxRetries: -1})
	defer c.Close()
	for i := range 100 {
		err := c.Set(context.Background(), fmt.Sprintf("moved:%d", i), i, 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "MOVED ") {
			fields := strings.Fields(err.Error())
			host, _, splitErr := net.SplitHostPort(fields[len(fields)-1])
			require.NoError(t, splitErr)
			return host
		}
	}
	t.Fatalf("%s served 100 keys itself: no MOVED", addr)
	return ""
}

// The same with LoadBalancer Services, from MetalLB (L2 mode) on the local cluster: each node's
// Service gets an address from a pool on the nodes' network, which the node announces with
// Redis's own ports. The client is a machine of the test's own on that network, which is no node:
// it has no kube-proxy and no route to the pods, so it reaches Redis only through the addresses
// MetalLB's speakers answer ARP for. A go-redis ClusterClient writes and reads 10,000 keys, and a
// node's MOVED names a load-balancer address; in replication mode, the primary's and the
// replicas' Services' addresses reach the primary and a replica.
func TestClientsOutsideFollowTheLoadBalancerAddresses(t *testing.T) {
	besideOtherStories(t)
	needsLocalNode(t, "runs MetalLB beside the nodes, and a machine of its own on their network")
	ctx := context.Background()
	stop, err := cluster.StartMetalLB(ctx, "10.87.0.200-10.87.0.220")
	require.NoError(t, err)
	defer stop()
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range append([]string{"metallb-controller"}, speakers()...) {
				t.Logf("%s:\n%s", name, cluster.MetalLBLog(name))
			}
		}
	})
	dial, ip, remove, err := cluster.OutsideMachine()
	require.NoError(t, err)
	defer remove()
	rc := shardedCluster(t, "lbshards", func(rc *cachev1.RedisCluster) {
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer}
	})
	pw, err := cluster.SecretValue(ctx, ns, "lbshards-auth", "password")
	require.NoError(t, err)

	var pool []string
	seed := announcedAs(t, rc, pw, dial, func(c *assert.CollectT, _ *corev1.Pod, svc *corev1.Service) string {
		require.Equal(c, corev1.ServiceTypeLoadBalancer, svc.Spec.Type)
		require.NotEmpty(c, svc.Status.LoadBalancer.Ingress, "%s has no load-balancer address yet", svc.Name)
		lb := svc.Status.LoadBalancer.Ingress[0].IP
		if !slices.Contains(pool, lb) {
			pool = append(pool, lb)
		}
		return net.JoinHostPort(lb, "6379")
	})
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{seed}, Password: pw, Dialer: dial,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRedirects: 8})
	defer cc.Close()
	writeAndReadBack(t, cc, "lb", 10_000)
	moved := movedTo(t, seed, pw, dial)
	assert.Contains(t, pool, moved, "MOVED names a load-balancer address")
	t.Logf("from %s, outside: 10,000 keys through the load-balancer addresses %v", ip, pool)

	// And replication mode's two Services get addresses of their own, which reach the primary
	// and a replica from the same machine.
	rs := testenv.RedisCluster(ns, "lbprimary", 2)
	rs.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer}
	require.NoError(t, cluster.Client.Create(ctx, rs))
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), rs) })
	readyAgain(t, rs)
	rpw, err := cluster.SecretValue(ctx, ns, "lbprimary-auth", "password")
	require.NoError(t, err)
	for service, want := range map[string]string{"lbprimary-ext": "master", "lbprimary-ext-ro": "slave"} {
		var addr string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			svc := &corev1.Service{}
			require.NoError(c, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: service}, svc))
			require.NotEmpty(c, svc.Status.LoadBalancer.Ingress)
			addr = net.JoinHostPort(svc.Status.LoadBalancer.Ingress[0].IP, "6379")
		}, waitFor, tick, "%s has a load-balancer address", service)
		c := goredis.NewClient(&goredis.Options{Addr: addr, Password: rpw, Dialer: dial, MaxRetries: -1,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
		assert.Equal(t, want, role(t, c), "%s at %s", service, addr)
		_ = c.Close()
	}
}

// TLS from outside, cluster mode on node ports: the certificate holds the Kubernetes nodes'
// addresses as IP SANs (and the in-cluster names the operator checks); the nodes announce those
// addresses, and a go-redis ClusterClient outside verifies, on each connection, the address it
// dials, as a client does by default. The operator says the certificate covers each (Exposed). A
// client that verifies a name the certificate does not hold is refused: the check is real.
func TestATLSClusterClientOutsideVerifiesEachNodesAnnouncedAddress(t *testing.T) {
	besideOtherStories(t)
	needsLocalNode(t, "dials the nodes' own addresses")
	ctx := context.Background()
	nodes := nodeAddresses(t)
	ca, err := testenv.NewCA("outside-ca")
	require.NoError(t, err)
	var ips []net.IP
	for _, n := range nodes {
		ips = append(ips, net.ParseIP(n))
	}
	kp, err := ca.IssueFor([]string{"tlsout." + ns + ".svc", "*.tlsout-headless." + ns + ".svc"}, ips)
	require.NoError(t, err)
	secret := testenv.TLSSecret(ns, "tlsout-tls", kp, ca.PEM)
	require.NoError(t, cluster.Client.Create(ctx, secret))
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), secret) })
	rc := shardedCluster(t, "tlsout", func(rc *cachev1.RedisCluster) {
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
		rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "tlsout-tls"}
	})
	pw, err := cluster.SecretValue(ctx, ns, "tlsout-auth", "password")
	require.NoError(t, err)
	outside := &outsideDialer{nodes: nodes}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	// verifying dials from outside over TLS, checking the certificate against serverName, or
	// against the address dialled when it is empty (what crypto/tls and go-redis do by default).
	verifying := func(serverName string) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := outside.Dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			tc := tls.Client(conn, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: cmp.Or(serverName, host)})
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	seed := announcedAs(t, rc, pw, verifying(""), func(c *assert.CollectT, pod *corev1.Pod, svc *corev1.Service) string {
		require.Equal(c, corev1.ServiceTypeNodePort, svc.Spec.Type)
		require.NotEmpty(c, pod.Status.HostIP)
		return net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	})

	// The operator checked the certificate against each node's announced address.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		exposed := meta.FindStatusCondition(redisClusterNamed(c, rc.Name).Status.Conditions, cachev1.ConditionExposed)
		require.NotNil(c, exposed)
		assert.Equal(c, cachev1.ReasonAddressesAssigned, exposed.Reason, exposed.Message)
		assert.Contains(c, exposed.Message, "tls.crt is valid for each address")
	}, waitFor, tick)

	// A ClusterClient verifying every node it is sent to writes and reads 10,000 keys.
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{seed}, Password: pw, Dialer: verifying(""),
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRedirects: 8})
	defer cc.Close()
	writeAndReadBack(t, cc, "tls", 10_000)
	assert.Empty(t, outside.refusedAddrs(), "no pod address handed out")

	// A client that verifies a name the certificate does not hold is refused.
	wrong := goredis.NewClient(&goredis.Options{Addr: seed, Password: pw, Dialer: verifying("redis.example.com"), MaxRetries: -1})
	defer wrong.Close()
	err = wrong.Ping(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate is valid for")
	t.Logf("from outside over TLS: 10,000 keys, each node's certificate verified against the address it announces (%s)", seed)
}

func speakers() []string {
	var out []string
	for _, n := range cluster.Nodes() {
		out = append(out, "metallb-speaker-"+n)
	}
	return out
}

// upgradeSteps counts a sharded cluster's rolling upgrade to image in steps for whileProgressing:
// each pod replaced is a step, each shard handed to its new replica one (its primary a pod of the
// update revision), and Ready with every shard's revision current the last. The upgrade may take
// long while other stories run, but never stops for waitFor.
func upgradeSteps(rc *cachev1.RedisCluster, shards int, image string) func() (int, int, string) {
	ctx := context.Background()
	of := shards*2 + shards + 1
	return func() (int, int, string) {
		got := &cachev1.RedisCluster{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: rc.Name}, got); err != nil {
			return 0, of, err.Error()
		}
		steps, current, why := 0, true, []string{}
		for i := range shards {
			sts := &appsv1.StatefulSet{}
			if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ShardStatefulSetName(rc, i)}, sts); err != nil {
				return steps, of, err.Error()
			}
			// Until the StatefulSet controller has seen the new template, its status counts the
			// old one's pods as updated (CI run 64: two shards counted done at the patch, then the
			// count stood still for 90 s while they really rolled).
			if sts.Spec.Template.Spec.Containers[0].Image != image || sts.Status.ObservedGeneration < sts.Generation {
				current = false
				continue
			}
			steps += int(sts.Status.UpdatedReplicas)
			primary := ""
			if i < len(got.Status.Shards) {
				primary = got.Status.Shards[i].Primary
			}
			pod := &corev1.Pod{}
			if primary != "" && cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: primary}, pod) == nil &&
				pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
				steps++ // the shard's primary is a pod of the new version
			}
			why = append(why, fmt.Sprintf("%s: %d updated, primary %s, revision %s of %s", sts.Name,
				sts.Status.UpdatedReplicas, primary, sts.Status.CurrentRevision, sts.Status.UpdateRevision))
			current = current && sts.Status.UpdateRevision == sts.Status.CurrentRevision
		}
		if steps == of-1 && current && testenv.Ready(got) {
			steps = of
		}
		return steps, of, fmt.Sprintf("%s; conditions %+v", strings.Join(why, "; "), got.Status.Conditions)
	}
}
