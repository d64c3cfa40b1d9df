package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/testenv"
)

// readyShardedSource creates the RedisCluster "sharded" in cluster mode, 3 shards of 2 nodes,
// waits until it is Ready, and returns it with a cluster client.
func (e *backupEnv) readyShardedSource(t *testing.T) (*cachev1.RedisCluster, *goredis.ClusterClient) {
	t.Helper()
	rc := testenv.RedisCluster(e.ns, "sharded", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	rc = eventuallyReadyWithin(t, rc, 2*waitFor)
	return rc, clusterClient(t, e.node, rc, secretValue(t, e.ns, "sharded-auth", "password"))
}

// writeShardedKeys writes <prefix>0..<prefix><n-1> (value i) through cc, every
// expiringEvery-th expiring in an hour (none when 0), and waits until every shard's replica
// acknowledged them (WAIT), so that a failover later keeps them.
func writeShardedKeys(t *testing.T, cc *goredis.ClusterClient, prefix string, n, expiringEvery int) {
	t.Helper()
	ctx := context.Background()
	pipe := cc.Pipeline()
	for i := range n {
		ttl := time.Duration(0)
		if expiringEvery > 0 && i%expiringEvery == 0 {
			ttl = time.Hour
		}
		pipe.Set(ctx, prefix+strconv.Itoa(i), i, ttl)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		if acked := m.Do(ctx, "WAIT", 1, 5000).Val(); acked != int64(1) {
			return fmt.Errorf("%s: %v replicas acknowledged", m.Options().Addr, acked)
		}
		return nil
	}))
}

// assertRestoredShardedKeys checks that a cluster restored from a backup of writeShardedKeys(t,
// cc, "key:", n, 10) reads back exactly those keys: every one with its value, key:10 expiring
// within the hour, key:11 never, and none of the after:0..2 written after the backup.
func assertRestoredShardedKeys(t *testing.T, rcc *goredis.ClusterClient, n int) {
	t.Helper()
	ctx := context.Background()
	var lost []string
	for i := range n {
		k := fmt.Sprintf("key:%d", i)
		if v, err := rcc.Get(ctx, k).Result(); err != nil || v != fmt.Sprint(i) {
			lost = append(lost, k)
		}
	}
	assert.Empty(t, lost, "keys of the backup missing from the restored cluster")
	ttl := rcc.TTL(ctx, "key:10").Val()
	assert.True(t, ttl > 50*time.Minute && ttl <= time.Hour, "key:10 keeps its TTL, %s", ttl)
	assert.Equal(t, time.Duration(-1), rcc.TTL(ctx, "key:11").Val(), "key:11 never expires")
	assert.Zero(t, rcc.Exists(ctx, "after:0", "after:1", "after:2").Val(), "nothing written after the backup")
}

