//go:build e2e

// Network partitions of a RedisCluster on the local cluster's real node (pods in network
// namespaces of their own, the operator as its Deployment) while clients write, checking what
// they were told against what the cluster holds once healed (test/history). The cuts are packet
// filters inside the pods' namespaces (test/partition), removed at each test's end. They share the
// e2e suite's cluster (one start); `make test-partitions` runs them alone (root).

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/history"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/partition"
	"github.com/org/redis-operator/test/testenv"
)

// unreachableTimeout is the partition scenarios' spec.failover.unreachableTimeout.
const unreachableTimeout = 3 * time.Second

// readyCluster creates a RedisCluster of 3 nodes, with minReplicasToWrite when not nil, and
// waits until it is Ready. It stays until the local cluster stops: the scenarios of a setting
// share one (sharedCluster), each leaving it Ready.
func readyCluster(t *testing.T, name string, minReplicasToWrite *int32) *cachev1.RedisCluster {
	t.Helper()
	rc := testenv.RedisCluster(ns, name, 3)
	rc.Spec.Failover = &cachev1.FailoverSpec{UnreachableTimeout: &metav1.Duration{Duration: unreachableTimeout},
		MinReplicasToWrite: minReplicasToWrite}
	require.NoError(t, cluster.Client.Create(context.Background(), rc))
	return readyAgain(t, rc)
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*cachev1.RedisCluster{}
)

// sharedCluster is the RedisCluster of a setting, made by the first scenario that asks, and Ready
// as the last one left it.
func sharedCluster(t *testing.T, setting int) *cachev1.RedisCluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	name := fmt.Sprintf("setting-%d", setting)
	if rc, ok := shared[name]; ok {
		return readyAgain(t, rc)
	}
	rc := readyCluster(t, name, settings[setting].minReplicasToWrite)
	shared[name] = rc
	return rc
}

// readyAgain waits until rc is Ready (in replication mode with every node in the status), and
// returns it.
func readyAgain(t *testing.T, rc *cachev1.RedisCluster) *cachev1.RedisCluster {
	t.Helper()
	got := &cachev1.RedisCluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
		assert.True(c, testenv.Ready(got), "Ready: %+v", got.Status.Conditions)
		if got.Spec.Cluster == nil {
			assert.Len(c, got.Status.Nodes, int(got.Spec.Replicas))
		}
	}, waitFor, tick)
	return got
}

// pods are a RedisCluster's pods as the partition sees them, by name.
func pods(t *testing.T, rc *cachev1.RedisCluster) map[string]partition.Member {
	t.Helper()
	out := map[string]partition.Member{}
	for _, n := range rc.Status.Nodes {
		out[n.Name] = member(t, ns, n.Name, "redis")
	}
	return out
}

// member is a pod's container as one end of a cut.
func member(t *testing.T, namespace, pod, container string) partition.Member {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, p))
	netns, err := cluster.PodNetns(ctx, namespace, pod, container)
	require.NoError(t, err)
	return partition.Member{Name: pod, Netns: netns, IP: p.Status.PodIP}
}

// operatorMember is the operator's pod as one end of a cut.
func operatorMember(t *testing.T) partition.Member {
	t.Helper()
	pod, err := cluster.OperatorPod(context.Background())
	require.NoError(t, err)
	return member(t, localcluster.OperatorNamespace, pod, "manager")
}

// redisClient is a history.Client through the RedisCluster's primary Service, as an
// application's: a write is acknowledged once a replica has it too (WAIT 1), and the node that
// answered is named by the address the connection reached (CLIENT INFO's laddr: the Service's
// rewrite is undone by then).
type redisClient struct {
	c *goredis.Client
	// pods names the pods by IP.
	pods map[string]string
}

func (r redisClient) Write(ctx context.Context, key, value string) (string, error) {
	var wait, info *goredis.Cmd
	_, err := r.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, key, value, 0)
		wait = p.Do(ctx, "WAIT", 1, 500)
		info = p.Do(ctx, "CLIENT", "INFO")
		return nil
	})
	node := r.nodeOf(info)
	if err != nil {
		return node, err
	}
	if n, _ := wait.Int(); n < 1 {
		return node, errors.New("no replica acknowledged the write")
	}
	return node, nil
}

func (r redisClient) Read(ctx context.Context, key string) (string, bool, string, error) {
	var get *goredis.StringCmd
	var info *goredis.Cmd
	_, err := r.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		get = p.Get(ctx, key)
		info = p.Do(ctx, "CLIENT", "INFO")
		return nil
	})
	if errors.Is(err, goredis.Nil) {
		return "", false, r.nodeOf(info), nil
	}
	return get.Val(), err == nil, r.nodeOf(info), err
}

