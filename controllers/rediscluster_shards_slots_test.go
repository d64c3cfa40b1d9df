package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// startClusterWriter writes keys through a go-redis ClusterClient as long as it runs, and keeps
// those Redis acknowledged (cluster mode: the node took them).
func startClusterWriter(cc *goredis.ClusterClient) *redistest.Writer {
	return redistest.StartWriter(redistest.WriterOptions{Client: redistest.Held(cc), Every: time.Millisecond, Prefix: "w:"})
}

// assertNothingLost stops the writer, then checks through reader that every write it had
// acknowledged is there, and the keys k:0..k:<preloaded-1> written before with their values,
// and that its errors stayed within 1% of its writes (retries, not failures).
func assertNothingLost(t *testing.T, w *redistest.Writer, reader *goredis.ClusterClient, preloaded int) {
	t.Helper()
	ctx := context.Background()
	w.Stop()
	acked, _, errs := w.Result()
	t.Logf("writer: %d writes acknowledged, %d errors: %v", len(acked), len(errs), errs)
	assert.LessOrEqual(t, len(errs), len(acked)/100, "the writer's errors are bounded: at most 1%% of its writes")
	lost := redistest.Missing(ctx, reader, acked)
	for i := range preloaded {
		if v, err := reader.Get(ctx, fmt.Sprintf("k:%d", i)).Result(); err != nil || v != fmt.Sprint(i) {
			lost = append(lost, fmt.Sprintf("k:%d", i))
		}
	}
	assert.Empty(t, lost, "keys lost, of %d acknowledged and %d written before", len(acked), preloaded)
}

// shardedCluster is a RedisCluster in cluster mode, 3 shards of 2 nodes with a node timeout
// of 1s, Ready, in a namespace of its own with its operator and nodes.
type shardedCluster struct {
	ns       string
	op       *runningOperator
	node     *testenv.LocalNode
	rc       *cachev1.RedisCluster
	ready    *cachev1.RedisCluster // as it was once Ready
	password string
	cc       *goredis.ClusterClient
}

// newShardedCluster is a Ready RedisCluster of 3 shards of 2 nodes with a node timeout of 1s,
// changed by tune before it is created, in a namespace of its own with its operator.
func newShardedCluster(t *testing.T, name string, tune ...func(*cachev1.RedisCluster)) *shardedCluster {
	t.Helper()
	e := &shardedCluster{ns: newNamespace(t)}
	e.op = startOperator(t, adminCfg, e.ns)
	e.node = runLocalNode(t, e.ns)
	e.rc = testenv.RedisCluster(e.ns, name, 2)
	e.rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	for _, f := range tune {
		f(e.rc)
	}
	require.NoError(t, k8sClient.Create(context.Background(), e.rc))
	e.ready = eventuallyReadyWithin(t, e.rc, 2*waitFor)
	e.password = secretValue(t, e.ns, name+"-auth", "password")
	e.cc = clusterClient(t, e.node, e.ready, e.password)
	return e
}

// shardSlotCounts are the slots each shard of the status serves.
func shardSlotCounts(t require.TestingT, rc *cachev1.RedisCluster) []int {
	var counts []int
	for _, sh := range rc.Status.Shards {
		n := 0
		for _, r := range sh.Slots {
			var a, b int
			if _, err := fmt.Sscanf(r, "%d-%d", &a, &b); err != nil {
				_, err = fmt.Sscanf(r, "%d", &a)
				require.NoError(t, err)
				b = a
			}
			n += b - a + 1
		}
		counts = append(counts, n)
	}
	return counts
}

// eventuallyShards waits until the RedisCluster is Ready with n shards, each serving within one
// slot of an even share.
func eventuallyShards(t *testing.T, rc *cachev1.RedisCluster, n int, within time.Duration) *cachev1.RedisCluster {
	t.Helper()
	var got *cachev1.RedisCluster
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = getRC(c, rc)
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady), "conditions: %+v", got.Status.Conditions)
		require.Len(c, got.Status.Shards, n)
	}, within, tick)
	counts := shardSlotCounts(t, got)
	total := 0
	for i, count := range counts {
		assert.InDelta(t, shards.SlotCount/n, count, 1, "shard %d serves within one slot of even: %v", i, counts)
		total += count
	}
	assert.Equal(t, shards.SlotCount, total)
	return got
}

