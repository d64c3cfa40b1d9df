//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/redistest"
)

// movedSlots are the slots the slot-move scenario moves: shard 2's last two, which a hand
// moved to shard 0 before it starts.
var movedSlots = []int{redis.SlotCount - 2, redis.SlotCount - 1}

// keysPerMovedSlot is how many keys each moved slot holds: three MIGRATE batches each.
const keysPerMovedSlot = 250

// slotMoveScenario is a slot move in cluster mode, crashed at each of its steps: given 3
// shards of 2 nodes where shard 0 serves two slots of shard 2's share (moved there by hand,
// each holding keys), the operator moves them back (IMPORTING, MIGRATING, MIGRATE, SETSLOT
// NODE on each primary); the two slots are what a scale-out or scale-in moves thousands of,
// through the same steps.
func slotMoveScenario(ready func(*testing.T, *run)) scenario {
	return scenario{
		name:    "slot move",
		cluster: true,
		given: func(t *testing.T, r *run) {
			r.rc.Spec.Replicas = 2
			r.rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
			ready(t, r)
			r.moveByHand(t, movedSlots, 2, 0)
			r.writeIntoSlots(t, movedSlots, keysPerMovedSlot)
		},
		when: func(t *testing.T, r *run, w *writer) { waitForWriterAcks(t, w) },
		done: func(r *run) error {
			rc, err := r.get()
			if err != nil {
				return err
			}
			if len(rc.Status.Shards) != 3 || !slices.Contains(rc.Status.Shards[2].Slots, fmt.Sprintf("%d-%d", shards.SlotsOf(2, 3).Start, redis.SlotCount-1)) {
				return fmt.Errorf("shard 2 does not serve its share again: %+v", rc.Status.Shards)
			}
			// The nodes too: the status above is also what the operator of given() wrote before
			// the slots were moved by hand, and a fresh operator slow to write anything (2s: CI
			// under load) would otherwise be taken for one that converged (failed CI at crash
			// points 13, 15 and 28: the slots left open, the fresh operator not done yet).
			return r.movedBack(context.Background())
		},
	}
}

// movedBack says whether every node sees the moved slots served by shard 2's primary, and no
// node has a slot open.
func (r *run) movedBack(ctx context.Context) error {
	pods, views, err := r.clusterViews(ctx)
	if err != nil {
		return err
	}
	shardOfID := map[string]int{}
	for i, nodes := range views {
		for _, n := range nodes {
			if !n.Myself() {
				continue
			}
			if len(n.Importing) > 0 || len(n.Migrating) > 0 {
				return fmt.Errorf("%s has slots open: importing %v, migrating %v", pods[i].Name, n.Importing, n.Migrating)
			}
			shardOfID[n.ID], _ = resources.ShardOf(pods[i].Labels)
		}
	}
	for i, nodes := range views {
		for _, slot := range movedSlots {
			owner := ""
			for _, n := range nodes {
				if n.Serves(slot) {
					owner = n.ID
				}
			}
			if shard, ok := shardOfID[owner]; !ok || shard != 2 {
				return fmt.Errorf("%s sees slot %d served by %q, not by shard 2", pods[i].Name, slot, owner)
			}
		}
	}
	return nil
}

// clusterViews are the pods and each one's CLUSTER NODES.
func (r *run) clusterViews(ctx context.Context) ([]corev1.Pod, [][]redis.ClusterNode, error) {
	pods, err := r.pods()
	if err != nil {
		return nil, nil, err
	}
	views := make([][]redis.ClusterNode, len(pods))
	for i, p := range pods {
		admin, err := r.redis(ctx, p.Status.PodIP)
		if err != nil {
			return nil, nil, err
		}
		raw, err := admin.ClusterNodes(ctx).Result()
		_ = admin.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if views[i], err = redis.ParseClusterNodes(raw); err != nil {
			return nil, nil, err
		}
	}
	return pods, views, nil
}

// clusterAdmin is a client of one node as the default user.
func (r *run) clusterAdmin(t *testing.T, ip string) *goredis.Client {
	t.Helper()
	c, err := r.redis(context.Background(), ip)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// primaries are each shard's primary pod's IP and node id, by the status.
func (r *run) primaries(t *testing.T) (ips, ids []string) {
	t.Helper()
	rc, err := r.get()
	require.NoError(t, err)
	pods, err := r.pods()
	require.NoError(t, err)
	for _, sh := range rc.Status.Shards {
		ip := podIP(pods, sh.Primary)
		raw, err := r.clusterAdmin(t, ip).ClusterNodes(context.Background()).Result()
		require.NoError(t, err)
		nodes, err := redis.ParseClusterNodes(raw)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.Myself() {
				ids = append(ids, n.ID)
			}
		}
		ips = append(ips, ip)
	}
	return ips, ids
}