func (r redisClient) nodeOf(info *goredis.Cmd) string {
	if info == nil {
		return ""
	}
	text, _ := info.Text()
	for _, field := range strings.Fields(text) {
		if addr, ok := strings.CutPrefix(field, "laddr="); ok {
			host, _, _ := net.SplitHostPort(addr)
			return r.pods[host]
		}
	}
	return ""
}

// scenario is one partition of a RedisCluster under a workload.
type scenario struct {
	// partition cuts the network (the cluster's pods by name, the recorded primary's name
	// given apart, and the operator), for as long as the scenario says, and returns with every
	// cut healed.
	partition func(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member)
}

// holding is a partition that makes cut, holds it for d, and heals it.
func holding(d time.Duration, cut func(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member)) func(*testing.T, *partition.Net, map[string]partition.Member, string, partition.Member) {
	return func(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member) {
		cut(t, net, pods, primary, operator)
		time.Sleep(d)
		require.NoError(t, net.Heal())
	}
}

// full is whether the long runs are asked for (PARTITIONS_FULL=1: the closing note's figures).
func full() bool { return os.Getenv("PARTITIONS_FULL") == "1" }

// cutFor is how long a partition lasts: 2 unreachable timeouts, 20 with PARTITIONS_FULL=1.
func cutFor() time.Duration {
	if full() {
		return 20 * unreachableTimeout
	}
	return 2 * unreachableTimeout
}

// run runs three clients against rc through its primary Service for 1s, partitions it, and lets
// the clients run 3s more once healed; then, once the cluster is Ready again,
// it reads back every acknowledged key from the primary and returns what the checker says.
func (s scenario) run(t *testing.T, rc *cachev1.RedisCluster) outcome {
	t.Helper()
	ctx := context.Background()
	members := pods(t, rc)
	ips := map[string]string{}
	for name, m := range members {
		ips[m.IP] = name
	}
	addr, err := cluster.ServiceAddress(ctx, ns, rc.Name)
	require.NoError(t, err)
	password, err := cluster.SecretValue(ctx, ns, rc.Name+"-auth", "password")
	require.NoError(t, err)
	clients := map[string]history.Client{}
	for i := range 3 {
		c := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Dialer: cluster.Dial, MaxRetries: -1,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1})
		t.Cleanup(func() { c.Close() })
		clients[fmt.Sprintf("c%d", i)] = redisClient{c: c, pods: ips}
	}
	rec := &history.Recorder{}
	workload := history.Workload{Clients: clients, Interval: 10 * time.Millisecond, OpTimeout: time.Second, Recorder: rec}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { workload.Run(runCtx) })
	terms := pollPrimary(runCtx, &wg, rc)

	time.Sleep(time.Second)
	net := partition.New(t)
	s.partition(t, net, members, rc.Status.Primary, operatorMember(t))
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()

	after := readyAgain(t, rc)
	reader := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Dialer: cluster.Dial})
	defer reader.Close()
	final := map[string]string{}
	for key := range rec.Acknowledged() {
		v, err := reader.Get(ctx, key).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		require.NoError(t, err)
		final[key] = v
	}
	report := history.Check(rec.Ops(), final, terms())
	failovers := len(terms()) - 1
	t.Logf("%s: primary %s before, %s after, %d changes; %s", t.Name(), rc.Status.Primary, after.Status.Primary, failovers, report)
	return outcome{Report: report, primaryChanges: failovers}
}

// outcome is what a scenario's run found.
type outcome struct {
	history.Report
	// primaryChanges are the changes of the primary of record during the run.
	primaryChanges int
}

