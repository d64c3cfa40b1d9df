package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// The two failures of cluster mode a move or a restart must survive: a shard's primary that
// stops answering while slots move to or from its shard, and a pod that comes back with a new
// IP but its old nodes.conf.

// assertKeysRead checks that k:0..k:<n-1> read back with their values. A cluster that says
// Ready may still be settling a failover its nodes are gossiping about (CLUSTERDOWN for a
// moment, as a client sees it): the keys are read again until they all are, or waitFor.
func assertKeysRead(t *testing.T, cc *goredis.ClusterClient, n int) {
	t.Helper()
	ctx := context.Background()
	// Read in pipelines of 1000: one GET at a time, 20,000 keys took longer than waitFor on a
	// loaded CI machine, and no pass ended to say what it read.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var lost []string
		for start := 0; start < n; start += 1000 {
			var gets []*goredis.StringCmd
			_, _ = cc.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i := start; i < min(start+1000, n); i++ {
					gets = append(gets, p.Get(ctx, fmt.Sprintf("k:%d", i)))
				}
				return nil
			})
			for j, get := range gets {
				if v, err := get.Result(); err != nil || v != fmt.Sprint(start+j) {
					lost = append(lost, fmt.Sprintf("k:%d (%v)", start+j, err))
				}
			}
		}
		assert.Empty(c, lost, "keys lost of %d", n)
	}, waitFor, tick)
}

// assertNoSlotOpen checks that no node has a slot importing or migrating.
func assertNoSlotOpen(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, password string) {
	t.Helper()
	for _, n := range rc.Status.Nodes {
		nodes := redisClient(t, node, n.Name, password).ClusterNodes(context.Background()).Val()
		assert.NotContains(t, nodes, "->-", "%s: no slot is left migrating", n.Name)
		assert.NotContains(t, nodes, "-<-", "%s: no slot is left importing", n.Name)
	}
}

// freezeWhileSlotsMove waits until some of the total slots to move have moved, then stops
// pod's Redis (SIGSTOP) for longer than the node timeout, so that Redis Cluster fails its shard
// over, and starts it again (SIGCONT).
func freezeWhileSlotsMove(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, pod string, total int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		left, ok := slotsLeftToMove(getRC(c, rc))
		assert.True(c, ok && left < total, "slots moving, some moved: %d left", left)
	}, waitFor, time.Millisecond)
	server := node.Server(pod)
	require.NotNil(t, server)
	require.NoError(t, server.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = server.Signal(syscall.SIGCONT) })
	left, ok := slotsLeftToMove(getRC(t, rc))
	require.True(t, ok && left > 0, "%s stopped mid-move: %d slots left", pod, left)
	t.Logf("%s stopped with %d of %d slots left to move", pod, left, total)
	time.Sleep(3 * time.Second) // three node timeouts: its replica takes over
	require.NoError(t, server.Signal(syscall.SIGCONT))
}

// slotsLeftToMove reads how many slots are left to move from Progressing's message ("...: 420
// left to move", "...: 420 of its slots are left to move ...").
func slotsLeftToMove(rc *cachev1.RedisCluster) (int, bool) {
	cond := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionProgressing)
	if cond == nil || cond.Reason != cachev1.ReasonSlotsMoving {
		return 0, false
	}
	_, after, ok := strings.Cut(cond.Message, ": ")
	if !ok {
		return 0, false
	}
	var left int
	if _, err := fmt.Sscanf(after, "%d", &left); err != nil {
		return 0, false
	}
	return left, true
}

func TestAPrimaryStoppedWhileItsSlotsMoveLosesNoKeyAndLeavesNoSlotOpen(t *testing.T) {
	t.Parallel()

	// Given 3 shards of 2 nodes holding 20000 keys, each on its shard's replica too
	e := newShardedCluster(t, "moving")
	node, rc, password := e.node, e.rc, e.password
	writeShardedKeys(t, e.cc, "k:", 20000, 0)

	// When the cluster grows a shard, and the new shard's primary, which the slots move to,
	// stops for three node timeouts meanwhile, then starts again
	patchSpec(t, rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 4 })
	freezeWhileSlotsMove(t, node, rc, "moving-shard3-0", 4096)

	// Then the slots end evenly on 4 shards, no slot is left open, and every key reads back
	got := eventuallyShards(t, rc, 4, 4*waitFor)
	assertNoSlotOpen(t, node, got, password)
	assertKeysRead(t, clusterClient(t, node, got, password), 20000)

	// When it shrinks back to 3, and the drained shard's primary, which the slots move from,
	// stops meanwhile
	writeShardedKeys(t, clusterClient(t, node, got, password), "k:", 20000, 0) // its replica has them again
	patchSpec(t, rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 3 })
	freezeWhileSlotsMove(t, node, rc, got.Status.Shards[3].Primary, 4096)

	// Then the slots end evenly on 3 shards, no slot is left open, and every key reads back
	got = eventuallyShards(t, rc, 3, 4*waitFor)
	assertNoSlotOpen(t, node, got, password)
	assertKeysRead(t, clusterClient(t, node, got, password), 20000)
}