func TestShardsScaleOutAndInUnderAWriterWithoutLosingAnAcknowledgedWrite(t *testing.T) {
	// Its own namespace, operator and nodes: it runs beside the other tests that wait on Redis
	// more than they use the CPU.
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes holding 3000 keys, and a cluster client writing all along
	e := newShardedCluster(t, "orders")
	ns, node, rc, password, cc := e.ns, e.node, e.rc, e.password, e.cc
	pipe := cc.Pipeline()
	for i := range 3000 {
		pipe.Set(ctx, fmt.Sprintf("k:%d", i), i, 0)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	w := startClusterWriter(cc)
	t.Cleanup(w.Stop)
	require.Eventually(t, func() bool { return w.Acked() > 100 }, waitFor, tick)

	// When it grows to 5 shards
	patchSpec(t, rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 5 })

	// Then the slots move until the 5 shards serve an even share each, and say so meanwhile
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getRC(c, rc)
		cond := meta.FindStatusCondition(now.Status.Conditions, cachev1.ConditionProgressing)
		require.NotNil(c, cond)
		assert.Equal(c, cachev1.ReasonSlotsMoving, cond.Reason)
	}, waitFor, time.Millisecond)
	got := eventuallyShards(t, rc, 5, 4*waitFor)
	for _, sh := range got.Status.Shards {
		assert.Len(t, sh.Replicas, 1, "shard %s has its replica", sh.Name)
	}
	movedTo := redisClient(t, node, got.Status.Shards[4].Primary, password)
	assert.Positive(t, movedTo.DBSize(ctx).Val(), "keys moved to the new shard with its slots")
	beforeIn := w.Acked()

	// When it shrinks back to 3
	patchSpec(t, rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 3 })

	// Then shards 3 and 4 are drained, their StatefulSets and pods are gone, the other nodes
	// forgot theirs, and 3 shards serve an even share again
	got = eventuallyShards(t, rc, 3, 4*waitFor)
	for _, name := range []string{"orders-shard3", "orders-shard4"} {
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.StatefulSet{})
		assert.True(t, apierrors.IsNotFound(err), "StatefulSet %s is deleted: %v", name, err)
	}
	assert.Len(t, got.Status.Nodes, 6)
	for _, n := range got.Status.Nodes {
		nodes := redisClient(t, node, n.Name, password).ClusterNodes(ctx).Val()
		assert.Equal(t, 6, strings.Count(strings.TrimSpace(nodes), "\n")+1, "%s knows only the 6 nodes left:\n%s", n.Name, nodes)
		assert.NotContains(t, nodes, "->-", "no slot is left migrating")
		assert.NotContains(t, nodes, "-<-", "no slot is left importing")
	}

	// And the writer kept writing, every acknowledged write is there, and the 3000 keys too
	require.Eventually(t, func() bool { return w.Acked() > beforeIn+100 }, waitFor, tick)
	assertNothingLost(t, w, clusterClient(t, node, got, password), 3000)
}

// patchSpec changes the RedisCluster's spec as a user would (a merge patch of the change).
func patchSpec(t *testing.T, rc *cachev1.RedisCluster, change func(*cachev1.RedisCluster)) {
	t.Helper()
	got := getRC(t, rc)
	base := client.MergeFrom(got.DeepCopy())
	change(got)
	require.NoError(t, k8sClient.Patch(context.Background(), got, base))
}

func TestANewVersionInClusterModeReplacesReplicasThenFailsEachShardOverWithoutLosingAWrite(t *testing.T) {
	// Its own namespace, operator and nodes: it runs beside the other tests that wait on Redis
	// more than they use the CPU.
	t.Parallel()
	ctx := context.Background()

	// Given 3 shards of 2 nodes holding 500 keys, and a cluster client writing all along
	e := newShardedCluster(t, "orders")
	ns, node, rc, before, password, cc := e.ns, e.node, e.rc, e.ready, e.password, e.cc
	for i := range 500 {
		require.NoError(t, cc.Set(ctx, fmt.Sprintf("k:%d", i), i, 0).Err())
	}
	w := startClusterWriter(cc)
	t.Cleanup(w.Stop)
	require.Eventually(t, func() bool { return w.Acked() > 100 }, waitFor, tick)

	// When the version changes
	patchSpec(t, rc, func(rc *cachev1.RedisCluster) { rc.Spec.Version = "7.0" })

	// Then every pod is replaced, each shard's replica having taken over before its primary's pod
	// went, and the cluster is Ready with nothing left to roll out
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getRC(c, rc)
		assert.Equal(c, now.Generation, now.Status.ObservedGeneration)
		assert.True(c, meta.IsStatusConditionTrue(now.Status.Conditions, cachev1.ConditionReady), "%+v", now.Status.Conditions)
		assert.True(c, meta.IsStatusConditionFalse(now.Status.Conditions, cachev1.ConditionProgressing), "%+v", now.Status.Conditions)
		for i := range 3 {
			sts := &appsv1.StatefulSet{}
			require.NoError(c, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("orders-shard%d", i)}, sts))
			assert.Equal(c, "redis:7.0", sts.Spec.Template.Spec.Containers[0].Image)
			pods := &corev1.PodList{}
			require.NoError(c, k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"cache.example.com/shard": fmt.Sprint(i)}))
			require.Len(c, pods.Items, 2)
			for _, p := range pods.Items {
				assert.Equal(c, sts.Status.UpdateRevision, p.Labels[appsv1.ControllerRevisionHashLabelKey], "pod %s runs the current template", p.Name)
			}
		}
	}, 6*waitFor, tick)
	after := getRC(t, rc)
	for i, sh := range after.Status.Shards {
		assert.Equal(t, before.Status.Shards[i].Replicas[0], sh.Primary, "shard %d's replica took over", i)
		assert.Equal(t, []string{before.Status.Shards[i].Primary}, sh.Replicas, "shard %d's old primary is its replica", i)
	}

	// And every acknowledged write and the 500 keys read back; the writer's errors are bounded
	require.Eventually(t, func() bool { return w.Acked() > 200 }, waitFor, tick)
	assertNothingLost(t, w, clusterClient(t, node, after, password), 500)
}