func TestABackupInClusterModeStoresASnapshotOfEveryShardAndRestoresIntoANewCluster(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	source, cc := e.readyShardedSource(t)

	// Given 3000 keys over 3 shards, 300 of them expiring, on every shard's replica too, in
	// shards that grew to 4 and shrank back to 3: each serves a share no longer in one range
	writeShardedKeys(t, cc, "key:", 3000, 10)
	patchSpec(t, source, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 4 })
	eventuallyShards(t, source, 4, 4*waitFor)
	patchSpec(t, source, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 3 })
	source = eventuallyShards(t, source, 3, 4*waitFor)
	require.Greater(t, len(source.Status.Shards[0].Slots)+len(source.Status.Shards[1].Slots)+len(source.Status.Shards[2].Slots), 3,
		"the slots are no longer three ranges: %+v", source.Status.Shards)
	cc = clusterClient(t, e.node, source, secretValue(t, e.ns, "sharded-auth", "password"))
	writeShardedKeys(t, cc, "key:", 3000, 10) // each shard's replica acknowledges its keys again

	// When a RedisBackup of the cluster is taken
	b := eventuallyBackup(t, e.createBackup(t, "nightly", "sharded", e.destination()), cachev1.BackupCompleted)

	// Then it holds one snapshot per shard, each taken from the shard's replica, with the slots
	// the shard served, stored whole under the backup's prefix
	assert.True(t, meta.IsStatusConditionTrue(b.Status.Conditions, cachev1.ConditionCompleted))
	assert.Equal(t, "s3://"+e.bucket+"/"+e.ns+"/sharded/nightly/", b.Status.Location)
	require.Len(t, b.Status.Shards, 3)
	var total int64
	for i, sh := range b.Status.Shards {
		assert.Equal(t, source.Status.Shards[i].Name, sh.Name)
		assert.Equal(t, source.Status.Shards[i].Replicas, []string{sh.Node}, "%s: never from the primary while a replica serves", sh.Name)
		assert.Equal(t, source.Status.Shards[i].Slots, sh.Slots, sh.Name)
		assert.Equal(t, fmt.Sprintf("s3://%s/%s/sharded/nightly/%s.rdb", e.bucket, e.ns, sh.Name), sh.Location)
		assert.True(t, strings.HasPrefix(sh.Checksum, "sha256:"), sh.Name)
		assert.Positive(t, sh.ReplicationOffset, sh.Name)
		head, err := e.s3.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(e.bucket),
			Key: aws.String(strings.TrimPrefix(sh.Location, "s3://"+e.bucket+"/"))})
		require.NoError(t, err, sh.Name)
		assert.Equal(t, sh.Size, aws.ToInt64(head.ContentLength), "%s is stored whole", sh.Name)
		total += sh.Size
	}
	assert.Equal(t, total, b.Status.Size, "the backup's size is its shards'")
	assert.Equal(t, strings.Join([]string{b.Status.Shards[0].Node, b.Status.Shards[1].Node, b.Status.Shards[2].Node}, ","), b.Status.Node)

	// When more keys are written, and a new RedisCluster of 3 shards restores the backup
	for i := range 100 {
		require.NoError(t, cc.Set(ctx, fmt.Sprintf("after:%d", i), i, 0).Err())
	}
	restored := restoringCluster(e.ns, "restored", "nightly", 2)
	restored.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	require.NoError(t, k8sClient.Create(ctx, restored))
	restored = eventuallyReadyWithin(t, restored, backupWait)

	// Then each shard's first node restored its shard's snapshot and is its primary, serving
	// the slots the backup recorded, and exactly the backup's keys read back, with their TTLs
	assert.True(t, meta.IsStatusConditionTrue(restored.Status.Conditions, cachev1.ConditionRestored))
	require.Len(t, restored.Status.Shards, 3)
	for i, sh := range restored.Status.Shards {
		assert.Equal(t, fmt.Sprintf("restored-shard%d-0", i), sh.Primary)
		assert.Equal(t, b.Status.Shards[i].Slots, sh.Slots, "shard %d serves the slots it served when backed up", i)
	}
	assertRestoredShardedKeys(t, clusterClient(t, e.node, restored, secretValue(t, e.ns, "restored-auth", "password")), 3000)
	require.Eventually(t, func() bool {
		for i := range 3 {
			if !apierrors.IsNotFound(k8sClient.Get(ctx, key(e.ns, fmt.Sprintf("restored-shard%d-restore", i)), &corev1.ConfigMap{})) {
				return false
			}
		}
		return true
	}, waitFor, tick, "what said what to restore is gone")

	// And a restore into another number of shards, or into one primary, is refused and says why
	for _, wrong := range []struct {
		name   string
		shards int32
		says   string
	}{
		{"four", 4, "RedisBackup nightly holds 3 shards and spec.cluster.shards is 4"},
		{"single", 0, "RedisBackup nightly is of a RedisCluster in cluster mode (3 shards)"},
	} {
		rc := restoringCluster(e.ns, wrong.name, "nightly", 2)
		if wrong.shards > 0 {
			rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: wrong.shards}
		}
		require.NoError(t, k8sClient.Create(ctx, rc))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cond := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionRestored)
			require.NotNil(c, cond)
			assert.Equal(c, cachev1.ReasonRestoreFailed, cond.Reason)
			assert.Contains(c, cond.Message, wrong.says)
		}, waitFor, tick, wrong.name)
		pods := &corev1.PodList{}
		require.NoError(t, k8sClient.List(ctx, pods, client.InNamespace(e.ns), client.MatchingLabels{"app.kubernetes.io/instance": wrong.name}))
		assert.Empty(t, pods.Items, "%s: no node starts", wrong.name)
	}

	// And a backup to be deleted with its RedisBackup takes its three objects with it
	doomed := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "doomed"},
		Spec: cachev1.RedisBackupSpec{Cluster: "sharded", Destination: e.destination(), DeletionPolicy: cachev1.BackupDelete}}
	require.NoError(t, k8sClient.Create(ctx, doomed))
	doomed = eventuallyBackup(t, doomed, cachev1.BackupCompleted)
	require.Len(t, doomed.Status.Shards, 3)
	require.NoError(t, k8sClient.Delete(ctx, doomed))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(doomed), &cachev1.RedisBackup{})
		assert.True(c, apierrors.IsNotFound(err), "the RedisBackup is gone")
	}, waitFor, tick)
	out, err := e.s3.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket), Prefix: aws.String(e.ns + "/sharded/")})
	require.NoError(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	assert.ElementsMatch(t, []string{
		e.ns + "/sharded/nightly/sharded-shard0.rdb", e.ns + "/sharded/nightly/sharded-shard1.rdb", e.ns + "/sharded/nightly/sharded-shard2.rdb",
	}, keys, "the kept backup's objects, and none of the deleted one's")
}