// moveByHand moves empty slots from shard from to shard to, as an administrator would with
// redis-cli, while no operator runs, and waits until every node agrees.
func (r *run) moveByHand(t *testing.T, slots []int, from, to int) {
	t.Helper()
	ctx := context.Background()
	ips, ids := r.primaries(t)
	for _, slot := range slots {
		require.NoError(t, r.clusterAdmin(t, ips[to]).Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err())
		require.NoError(t, r.clusterAdmin(t, ips[from]).Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err())
		for _, i := range []int{to, from, 3 - to - from} {
			require.NoError(t, r.clusterAdmin(t, ips[i]).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err())
		}
	}
	pods, err := r.pods()
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, p := range pods {
			raw, err := r.clusterAdmin(t, p.Status.PodIP).ClusterNodes(ctx).Result()
			require.NoError(c, err)
			nodes, err := redis.ParseClusterNodes(raw)
			require.NoError(c, err)
			for _, n := range nodes {
				if n.ID == ids[to] {
					for _, slot := range slots {
						assert.True(c, n.Serves(slot), "%s sees slot %d moved", p.Name, slot)
					}
				}
			}
		}
	}, converge, 100*time.Millisecond)
}

// writeIntoSlots writes n keys into each slot (hash tags found with CLUSTER KEYSLOT) and keeps
// them as the run's keys.
func (r *run) writeIntoSlots(t *testing.T, slots []int, n int) {
	t.Helper()
	ctx := context.Background()
	cc := r.clusterClient(t)
	defer cc.Close()
	tags := map[int]string{}
	for i := 0; len(tags) < len(slots); i++ {
		require.Less(t, i, 1_000_000, "no hash tag found for slots %v", slots)
		tag := "t" + strconv.Itoa(i)
		slot, err := cc.ClusterKeySlot(ctx, tag).Result()
		require.NoError(t, err)
		if slices.Contains(slots, int(slot)) && tags[int(slot)] == "" {
			tags[int(slot)] = tag
		}
	}
	for _, tag := range tags {
		for k := range n {
			key := fmt.Sprintf("{%s}:%d", tag, k)
			require.NoError(t, cc.Set(ctx, key, key, 0).Err())
			r.keys = append(r.keys, key)
		}
	}
}

// clusterClient is a go-redis ClusterClient seeded with every pod, logged in with the current
// password.
func (r *run) clusterClient(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	cc, err := r.newClusterClient()
	require.NoError(t, err)
	return cc
}

func (r *run) newClusterClient() (*goredis.ClusterClient, error) {
	pods, err := r.pods()
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, errors.New("no pod yet")
	}
	password, err := r.password()
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, p := range pods {
		addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(redistest.Port)))
	}
	return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Password: password, Protocol: 2,
		DisableIdentity: true, MaxRedirects: 8, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}), nil
}

// startClusterWriter writes through a cluster client, made once the cluster is reachable, which
// follows MOVED and ASK; a write Redis answered OK is acknowledged.
func (r *run) startClusterWriter() *writer {
	var mu sync.Mutex
	var cc *goredis.ClusterClient
	w := redistest.StartWriter(redistest.WriterOptions{
		Client: func(context.Context) (goredis.UniversalClient, error) {
			mu.Lock()
			defer mu.Unlock()
			if cc == nil {
				c, err := r.newClusterClient()
				if err != nil {
					return nil, err
				}
				cc = c
			}
			return cc, nil
		},
		Every: 20 * time.Millisecond, Prefix: "key-",
	})
	return &writer{Writer: w, closeClient: func() {
		mu.Lock()
		defer mu.Unlock()
		if cc != nil {
			_ = cc.Close()
		}
	}}
}