// shardsOnVolumes is a Ready RedisCluster of 3 shards of 2 nodes with their data on volumes
// (spec.storage) and a node timeout of 1s, in a namespace of its own with its operator, holding
// k:0..k:2999 on each shard's primary and replica.
func shardsOnVolumes(t *testing.T, name string) *shardedCluster {
	t.Helper()
	e := newShardedCluster(t, name, func(rc *cachev1.RedisCluster) {
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	})
	writeShardedKeys(t, e.cc, "k:", 3000, 0)
	return e
}

func TestAPodBackWithANewIPAndItsNodesConfRejoinsWithItsSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes with their data on volumes, holding 3000 keys, whose health
	// checks write nothing once formed (the claim templates the API server completes compare
	// as applied)
	e := shardsOnVolumes(t, "volumes")
	node, rc, ready, password := e.node, e.rc, e.ready, e.password
	assertHealthChecksWriteNothing(t, e.op, rc)
	primary := ready.Status.Shards[1].Primary
	oldIP := node.Server(primary).IP
	id, err := redisClient(t, node, primary, password).Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)

	// When shard 1's primary's pod is deleted, and comes back with a new IP and its volume
	pod := &corev1.Pod{}
	require.NoError(t, k8sClient.Get(ctx, key(rc.Namespace, primary), pod))
	require.NoError(t, k8sClient.Delete(ctx, pod))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := node.Server(primary)
		require.NotNil(c, s)
		assert.NotEqual(c, oldIP, s.IP, "a new IP")
		assert.True(c, s.Alive())
	}, waitFor, tick)
	newIP := node.Server(primary).IP

	// Then it is the same node (its ID), every node knows it at its new address, and the
	// cluster is Ready with every slot served and every key read back
	got := eventuallyShards(t, rc, 3, 2*waitFor)
	myID, err := redisClient(t, node, primary, password).Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	assert.Equal(t, id, myID, "%s kept its node ID (nodes.conf)", primary)
	for _, n := range got.Status.Nodes {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			nodes := redisClient(t, node, n.Name, password).ClusterNodes(ctx).Val()
			for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
				if strings.HasPrefix(line, id+" ") {
					assert.Contains(c, line, " "+newIP+":", "%s knows %s at its new address", n.Name, primary)
				}
			}
			assert.NotContains(c, nodes, " "+oldIP+":", "%s forgot the old address", n.Name)
		}, waitFor, tick)
	}
	assert.Len(t, got.Status.Nodes, 6)
	assertNoSlotOpen(t, node, got, password)
	assertKeysRead(t, clusterClient(t, node, got, password), 3000)
}

// primariesByID are the node IDs that serve slots, with their slots, as pod's node sees them.
func primariesByID(t require.TestingT, node *testenv.LocalNode, pod, password string) map[string]string {
	raw, err := redisClientOf(t, node, pod, password).ClusterNodes(context.Background()).Result()
	require.NoError(t, err)
	nodes, err := redis.ParseClusterNodes(raw)
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range nodes {
		if n.SlotCount() > 0 {
			out[n.ID] = fmt.Sprint(n.Slots)
		}
	}
	return out
}

// redisClientOf is redisClient for a check inside an Eventually: no cleanup, closed by the caller's GC.
func redisClientOf(t require.TestingT, node *testenv.LocalNode, pod, password string) *goredis.Client {
	server := node.Server(pod)
	require.NotNil(t, server, "pod %s runs no Redis", pod)
	return goredis.NewClient(&goredis.Options{Addr: server.Addr(), Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
}

func TestEveryPodBackAtNewAddressesRejoinsWithItsSlotsRoundAfterRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes with their data on volumes, holding 3000 keys on each shard's
	// primary and replica
	e := shardsOnVolumes(t, "reboot")
	node, rc, ready, password := e.node, e.rc, e.ready, e.password
	ns := rc.Namespace
	slotsByID := primariesByID(t, node, ready.Status.Shards[0].Primary, password)
	require.Len(t, slotsByID, 3)

	for round := 1; round <= 3; round++ {
		// When every pod is deleted at once (a node reboot): each comes back with its volume,
		// so its nodes.conf and its data, at an address no node knows
		// (every process ends first: the local node replaces one StatefulSet's pods after
		// another, and a node that came back while others still ran would find them)
		var pods []string
		for _, n := range ready.Status.Nodes {
			pods = append(pods, n.Name)
		}
		killAndDelete(t, node, ns, password, pods, nil)
		running := time.Now()

		// Then every node says the cluster serves every slot again, the same node IDs serving
		// the same slots, and every key reads back
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, name := range pods {
				info, err := redisClientOf(c, node, name, password).ClusterInfo(ctx).Result()
				require.NoError(c, err)
				assert.Contains(c, info, "cluster_state:ok", name)
			}
		}, 2*waitFor, tick, "round %d: the cluster serves again", round)
		t.Logf("round %d: every node says cluster_state:ok %s after the pods run", round, time.Since(running).Round(10*time.Millisecond))
		ready = eventuallyShards(t, rc, 3, 2*waitFor)
		assert.Equal(t, slotsByID, primariesByID(t, node, ready.Status.Shards[0].Primary, password), "round %d: the same nodes serve the same slots", round)
		assertKeysRead(t, clusterClient(t, node, ready, password), 3000)
		assert.Nil(t, meta.FindStatusCondition(ready.Status.Conditions, cachev1.ConditionDataLost), "nothing is said lost")
	}
	assert.Positive(t, countEvents(t, rc, cachev1.EventClusterChanged))
}