func TestAScheduleInClusterModeTakesBackupsOfEveryShard(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)

	// Given a RedisCluster in cluster mode with a schedule of every minute (the API's shortest)
	rc := testenv.RedisCluster(e.ns, "sharded", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	rc.Spec.Backup = &cachev1.BackupScheduleSpec{Schedule: "* * * * *", Destination: e.destination()}
	require.NoError(t, k8sClient.Create(ctx, rc))
	eventuallyReadyWithin(t, rc, 2*waitFor)

	// Then within the minute a scheduled RedisBackup holds a snapshot of each of its shards,
	// and the status says when the schedule last took one
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &cachev1.RedisBackupList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(e.ns)))
		require.NotEmpty(c, list.Items)
		b := list.Items[0]
		assert.Equal(c, cachev1.BackupCompleted, b.Status.Phase, "%s: %+v", b.Name, b.Status.Conditions)
		assert.Len(c, b.Status.Shards, 3)
	}, 90*time.Second, tick)
	assert.NotNil(t, getRC(t, rc).Status.Backup.LastScheduleTime)
}

func TestABackupInClusterModeOnAVolumeRestoresEveryShardAndGoesWithItsRedisBackup(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	// Given a PersistentVolumeClaim for backups (the local node gives each claim a directory),
	// and 3 shards of 2 nodes holding 3000 keys, 300 of them expiring
	claimDir := e.backupClaim(t)
	source, cc := e.readyShardedSource(t)
	writeShardedKeys(t, cc, "key:", 3000, 10)

	// When a RedisBackup of it to the claim is taken, with deletionPolicy Delete
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "weekly"},
		Spec: cachev1.RedisBackupSpec{Cluster: "sharded", DeletionPolicy: cachev1.BackupDelete,
			Destination: cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups", Prefix: "redis"}}}}
	require.NoError(t, k8sClient.Create(ctx, b))
	b = eventuallyBackup(t, b, cachev1.BackupCompleted)
	for i := range 3 {
		require.NoError(t, cc.Set(ctx, fmt.Sprintf("after:%d", i), i, 0).Err())
	}

	// Then a pod per shard wrote the shard's snapshot, from its replica, as a file of the claim
	// whose size and checksum the backup records with the shard's slots; the pods are gone
	assert.Equal(t, "pvc://backups/redis/"+e.ns+"/sharded/weekly/", b.Status.Location)
	require.Len(t, b.Status.Shards, 3)
	var files []string
	var total int64
	for i, sh := range b.Status.Shards {
		assert.Equal(t, source.Status.Shards[i].Name, sh.Name)
		assert.Equal(t, source.Status.Shards[i].Replicas, []string{sh.Node}, "%s: never from the primary while a replica serves", sh.Name)
		assert.Equal(t, source.Status.Shards[i].Slots, sh.Slots, sh.Name)
		assert.Equal(t, fmt.Sprintf("pvc://backups/redis/%s/sharded/weekly/%s.rdb", e.ns, sh.Name), sh.Location)
		file := filepath.Join(claimDir, "redis", e.ns, "sharded", "weekly", sh.Name+".rdb")
		info, err := os.Stat(file)
		require.NoError(t, err, sh.Name)
		assert.Equal(t, sh.Size, info.Size(), "%s is stored whole", sh.Name)
		assert.True(t, strings.HasPrefix(sh.Checksum, "sha256:"), sh.Name)
		assert.Positive(t, sh.ReplicationOffset, sh.Name)
		files = append(files, file)
		total += sh.Size
	}
	assert.Equal(t, total, b.Status.Size)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods := &corev1.PodList{}
		require.NoError(c, k8sClient.List(ctx, pods, client.InNamespace(e.ns), client.MatchingLabels{"app.kubernetes.io/component": "backup"}))
		assert.Empty(c, pods.Items, "the backup's pods are deleted once their outcome is recorded")
	}, waitFor, tick)

	// When a new, persistent RedisCluster of 3 shards restores it
	restored := restoringCluster(e.ns, "restored", "weekly", 2)
	restored.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	restored.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	require.NoError(t, k8sClient.Create(ctx, restored))
	restored = eventuallyReadyWithin(t, restored, 2*backupWait)

	// Then each shard's first node, its claim filled by a pod of its own, is its primary serving
	// the slots the backup recorded, and exactly the backup's keys read back with their TTLs;
	// the nodes never mount the backup's claim, and the restore pods are gone
	assert.True(t, meta.IsStatusConditionTrue(restored.Status.Conditions, cachev1.ConditionRestored))
	require.Len(t, restored.Status.Shards, 3)
	for i, sh := range restored.Status.Shards {
		assert.Equal(t, fmt.Sprintf("restored-shard%d-0", i), sh.Primary)
		assert.Equal(t, b.Status.Shards[i].Slots, sh.Slots, "shard %d serves the slots it served when backed up", i)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, k8sClient.Get(ctx, key(e.ns, fmt.Sprintf("restored-shard%d", i)), sts))
		for _, v := range sts.Spec.Template.Spec.Volumes {
			assert.Nil(t, v.PersistentVolumeClaim, "shard %d's nodes do not mount the backup's claim: %s", i, v.Name)
		}
	}
	assertRestoredShardedKeys(t, clusterClient(t, e.node, restored, secretValue(t, e.ns, "restored-auth", "password")), 3000)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods := &corev1.PodList{}
		require.NoError(c, k8sClient.List(ctx, pods, client.InNamespace(e.ns), client.MatchingLabels{"app.kubernetes.io/component": "restore"}))
		assert.Empty(c, pods.Items, "the restore pods are deleted once the restore is done")
	}, waitFor, tick)

	// When the RedisBackup is deleted, every shard's file goes with it
	require.NoError(t, k8sClient.Delete(ctx, b))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), &cachev1.RedisBackup{}))
	}, backupWait, tick)
	for _, file := range files {
		_, err := os.Stat(file)
		assert.ErrorIs(t, err, os.ErrNotExist, "deletionPolicy Delete removes %s from the claim", filepath.Base(file))
	}
}