// pollPrimary records the primary of record (status.primary) every 100ms until ctx ends; the
// terms it returns are complete once wg is done.
func pollPrimary(ctx context.Context, wg *sync.WaitGroup, rc *cachev1.RedisCluster) func() []history.Term {
	var mu sync.Mutex
	var terms []history.Term
	wg.Go(func() {
		for ctx.Err() == nil {
			got := &cachev1.RedisCluster{}
			if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(rc), got); err == nil {
				mu.Lock()
				if len(terms) == 0 || terms[len(terms)-1].Primary != got.Status.Primary {
					terms = append(terms, history.Term{Primary: got.Status.Primary, From: time.Now()})
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() []history.Term {
		mu.Lock()
		defer mu.Unlock()
		return terms
	}
}

// settings are each scenario's two settings: asynchronous replication alone, and a primary that
// takes writes only while a replica is connected (spec.failover.minReplicasToWrite 1).
var settings = []struct {
	name               string
	minReplicasToWrite *int32
}{
	{"async", nil},
	{"minReplicasToWrite=1", ptr.To[int32](1)},
}

// cutOperatorFromPrimary: the operator cannot reach the primary; the replicas and the clients can.
func cutOperatorFromPrimary(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member) {
	require.NoError(t, net.Cut([]partition.Member{operator}, []partition.Member{pods[primary]}))
}

// isolatePrimary: the primary cannot reach its replicas nor the operator; the clients (on the
// node) still reach it.
func isolatePrimary(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member) {
	others := []partition.Member{operator}
	for name, m := range pods {
		if name != primary {
			others = append(others, m)
		}
	}
	require.NoError(t, net.Cut([]partition.Member{pods[primary]}, others))
}

func TestPartitionTheOperatorCutOffFromThePrimary(t *testing.T) {
	needsLocalNode(t, "cuts inside the pods' network namespaces")
	for i, setting := range settings {
		t.Run(setting.name, func(t *testing.T) {
			rc := sharedCluster(t, i)
			out := scenario{partition: holding(cutFor(), cutOperatorFromPrimary)}.run(t, rc)
			assert.Empty(t, out.Lost, "acknowledged writes lost")
			// Its replicas still hear from it: the operator's link is cut, not the primary's
			assert.Zero(t, out.primaryChanges, "a primary that its replicas and clients reach is not replaced")
		})
	}
}

func TestPartitionThePrimaryCutOffFromItsReplicasAndTheOperator(t *testing.T) {
	needsLocalNode(t, "cuts inside the pods' network namespaces")
	for i, setting := range settings {
		t.Run(setting.name, func(t *testing.T) {
			rc := sharedCluster(t, i)
			out := scenario{partition: holding(cutFor(), isolatePrimary)}.run(t, rc)
			assert.Empty(t, out.Lost, "acknowledged writes lost")
			assert.Positive(t, out.primaryChanges, "a replica replaces the primary nobody else hears from")
		})
	}
}

// TestPartitionTheOperatorCutOffFromTheAPIServer: the operator reaches Redis, not the API server (its
// ClusterIP, before kube-proxy rewrites it). It renews no lease meanwhile, writes no status, and
// Redis goes on; once healed, it leads and reports again.
func TestPartitionTheOperatorCutOffFromTheAPIServer(t *testing.T) {
	needsLocalNode(t, "cuts inside the pods' network namespaces")
	ctx := context.Background()
	rc := sharedCluster(t, 0)
	api := &corev1.Service{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, api))
	leaseKey := client.ObjectKey{Namespace: localcluster.OperatorNamespace, Name: "redis-operator.cache.example.com"}
	var renewedDuringCut bool
	out := scenario{partition: func(t *testing.T, net *partition.Net, _ map[string]partition.Member, _ string, operator partition.Member) {
		require.NoError(t, net.CutAddress([]partition.Member{operator}, api.Spec.ClusterIP, 443))
		cut := time.Now()
		time.Sleep(cutFor())
		lease := &coordinationv1.Lease{}
		require.NoError(t, cluster.Client.Get(ctx, leaseKey, lease))
		renewedDuringCut = lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(cut.Add(time.Second))
		require.NoError(t, net.Heal())
	}}.run(t, rc)
	assert.Empty(t, out.Lost, "acknowledged writes lost")
	assert.False(t, renewedDuringCut, "the cut is real: the operator renewed no lease through it")
	assert.Zero(t, out.primaryChanges)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lease := &coordinationv1.Lease{}
		require.NoError(c, cluster.Client.Get(ctx, leaseKey, lease))
		assert.True(c, lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < 10*time.Second, "leading again")
	}, waitFor, tick)
}

// TestPartitionAFlappingLinkDoesNotFailOverFasterThanTheTimeout: the primary's link to its replicas and
// the operator is cut for 2s and healed for 2s, again and again: each cut is shorter than
// spec.failover.unreachableTimeout (3s), so no failover is due, and none may come faster than
// the timeout allows.
func TestPartitionAFlappingLinkDoesNotFailOverFasterThanTheTimeout(t *testing.T) {
	needsLocalNode(t, "cuts inside the pods' network namespaces")
	rc := sharedCluster(t, 0)
	flapFor := 8 * time.Second
	if full() {
		flapFor = time.Minute
	}
	cuts := 0
	out := scenario{partition: func(t *testing.T, net *partition.Net, pods map[string]partition.Member, primary string, operator partition.Member) {
		for end := time.Now().Add(flapFor); time.Now().Before(end); cuts++ {
			isolatePrimary(t, net, pods, primary, operator)
			time.Sleep(2 * time.Second)
			require.NoError(t, net.Heal())
			time.Sleep(2 * time.Second)
		}
	}}.run(t, rc)
	t.Logf("%d cuts of 2s in %s: %d changes of primary", cuts, flapFor, out.primaryChanges)
	assert.Empty(t, out.Lost, "acknowledged writes lost")
	assert.LessOrEqual(t, time.Duration(out.primaryChanges)*unreachableTimeout, flapFor,
		"no faster than one failover per unreachableTimeout")
}

// shardedClient is a history.Client of a RedisCluster in cluster mode, as an application's
// go-redis ClusterClient: a write goes to the primary of its key's slot as the client knows it,
// acknowledged once that primary's replica has it too (WAIT 1).
type shardedClient struct {
	cc   *goredis.ClusterClient
	pods map[string]string
}

func (s shardedClient) Write(ctx context.Context, key, value string) (string, error) {
	primary, err := s.cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return redisClient{c: primary, pods: s.pods}.Write(ctx, key, value)
}

func (s shardedClient) Read(ctx context.Context, key string) (string, bool, string, error) {
	v, err := s.cc.Get(ctx, key).Result()
	if errors.Is(err, goredis.Nil) {
		return "", false, "", nil
	}
	return v, err == nil, "", err
}

// TestPartitionAShardsPrimaryCutOffFromTheRestOfTheCluster: in cluster mode (3 shards of 2 nodes), shard
// 0's primary is cut off from every other node and the operator; clients still reach it. Redis
// Cluster's own failover promotes its replica after the node timeout, and the primary, alone in its
// minority, stops taking writes; a write it took meanwhile was never acknowledged (its replica did
// not have it). Once healed it rejoins as the new primary's replica.
func TestPartitionAShardsPrimaryCutOffFromTheRestOfTheCluster(t *testing.T) {
	needsLocalNode(t, "cuts inside the pods' network namespaces")
	ctx := context.Background()
	rc := testenv.RedisCluster(ns, "sharded", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: 2 * time.Second}}
	require.NoError(t, cluster.Client.Create(ctx, rc))
	rc = readyAgain(t, rc)
	require.Len(t, rc.Status.Shards, 3)
	members := pods(t, rc)
	ips := map[string]string{}
	var addrs []string
	for name, m := range members {
		ips[m.IP] = name
		addrs = append(addrs, net.JoinHostPort(m.IP, "6379"))
	}
	password, err := cluster.SecretValue(ctx, ns, rc.Name+"-auth", "password")
	require.NoError(t, err)
	newClient := func() *goredis.ClusterClient {
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Password: password, Dialer: cluster.Dial,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRedirects: 8})
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	clients := map[string]history.Client{}
	for i := range 3 {
		clients[fmt.Sprintf("c%d", i)] = shardedClient{cc: newClient(), pods: ips}
	}
	rec := &history.Recorder{}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		history.Workload{Clients: clients, Interval: 10 * time.Millisecond, OpTimeout: time.Second, Recorder: rec}.Run(runCtx)
	})

	time.Sleep(time.Second)
	isolated := rc.Status.Shards[0].Primary
	others := []partition.Member{operatorMember(t)}
	for name, m := range members {
		if name != isolated {
			others = append(others, m)
		}
	}
	cut := partition.New(t)
	require.NoError(t, cut.Cut([]partition.Member{members[isolated]}, others))
	// Its replica takes over once the majority of primaries has flagged it failed
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &cachev1.RedisCluster{}
		require.NoError(c, cluster.Client.Get(ctx, client.ObjectKeyFromObject(rc), got))
		require.Len(c, got.Status.Shards, 3)
		assert.NotEqual(c, isolated, got.Status.Shards[0].Primary)
	}, waitFor, tick, "shard 0's replica takes over")
	time.Sleep(cutFor())
	require.NoError(t, cut.Heal())
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()

	after := readyAgain(t, rc)
	reader := newClient()
	final := map[string]string{}
	for key := range rec.Acknowledged() {
		v, err := reader.Get(ctx, key).Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		require.NoError(t, err)
		final[key] = v
	}
	report := history.Check(rec.Ops(), final, nil)
	t.Logf("%s: shard 0's primary %s before, %s after; %s", t.Name(), isolated, after.Status.Shards[0].Primary, report)
	assert.Empty(t, report.Lost, "acknowledged writes lost")
	assert.Contains(t, after.Status.Shards[0].Replicas, isolated, "the old primary rejoins as a replica")
}