// TestEveryPodOfAClusterModeRedisClusterWithoutStorageDeletedIsReportedAsDataLost: without
// spec.storage the nodes come back empty, with new node IDs; the operator forms the cluster
// again so that it serves, and must say what was lost.
func TestEveryPodOfAClusterModeRedisClusterWithoutStorageDeletedIsReportedAsDataLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes without storage, holding 1000 keys
	e := newShardedCluster(t, "ephemeral")
	writeShardedKeys(t, e.cc, "k:", 1000, 0)
	lostBefore, _ := metricValue(t, "redis_operator_data_lost_total", map[string]string{"namespace": e.ns, "rediscluster": "ephemeral"})
	time.Sleep(2 * time.Second) // a health check sees the keys

	// When every process ends and every pod is deleted at once
	var pods []string
	for _, n := range e.ready.Status.Nodes {
		pods = append(pods, n.Name)
	}
	killAndDelete(t, e.node, e.ns, e.password, pods, nil)

	// Then it serves again, Ready, and says that the data is lost: each shard with its keys, in
	// a Warning Event for each assignment of slots (a shard whose pods answer first is given
	// its slots first), the condition saying the last
	got := eventuallyShards(t, e.rc, 3, 2*waitFor)
	lost := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDataLost)
	require.NotNil(t, lost, "conditions: %+v", got.Status.Conditions)
	assert.Equal(t, metav1.ConditionTrue, lost.Status)
	assert.Equal(t, cachev1.ReasonNodesRestartedWithoutData, lost.Reason)
	assert.Contains(t, lost.Message, "Without spec.storage")
	var notes []string
	total := 0
	for _, ev := range eventsFor(t, got) {
		if ev.Reason != cachev1.EventDataLost {
			continue
		}
		notes = append(notes, ev.Note)
		var keys int
		_, after, _ := strings.Cut(ev.Note, "so that the cluster serves: ")
		_, err := fmt.Sscanf(after, "%d keys known lost", &keys)
		require.NoError(t, err, ev.Note)
		total += keys
	}
	require.NotEmpty(t, notes)
	assert.Contains(t, notes, lost.Message, "the condition is the last Event's")
	for _, shard := range []string{"shard 0 (", "shard 1 (", "shard 2 ("} {
		assert.Contains(t, strings.Join(notes, "\n"), shard)
	}
	assert.Equal(t, 1000, total, "every key written is said lost: %q", notes)
	lostAfter, ok := metricValue(t, "redis_operator_data_lost_total", map[string]string{"namespace": e.ns, "rediscluster": "ephemeral"})
	require.True(t, ok)
	assert.Equal(t, lostBefore+float64(len(notes)), lostAfter)
	// And what is reported is true: the keys are gone
	cc := clusterClient(t, e.node, got, e.password)
	for _, k := range []string{"k:1", "k:2", "k:3"} {
		n, err := cc.Exists(ctx, k).Result()
		require.NoError(t, err)
		assert.Zero(t, n, k)
	}
}

// killAndDelete ends the pods' processes at once and deletes the pods (their volumes stay),
// running wipe on each server first, if given, then waits until every one runs again. What
// the tests ask back is what each node has written to its append-only file (see aofWritten).
func killAndDelete(t *testing.T, node *testenv.LocalNode, ns, password string, pods []string, wipe func(*redistest.Server)) {
	t.Helper()
	for _, pod := range pods {
		aofWritten(t, node, pod, password)
	}
	node.NoRestart.Store(true)
	ips := map[string]string{}
	for _, pod := range pods {
		s := node.Server(pod)
		ips[pod] = s.IP
		s.Kill()
		if wipe != nil {
			wipe(s)
		}
	}
	for _, pod := range pods {
		require.NoError(t, k8sClient.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for pod, ip := range ips {
			s := node.Server(pod)
			require.NotNil(c, s, pod)
			assert.NotEqual(c, ip, s.IP, "%s has a new address", pod)
			assert.True(c, s.Listening(), "%s listens", pod)
		}
	}, waitFor, tick)
	node.NoRestart.Store(false)
}