// checkClusterInvariants checks, once the RedisCluster converged, what users of cluster mode
// rely on: no slot is left open on any node, every node says the cluster serves every slot,
// each shard's primary has its replica, the slots are spread evenly again, and no key written
// before or during the move is lost.
func (r *run) checkClusterInvariants(t *testing.T, w *writer) {
	t.Helper()
	ctx := context.Background()
	if err := r.converged(); err != nil {
		// Seen once in CI (slot move, no crash): Ready and every node agreeing, then at once
		// "slots are moving to shard 2: 2 left to move" again. With a 1s node timeout under
		// load a replica may be promoted and claim, with its higher epoch, the slots its view
		// still gave its old primary; the operator then moves them again. What users rely on is
		// that it converges again with nothing lost, which the checks below hold it to; the log
		// keeps what happened, to tell that cause from another.
		rc, _ := r.get()
		t.Logf("converged, then not: %v; shards: %+v; waiting again", err, rc.Status.Shards)
		r.logEvents(t)
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, r.converged()) }, converge, 100*time.Millisecond)
	}
	acked, tried, _ := w.Result()

	pods, err := r.pods()
	require.NoError(t, err)
	settled := assert.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, p := range pods {
			admin, err := r.redis(ctx, p.Status.PodIP)
			require.NoError(c, err)
			raw, err := admin.ClusterNodes(ctx).Result()
			info := admin.ClusterInfo(ctx).Val()
			_ = admin.Close()
			require.NoError(c, err)
			assert.Contains(c, info, "cluster_state:ok", p.Name)
			nodes, err := redis.ParseClusterNodes(raw)
			require.NoError(c, err)
			for _, n := range nodes {
				assert.Empty(c, n.Importing, "%s: no slot left importing", p.Name)
				assert.Empty(c, n.Migrating, "%s: no slot left migrating", p.Name)
			}
		}
	}, 20*time.Second, 200*time.Millisecond)
	if !settled {
		r.explainOpenSlots(t, pods)
		t.FailNow()
	}

	rc, err := r.get()
	require.NoError(t, err)
	require.Len(t, rc.Status.Shards, 3)
	for i, sh := range rc.Status.Shards {
		assert.Len(t, sh.Replicas, 1, "shard %d has its replica", i)
		want := shards.SlotsOf(i, 3)
		assert.Equal(t, []string{fmt.Sprintf("%d-%d", want.Start, want.End)}, sh.Slots, "shard %d serves its share", i)
	}

	require.NotEmpty(t, acked, "the writer had writes acknowledged (%d tried)", tried)
	cc := r.clusterClient(t)
	defer cc.Close()
	var lost []string
	for _, key := range acked {
		if n, err := cc.Exists(ctx, key).Result(); err != nil || n != 1 {
			lost = append(lost, key)
		}
	}
	for _, key := range r.keys {
		if v, err := cc.Get(ctx, key).Result(); err != nil || v != key {
			lost = append(lost, key)
		}
	}
	assert.Empty(t, lost, "keys lost, of %d acknowledged and %d written before", len(acked), len(r.keys))
	if len(lost) > 0 {
		t.Logf("lost: %s", strings.Join(lost[:min(len(lost), 10)], ", "))
	}
}

// explainOpenSlots says, when a node is left with a slot open or the cluster not ok, what each
// pod sees of itself and what the operator said (its Events): the summary gets the open slots,
// since CI cuts the middle of the log.
func (r *run) explainOpenSlots(t *testing.T, pods []corev1.Pod) {
	ctx := context.Background()
	var open []string
	for _, p := range pods {
		admin, err := r.redis(ctx, p.Status.PodIP)
		if err != nil {
			t.Logf("%s: %v", p.Name, err)
			continue
		}
		raw := admin.ClusterNodes(ctx).Val()
		role := admin.Do(ctx, "ROLE").String()
		_ = admin.Close()
		t.Logf("%s (%s) sees:\n%s", p.Name, role, raw)
		nodes, _ := redis.ParseClusterNodes(raw)
		for _, n := range nodes {
			if n.Myself() && (len(n.Importing) > 0 || len(n.Migrating) > 0) {
				open = append(open, fmt.Sprintf("%s importing %v migrating %v", p.Name, n.Importing, n.Migrating))
			}
		}
	}
	r.logEvents(t)
	if len(open) > 0 {
		r.suite.failures.Store(t.Name(), "slots left open: "+strings.Join(open, "; "))
	}
}

// logEvents logs the run's Events, by when each last happened: what the operator did.
func (r *run) logEvents(t *testing.T) {
	events := &corev1.EventList{}
	if err := r.suite.admin.List(context.Background(), events, client.InNamespace(r.ns)); err == nil {
		slices.SortFunc(events.Items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
		for _, e := range events.Items {
			t.Logf("event %s %s %s x%d: %s", e.LastTimestamp.Format(time.TimeOnly), e.Type, e.Reason, e.Count, e.Message)
		}
	}
}
