package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/testenv"
)

// clusterClient is a go-redis ClusterClient seeded with every node of the RedisCluster.
func clusterClient(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, password string) *goredis.ClusterClient {
	t.Helper()
	return clusterClientWith(t, node, rc, goredis.ClusterOptions{Password: password})
}

// clusterClientWith is clusterClient with these options (a password, TLS).
func clusterClientWith(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, opts goredis.ClusterOptions) *goredis.ClusterClient {
	t.Helper()
	for _, n := range rc.Status.Nodes {
		if s := node.Server(n.Name); s != nil {
			opts.Addrs = append(opts.Addrs, s.Addr())
		}
	}
	opts.Protocol, opts.DisableIdentity, opts.MaxRedirects = 2, true, 8
	c := goredis.NewClusterClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClusterModeFormsShardsThatServeEverySlotAndFailOverByThemselves(t *testing.T) {
	// Its own namespace, operator and nodes: it runs beside the other tests that wait on Redis
	// more than they use the CPU.
	t.Parallel()
	ctx := context.Background()

	// Given a RedisCluster in cluster mode: 3 shards of 2 nodes
	// Then it becomes Ready: each shard's primary serves a third of the slots, with its replica
	e := newShardedCluster(t, "sharded")
	op, node, rc, got, password, cc := e.op, e.node, e.rc, e.ready, e.password, e.cc
	require.Len(t, got.Status.Shards, 3)
	served := 0
	for i, sh := range got.Status.Shards {
		assert.Equal(t, fmt.Sprintf("sharded-shard%d", i), sh.Name)
		assert.True(t, strings.HasPrefix(sh.Primary, sh.Name+"-"), "the shard's primary is one of its pods: %+v", sh)
		require.Len(t, sh.Replicas, 1)
		assert.True(t, strings.HasPrefix(sh.Replicas[0], sh.Name+"-"))
	}
	for _, n := range shardSlotCounts(t, got) {
		served += n
	}
	assert.Equal(t, shards.SlotCount, served)
	for _, n := range got.Status.Nodes {
		info := redisClient(t, node, n.Name, password).ClusterInfo(ctx).Val()
		assert.Contains(t, info, "cluster_state:ok", n.Name)
		assert.Equal(t, cachev1.NodeServing, n.State, n.Name)
	}

	// And, formed, the health check writes nothing: no status, no child
	assertHealthChecksWriteNothing(t, op, rc)

	// And a cluster client's writes spread over the shards and read back
	for i := range 300 {
		require.NoError(t, cc.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err())
	}
	for i := range 300 {
		assert.Equal(t, fmt.Sprint(i), cc.Get(ctx, fmt.Sprintf("key:%d", i)).Val())
	}
	for _, sh := range got.Status.Shards {
		primary := redisClient(t, node, sh.Primary, password)
		assert.Positive(t, primary.DBSize(ctx).Val(), "%s holds some keys", sh.Primary)
		// Acknowledged by the shard's replica too: replication is asynchronous, as without
		// cluster mode.
		assert.Equal(t, int64(1), primary.Do(ctx, "WAIT", 1, 5000).Val())
	}

	// When a shard's primary goes away for longer than the node timeout
	victim := got.Status.Shards[1]
	server := node.Server(victim.Primary)
	node.NoRestart.Store(true)
	server.Kill()

	// Then Redis Cluster promotes its replica; the operator reports it as the shard's primary
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getRC(c, rc)
		require.Len(c, now.Status.Shards, 3)
		assert.Equal(c, victim.Replicas[0], now.Status.Shards[1].Primary)
	}, waitFor, tick)
	// A cluster client finds the new primary once it reloads the slots (go-redis does on its own
	// after errors; here at once)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cc.ReloadState(ctx)
		for i := range 300 {
			v, err := cc.Get(ctx, fmt.Sprintf("key:%d", i)).Result()
			require.NoError(c, err)
			assert.Equal(c, fmt.Sprint(i), v, "no acknowledged write is lost")
		}
	}, waitFor, tick)

	// And when the old primary comes back, it is the replica of the new one, and the cluster is
	// Ready again
	node.NoRestart.Store(false)
	require.NoError(t, server.Restart())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getRC(c, rc)
		assert.True(c, meta.IsStatusConditionTrue(now.Status.Conditions, cachev1.ConditionReady), "%+v", now.Status.Conditions)
		require.Len(c, now.Status.Shards, 3)
		assert.Equal(c, []string{victim.Primary}, now.Status.Shards[1].Replicas)
	}, waitFor, tick)
}

func TestAnExistingRedisClusterCannotSwitchModes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	single := testenv.RedisCluster(ns, "single", 1)
	require.NoError(t, k8sClient.Create(ctx, single))
	sharded := testenv.RedisCluster(ns, "sharded", 1)
	sharded.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3}
	require.NoError(t, k8sClient.Create(ctx, sharded))

	for _, tt := range []struct {
		name   string
		rc     *cachev1.RedisCluster
		mutate func(*cachev1.RedisCluster)
		want   string
	}{
		{"into cluster mode", single, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3} },
			"cannot switch between one primary and cluster mode"},
		{"out of cluster mode", sharded, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster = nil },
			"cannot switch between one primary and cluster mode"},
		{"fewer than 3 shards", sharded, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 2 },
			"spec.cluster.shards"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := getRC(t, tt.rc)
			tt.mutate(got)
			err := k8sClient.Update(ctx, got)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