// aofWritten waits until pod's Redis has written every write it acknowledged to its
// append-only file (redistest.AOFWritten says why).
func aofWritten(t *testing.T, node *testenv.LocalNode, pod, password string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cl := redisClientOf(c, node, pod, password)
		defer cl.Close()
		written, err := redistest.AOFWritten(context.Background(), cl)
		require.NoError(c, err)
		assert.True(c, written, "%s has written what it acknowledged", pod)
	}, waitFor, 10*time.Millisecond)
}

func TestOneShardBackAtNewAddressesAndANodeWhoseVolumeWasLostRejoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := shardsOnVolumes(t, "partial")
	node, rc, ready, password := e.node, e.rc, e.ready, e.password
	slotsByID := primariesByID(t, node, ready.Status.Shards[0].Primary, password)

	// When both pods of shard 1 end and are deleted at once
	shard1 := append([]string{ready.Status.Shards[1].Primary}, ready.Status.Shards[1].Replicas...)
	killAndDelete(t, node, rc.Namespace, password, shard1, nil)

	// Then the cluster serves again, the same node IDs serving the same slots, every key there
	got := eventuallyShards(t, rc, 3, 2*waitFor)
	assert.Equal(t, slotsByID, primariesByID(t, node, got.Status.Shards[0].Primary, password))
	assertKeysRead(t, clusterClient(t, node, got, password), 3000)

	// When shard 2's primary comes back with its volume emptied (nodes.conf and data gone)
	lost := got.Status.Shards[2].Primary
	lostID, err := redisClient(t, node, lost, password).Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	killAndDelete(t, node, rc.Namespace, password, []string{lost}, func(s *redistest.Server) { require.NoError(t, os.RemoveAll(s.Dir)) })

	// Then its replica serves the shard's slots with the keys, the emptied node joins as a new
	// node replicating it, and its old ID is forgotten everywhere
	got = eventuallyShards(t, rc, 3, 3*waitFor)
	assert.NotEqual(t, lost, got.Status.Shards[2].Primary, "the replica took the shard over")
	assert.Equal(t, []string{lost}, got.Status.Shards[2].Replicas)
	newID, err := redisClient(t, node, lost, password).Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	assert.NotEqual(t, lostID, newID, "a new node")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, n := range got.Status.Nodes {
			nodes, err := redisClientOf(c, node, n.Name, password).ClusterNodes(ctx).Result()
			require.NoError(c, err)
			assert.NotContains(c, nodes, lostID, "%s forgot the emptied node's old ID", n.Name)
		}
	}, 2*waitFor, tick)
	assertKeysRead(t, clusterClient(t, node, got, password), 3000)
}

func TestAShardWhoseNodesAllCameBackEmptyServesAgainAndTheLossIsSaid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes without storage, holding 1000 keys
	e := newShardedCluster(t, "oneshard")
	writeShardedKeys(t, e.cc, "k:", 1000, 0)
	time.Sleep(2 * time.Second) // a health check sees the keys
	lostShard := e.ready.Status.Shards[1]
	served := 0
	for i := range 1000 {
		slot, err := e.cc.ClusterKeySlot(ctx, fmt.Sprintf("k:%d", i)).Result()
		require.NoError(t, err)
		if slot >= 5461 && slot <= 10921 {
			served++
		}
	}

	// When both nodes of shard 1 end and their pods are deleted at once (new, empty nodes)
	killAndDelete(t, e.node, e.ns, e.password, append([]string{lostShard.Primary}, lostShard.Replicas...), nil)

	// Then the cluster serves every slot again, shard 1 empty, the other shards' keys all
	// there, and the loss of shard 1's keys is said
	got := eventuallyShards(t, e.rc, 3, 3*waitFor)
	lost := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDataLost)
	require.NotNil(t, lost, "conditions: %+v", got.Status.Conditions)
	assert.Contains(t, lost.Message, fmt.Sprintf("Every node of shard 1 (%d keys) came back empty", served))
	assert.Equal(t, 1, countEvents(t, got, cachev1.EventDataLost))
	cc := clusterClient(t, e.node, got, e.password)
	kept := 0
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		kept = 0
		for i := range 1000 {
			if v, err := cc.Get(ctx, fmt.Sprintf("k:%d", i)).Result(); err == nil && v == fmt.Sprint(i) {
				kept++
			}
		}
		assert.Equal(c, 1000-served, kept, "every key of the other shards")
	}, waitFor, tick)
}
