package controllers_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/test/s3server"
	"github.com/org/redis-operator/test/testenv"
)

// operatorImage stands for the operator's image: the local node runs the operator's binary,
// built from this tree, for it (the restore init container).
const operatorImage = "example.com/redis-operator:test"

// backupWait bounds a backup or a restore of a small dataset, with time for the S3 server.
const backupWait = 60 * time.Second

// backupEnv is a namespace with the operator, a local node that runs the operator's binary for
// its image, and a real S3 server (the Versity S3 Gateway) with a bucket and a credentials Secret.
type backupEnv struct {
	ns, bucket string
	node       *testenv.LocalNode
	s3         *s3server.Server
}

// backupShared is what the backup tests share, made once: the operator's binary, and an S3
// server (a test that stops its server has one of its own). TestMain removes them.
var backupShared struct {
	once    sync.Once
	dir     string
	manager string
	s3      *s3server.Server
	err     error
}

func sharedBackupParts(t *testing.T) (string, *s3server.Server) {
	t.Helper()
	backupShared.once.Do(func() {
		s := &backupShared
		if s.dir, s.err = os.MkdirTemp("", "backup-tests-"); s.err != nil {
			return
		}
		s.manager = filepath.Join(s.dir, "manager")
		if out, err := exec.Command("go", "build", "-o", s.manager, "github.com/org/redis-operator/cmd").CombinedOutput(); err != nil {
			s.err = fmt.Errorf("building the operator: %w: %s", err, out)
			return
		}
		s3dir := filepath.Join(s.dir, "s3")
		if s.err = os.MkdirAll(s3dir, 0o755); s.err == nil {
			s.s3, s.err = s3server.StartIn(s3dir)
		}
	})
	require.NoError(t, backupShared.err)
	return backupShared.manager, backupShared.s3
}

// stopBackupShared ends what the backup tests shared.
func stopBackupShared() {
	if backupShared.s3 != nil {
		backupShared.s3.Stop()
	}
	if backupShared.dir != "" {
		_ = os.RemoveAll(backupShared.dir)
	}
}

// newBackupEnv runs alongside the other backup tests: they wait on Redis, S3 and the API
// server more than they use the CPU. ownStore gives the test an S3 server of its own.
func newBackupEnv(t *testing.T, ownStore bool) *backupEnv {
	t.Helper()
	t.Parallel()
	manager, store := sharedBackupParts(t)
	if ownStore {
		store = s3server.Start(t)
	}
	e := &backupEnv{ns: newNamespace(t), s3: store}
	e.bucket = e.ns
	e.s3.CreateBucket(t, e.bucket)
	require.NoError(t, k8sClient.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "s3-credentials"}, Data: s3server.CredentialsData()}))
	startOperator(t, adminCfg, e.ns, func(o *operator.Options) { o.OperatorImage = operatorImage })
	e.node = runLocalNodeWith(t, e.ns, func(n *testenv.LocalNode) { n.Binaries = map[string]string{operatorImage: manager} })
	return e
}

// readySource creates the RedisCluster "source" of replicas nodes, waits until it is Ready, and
// returns it with a client of its primary.
func (e *backupEnv) readySource(t *testing.T, replicas int32) (*cachev1.RedisCluster, *goredis.Client) {
	t.Helper()
	source := testenv.RedisCluster(e.ns, "source", replicas)
	require.NoError(t, k8sClient.Create(context.Background(), source))
	source = eventuallyReadyWithin(t, source, waitFor)
	return source, redisClient(t, e.node, source.Status.Primary, secretValue(t, e.ns, "source-auth", "password"))
}

func (e *backupEnv) destination() cachev1.BackupDestination {
	return e.s3.Destination(e.bucket, "s3-credentials")
}

func (e *backupEnv) createBackup(t *testing.T, name, cluster string, dest cachev1.BackupDestination) *cachev1.RedisBackup {
	t.Helper()
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: cachev1.RedisBackupSpec{Cluster: cluster, Destination: dest}}
	require.NoError(t, k8sClient.Create(context.Background(), b))
	return b
}

// eventuallyBackup waits until the RedisBackup reaches phase, and returns it.
func eventuallyBackup(t *testing.T, b *cachev1.RedisBackup, phase cachev1.BackupPhase) *cachev1.RedisBackup {
	t.Helper()
	got := &cachev1.RedisBackup{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(b), got))
		assert.Equal(c, phase, got.Status.Phase, "conditions: %+v", got.Status.Conditions)
	}, backupWait, tick)
	return got
}

// writeKeys writes key:0..key:n-1 (value i), every expiringEvery-th expiring in an hour, and
// waits until replicas replicas acknowledged them.
func writeKeys(t *testing.T, primary *goredis.Client, n, expiringEvery, replicas int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		ttl := time.Duration(0)
		if i%expiringEvery == 0 {
			ttl = time.Hour
		}
		require.NoError(t, primary.Set(ctx, fmt.Sprintf("key:%d", i), i, ttl).Err())
	}
	require.Equal(t, int64(replicas), primary.Do(ctx, "WAIT", replicas, 5000).Val())
}

func restoringCluster(ns, name, backup string, replicas int32) *cachev1.RedisCluster {
	rc := testenv.RedisCluster(ns, name, replicas)
	rc.Spec.Restore = &cachev1.RestoreSpec{FromBackup: backup}
	return rc
}

func TestABackupRestoresExactlyItsKeysIntoANewCluster(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	source, primary := e.readySource(t, 3)

	// Given 500 keys, 50 of them expiring, acknowledged by both replicas
	writeKeys(t, primary, 500, 10, 2)

	// When a RedisBackup is taken, and more keys are written after it
	b := eventuallyBackup(t, e.createBackup(t, "nightly", "source", e.destination()), cachev1.BackupCompleted)
	for i := range 100 {
		require.NoError(t, primary.Set(ctx, fmt.Sprintf("after:%d", i), i, 0).Err())
	}

	// Then it was taken from a replica, and says where it is and what it holds
	assert.NotEqual(t, source.Status.Primary, b.Status.Node, "never from the primary while a replica serves")
	assert.Equal(t, "s3://"+e.bucket+"/"+e.ns+"/source/nightly.rdb", b.Status.Location)
	assert.Positive(t, b.Status.Size)
	assert.Positive(t, b.Status.ReplicationOffset)
	assert.True(t, strings.HasPrefix(b.Status.Checksum, "sha256:"))
	assert.True(t, meta.IsStatusConditionTrue(b.Status.Conditions, cachev1.ConditionCompleted))

	// When a new, persistent RedisCluster restores it
	restored := restoringCluster(e.ns, "restored", "nightly", 2)
	restored.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	require.NoError(t, k8sClient.Create(ctx, restored))
	restored = eventuallyReadyWithin(t, restored, backupWait)

	// Then, as soon as it is Ready, exactly the backup's keys are on its primary and its replica,
	// with their TTLs, and none written after the backup
	assert.Equal(t, "restored-0", restored.Status.Primary, "the node holding the restored data is the first primary")
	assert.True(t, meta.IsStatusConditionTrue(restored.Status.Conditions, cachev1.ConditionRestored))
	restoredPassword := secretValue(t, e.ns, "restored-auth", "password")
	for _, pod := range []string{"restored-0", "restored-1"} {
		c := redisClient(t, e.node, pod, restoredPassword)
		assert.Equal(t, int64(500), c.DBSize(ctx).Val(), pod)
		assert.Equal(t, "499", c.Get(ctx, "key:499").Val(), pod)
		assert.Zero(t, c.Exists(ctx, "after:0").Val(), pod)
		ttl := c.TTL(ctx, "key:10").Val()
		assert.True(t, ttl > 50*time.Minute && ttl <= time.Hour, "%s: key:10 keeps its TTL, %s", pod, ttl)
		assert.Equal(t, time.Duration(-1), c.TTL(ctx, "key:11").Val(), "%s: key:11 never expires", pod)
	}
	// And the restore is done once: what said what to restore is gone, the RedisBackup may go
	require.Eventually(t, func() bool {
		err := k8sClient.Get(ctx, key(e.ns, "restored-restore"), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err)
	}, waitFor, tick)
	got := getRC(t, restored)
	require.NotNil(t, got.Status.Restore)
	assert.NotNil(t, got.Status.Restore.CompletedAt)
	assert.Equal(t, b.Status.Checksum, got.Status.Restore.Checksum)
	require.NoError(t, k8sClient.Delete(ctx, b))
	assert.Contains(t, eventReasons(t, got), cachev1.EventRestored)

	// And the source is untouched: the backup took nothing from it
	assert.Equal(t, int64(600), primary.DBSize(ctx).Val())
}

func TestABackupTakenWhileWritingIsOnePointInTime(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	source, primary := e.readySource(t, 2)

	// Given a writer that sets seq:<i> and last=<i> in one transaction, as fast as it can
	var acked atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := primary.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.Set(ctx, fmt.Sprintf("seq:%d", i), i, 0)
				p.Set(ctx, "last", i, 0)
				return nil
			})
			if err != nil {
				return
			}
			acked.Store(i + 1)
		}
	}()
	require.Eventually(t, func() bool { return acked.Load() > 2000 }, waitFor, tick)

	// When a backup is taken while it writes
	ackedBefore := acked.Load()
	b := eventuallyBackup(t, e.createBackup(t, "busy", "source", e.destination()), cachev1.BackupCompleted)
	var replication []string
	for _, pod := range []string{"source-0", "source-1"} {
		replication = append(replication, pod+": "+redisClient(t, e.node, pod, secretValue(t, e.ns, "source-auth", "password")).Info(ctx, "replication").Val())
	}
	close(stop)
	<-done
	written := acked.Load()
	primaryOffset, err := primary.Info(ctx, "replication").Result()
	require.NoError(t, err)

	// Then the restored data is one moment of the writer's: seq:0..last, no gap, nothing after
	restored := restoringCluster(e.ns, "restored", "busy", 1)
	require.NoError(t, k8sClient.Create(ctx, restored))
	eventuallyReadyWithin(t, restored, backupWait)
	c := redisClient(t, e.node, "restored-0", secretValue(t, e.ns, "restored-auth", "password"))
	last, err := c.Get(ctx, "last").Int64()
	require.NoError(t, err, "restored: %d keys, backup: %+v, source: %+v, nodes then: %s", c.DBSize(ctx).Val(), b.Status, getRC(t, source).Status, replication)
	assert.GreaterOrEqual(t, last+1, ackedBefore, "every write acknowledged before the backup started is in it")
	assert.Less(t, last, written)
	assert.Equal(t, last+2, c.DBSize(ctx).Val(), "seq:0..seq:last and last, nothing else")
	for i := int64(0); i <= last; i += 500 {
		keys := []string{}
		for k := i; k <= min(i+499, last); k++ {
			keys = append(keys, fmt.Sprintf("seq:%d", k))
		}
		values, err := c.MGet(ctx, keys...).Result()
		require.NoError(t, err)
		for k, v := range values {
			require.NotNil(t, v, "%s is missing: the snapshot has a gap", keys[k])
		}
	}
	// And its recorded offset is a position of the primary's stream no later than the end
	assert.Positive(t, b.Status.ReplicationOffset)
	assert.Contains(t, primaryOffset, "master_replid:"+b.Status.ReplicationID)
	t.Logf("writes acknowledged %d, in the backup %d, at offset %d", written, last+1, b.Status.ReplicationOffset)
}

func TestBackupFailuresAreExplainedAndStoreNothing(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, true) // it stops its store
	e.readySource(t, 2)
	require.NoError(t, k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "wrong-credentials"},
		Data: map[string][]byte{cachev1.S3AccessKeyIDKey: []byte(s3server.AccessKeyID), cachev1.S3SecretAccessKeyKey: []byte("wrong")}}))

	failedWith := func(t *testing.T, name string, dest cachev1.BackupDestination, reason, words string) {
		t.Helper()
		b := eventuallyBackup(t, e.createBackup(t, name, "source", dest), cachev1.BackupFailed)
		c := meta.FindStatusCondition(b.Status.Conditions, cachev1.ConditionCompleted)
		require.NotNil(t, c)
		assert.Equal(t, reason, c.Reason)
		assert.Contains(t, c.Message, words)
		assert.Empty(t, b.Status.Checksum, "a failed backup records no checksum: it cannot be restored")
	}
	wrong := e.destination()
	wrong.S3.CredentialsSecret = "wrong-credentials"
	failedWith(t, "wrong-credentials", wrong, cachev1.ReasonStorageFailed, "refused the credentials")
	noBucket := e.destination()
	noBucket.S3.Bucket = "no-such-bucket"
	failedWith(t, "no-bucket", noBucket, cachev1.ReasonStorageFailed, "bucket does not exist")

	// A missing Secret waits (it may be created next), saying so
	missing := e.destination()
	missing.S3.CredentialsSecret = "not-yet"
	b := e.createBackup(t, "no-secret", "source", missing)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &cachev1.RedisBackup{}
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(b), got))
		cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionCompleted)
		require.NotNil(c, cond)
		assert.Equal(c, cachev1.ReasonCredentialsNotFound, cond.Reason)
		assert.Equal(c, cachev1.BackupPending, got.Status.Phase)
	}, waitFor, tick)

	// The store down: the backup fails, and once it is back no object exists for it
	e.s3.Stop()
	failedWith(t, "store-down", e.destination(), cachev1.ReasonStorageFailed, "object storage")
	require.NoError(t, e.s3.Restart())
	_, err := e.s3.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(e.ns + "/source/store-down.rdb")})
	require.Error(t, err, "no object was stored")
}

func TestARestoreThatCannotBeDoneStartsNoRedis(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	source, _ := e.readySource(t, 1)
	b := eventuallyBackup(t, e.createBackup(t, "b1", "source", e.destination()), cachev1.BackupCompleted)

	restoredCondition := func(t *testing.T, rc *cachev1.RedisCluster, reason, words string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := getRC(c, rc)
			cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionRestored)
			require.NotNil(c, cond)
			assert.Equal(c, reason, cond.Reason)
			assert.Contains(c, cond.Message, words)
			assert.False(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady))
		}, backupWait, tick)
	}

	t.Run("a backup that does not exist yet: no pod is created", func(t *testing.T) {
		rc := restoringCluster(e.ns, "waits", "not-yet", 1)
		require.NoError(t, k8sClient.Create(ctx, rc))
		restoredCondition(t, rc, cachev1.ReasonBackupNotReady, "RedisBackup not-yet does not exist")
		err := k8sClient.Get(ctx, key(e.ns, "waits"), &appsv1.StatefulSet{})
		assert.True(t, apierrors.IsNotFound(err), "no StatefulSet while the backup is not there: %v", err)
		// A wait, not a failure: Progressing says for what, nothing is Degraded, no Warning.
		got := getRC(t, rc)
		progressing := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionProgressing)
		require.NotNil(t, progressing)
		assert.Equal(t, metav1.ConditionTrue, progressing.Status)
		assert.Equal(t, cachev1.ReasonBackupNotReady, progressing.Reason)
		assert.False(t, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionDegraded))
		assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
		for _, ev := range eventsFor(t, got) {
			assert.NotEqual(t, corev1.EventTypeWarning, ev.Type, "%s: %s", ev.Reason, ev.Note)
		}
	})

	t.Run("a corrupt object: the checksum stops it before Redis starts", func(t *testing.T) {
		keyName := strings.TrimPrefix(b.Status.Location, "s3://"+e.bucket+"/")
		_, err := e.s3.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(keyName),
			Body: strings.NewReader("REDIS0010 not the snapshot that was stored")})
		require.NoError(t, err)
		rc := restoringCluster(e.ns, "corrupt", "b1", 1)
		require.NoError(t, k8sClient.Create(ctx, rc))
		restoredCondition(t, rc, cachev1.ReasonRestoreFailed, "checksum mismatch")
		assert.Nil(t, e.node.Server("corrupt-0"), "no Redis started on the corrupt data")
	})

	t.Run("a volume that already holds data is never overwritten", func(t *testing.T) {
		claim := filepath.Join(e.node.Dir, "claims", e.ns, "data-full-0")
		require.NoError(t, os.MkdirAll(claim, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(claim, "dump.rdb"), []byte("REDIS0010 someone's data"), 0o600))
		rc := restoringCluster(e.ns, "full", "b1", 1)
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
		require.NoError(t, k8sClient.Create(ctx, rc))
		restoredCondition(t, rc, cachev1.ReasonRestoreFailed, "already holds data")
		data, err := os.ReadFile(filepath.Join(claim, "dump.rdb"))
		require.NoError(t, err)
		assert.Equal(t, "REDIS0010 someone's data", string(data))
	})

	t.Run("a running cluster cannot be given a restore", func(t *testing.T) {
		got := getRC(t, source)
		got.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "b1"}
		err := k8sClient.Update(ctx, got)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.restore is set only when a RedisCluster is created")
	})
}

func TestScheduledBackupsAreTakenAndRetentionDeletesTheOldest(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	rc := testenv.RedisCluster(e.ns, "sessions", 2)
	// Every minute: the API refuses a schedule more frequent than that (issue 22).
	rc.Spec.Backup = &cachev1.BackupScheduleSpec{Schedule: "* * * * *", Destination: e.destination(),
		Retention: &cachev1.BackupRetention{Count: ptr.To[int32](2)}}
	require.NoError(t, k8sClient.Create(ctx, rc))
	eventuallyReadyWithin(t, rc, waitFor)
	// Three backups the schedule took earlier, labelled as it labels its own, so that the
	// test waits for one scheduled backup rather than four.
	for i := range 3 {
		earlier := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: fmt.Sprintf("sessions-earlier-%d", i),
			Labels: map[string]string{redisbackup.LabelBackupCluster: "sessions", redisbackup.LabelBackupSchedule: "true"}},
			Spec: cachev1.RedisBackupSpec{Cluster: "sessions", Destination: e.destination(), DeletionPolicy: cachev1.BackupDelete}}
		require.NoError(t, k8sClient.Create(ctx, earlier))
		time.Sleep(1100 * time.Millisecond) // creation timestamps are in seconds: retention orders by them
	}

	// Once the schedule took one of its own (within the minute), the two oldest are deleted,
	// two remain, and only their objects are stored
	scheduled := func(c require.TestingT) []cachev1.RedisBackup {
		list := &cachev1.RedisBackupList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(e.ns), client.MatchingLabels{redisbackup.LabelBackupCluster: "sessions"}))
		return list.Items
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		phases := map[string]cachev1.BackupPhase{}
		var why []string
		for _, b := range scheduled(c) {
			if b.DeletionTimestamp.IsZero() {
				phases[b.Name] = b.Status.Phase
				if b.Status.Phase == cachev1.BackupFailed {
					why = append(why, fmt.Sprintf("%s: %v", b.Name, b.Status.Conditions))
				}
			}
		}
		var own []string
		for name, phase := range phases {
			if !strings.HasPrefix(name, "sessions-earlier-") && phase == cachev1.BackupCompleted {
				own = append(own, name)
			}
		}
		assert.NotEmpty(c, own, "a backup the schedule took, completed: %v %v", phases, why)
		assert.NotContains(c, phases, "sessions-earlier-0", "pruned")
		assert.NotContains(c, phases, "sessions-earlier-1", "pruned")
	}, 2*time.Minute+backupWait, tick)
	require.NoError(t, k8sClient.Patch(ctx, getRC(t, rc), client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"backup":{"schedule":"0 0 1 1 *"}}}`))))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var completed []string
		for _, b := range scheduled(c) {
			assert.Equal(c, cachev1.BackupDelete, b.Spec.DeletionPolicy)
			if b.Status.Phase == cachev1.BackupCompleted && b.DeletionTimestamp.IsZero() {
				completed = append(completed, e.ns+"/sessions/"+b.Name+".rdb")
			}
		}
		assert.Len(c, completed, 2)
		out, err := e.s3.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket), Prefix: aws.String(e.ns + "/sessions/")})
		require.NoError(c, err)
		var stored []string
		for _, o := range out.Contents {
			stored = append(stored, *o.Key)
		}
		assert.ElementsMatch(c, completed, stored, "the pruned backups' objects are deleted with them")
	}, backupWait, tick)
}

// backupClaim creates the PersistentVolumeClaim "backups" and returns its directory on the local
// node, which gives each claim one.
func (e *backupEnv) backupClaim(t *testing.T) string {
	t.Helper()
	require.NoError(t, k8sClient.Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "backups"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}))
	return filepath.Join(e.node.Dir, "claims", e.ns, "backups")
}

func TestABackupOnAVolumeRestoresIntoANewClusterAndIsDeletedWithItsRedisBackup(t *testing.T) {
	ctx := context.Background()
	e := newBackupEnv(t, false)
	// Given a PersistentVolumeClaim for backups (the local node gives each claim a directory)
	claimDir := e.backupClaim(t)
	onVolume := cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups", Prefix: "redis"}}
	source, primary := e.readySource(t, 2)
	writeKeys(t, primary, 300, 3, 1)

	// When a RedisBackup to the claim is taken, with deletionPolicy Delete
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "weekly"},
		Spec: cachev1.RedisBackupSpec{Cluster: "source", Destination: onVolume, DeletionPolicy: cachev1.BackupDelete}}
	require.NoError(t, k8sClient.Create(ctx, b))
	b = eventuallyBackup(t, b, cachev1.BackupCompleted)
	require.NoError(t, primary.Set(ctx, "after", 1, 0).Err())

	// Then a pod of the operator's image wrote it, from the replica, as a file of the claim
	// whose size and checksum the RedisBackup records; the pod is gone
	assert.NotEqual(t, source.Status.Primary, b.Status.Node, "never from the primary while a replica serves")
	assert.Equal(t, "pvc://backups/redis/"+e.ns+"/source/weekly.rdb", b.Status.Location)
	file := filepath.Join(claimDir, "redis", e.ns, "source", "weekly.rdb")
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, b.Status.Size, info.Size())
	assert.True(t, strings.HasPrefix(b.Status.Checksum, "sha256:"))
	assert.Positive(t, b.Status.ReplicationOffset)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, key(e.ns, "weekly-backup"), &corev1.Pod{}))
	}, waitFor, tick, "the backup's pod is deleted once its outcome is recorded")

	// When a new, persistent RedisCluster restores it
	restored := restoringCluster(e.ns, "restored", "weekly", 2)
	restored.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	require.NoError(t, k8sClient.Create(ctx, restored))
	restored = eventuallyReadyWithin(t, restored, backupWait)

	// Then both nodes hold exactly the backup's keys with their TTLs, and the nodes never mount
	// the backup's claim: a pod of its own filled the first node's claim, and is gone
	assert.Equal(t, "restored-0", restored.Status.Primary)
	password := secretValue(t, e.ns, "restored-auth", "password")
	for _, pod := range []string{"restored-0", "restored-1"} {
		c := redisClient(t, e.node, pod, password)
		assert.Equal(t, int64(300), c.DBSize(ctx).Val(), pod)
		assert.Zero(t, c.Exists(ctx, "after").Val(), pod)
		ttl := c.TTL(ctx, "key:3").Val()
		assert.True(t, ttl > 50*time.Minute && ttl <= time.Hour, "%s: key:3 keeps its TTL, %s", pod, ttl)
	}
	sts := &appsv1.StatefulSet{}
	require.NoError(t, k8sClient.Get(ctx, key(e.ns, "restored"), sts))
	for _, v := range sts.Spec.Template.Spec.Volumes {
		assert.Nil(t, v.PersistentVolumeClaim, "the nodes do not mount the backup's claim: %s", v.Name)
	}
	assert.Empty(t, sts.Spec.Template.Spec.InitContainers)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, key(e.ns, "restored-restore"), &corev1.Pod{}))
	}, waitFor, tick, "the restore pod is deleted once the restore is done")

	t.Run("a cluster without storage cannot restore from a volume", func(t *testing.T) {
		rc := restoringCluster(e.ns, "ephemeral", "weekly", 1)
		require.NoError(t, k8sClient.Create(ctx, rc))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cond := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionRestored)
			require.NotNil(c, cond)
			assert.Equal(c, cachev1.ReasonRestoreFailed, cond.Reason)
			assert.Contains(c, cond.Message, "set spec.storage")
		}, backupWait, tick)
		assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, key(e.ns, "ephemeral"), &appsv1.StatefulSet{})))
	})

	t.Run("a backup to a claim that does not exist waits for it", func(t *testing.T) {
		missing := e.createBackup(t, "nowhere", "source",
			cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "not-there"}})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := &cachev1.RedisBackup{}
			require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(missing), got))
			cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionCompleted)
			require.NotNil(c, cond)
			assert.Equal(c, cachev1.ReasonClaimNotFound, cond.Reason)
			assert.Equal(c, cachev1.BackupPending, got.Status.Phase)
		}, backupWait, tick)
	})

	// When the RedisBackup is deleted, its file goes with it
	require.NoError(t, k8sClient.Delete(ctx, b))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(b), &cachev1.RedisBackup{}))
	}, backupWait, tick)
	_, err = os.Stat(file)
	assert.ErrorIs(t, err, os.ErrNotExist, "deletionPolicy Delete removes the snapshot from the claim")
}

// TestAScheduleOnlyTheSchedulerRefusesIsReported: the API checks each cron field's grammar and
// range, and takes "30-10 * * * *"; the scheduler refuses the range. The RedisCluster says so
// (Degraded, BackupScheduleInvalid, naming the field) as soon as it serves, and takes no backup.
func TestAScheduleOnlyTheSchedulerRefusesIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	runLocalNode(t, ns)
	rc := testenv.RedisCluster(ns, "sessions", 1)
	rc.Spec.Backup = &cachev1.BackupScheduleSpec{Schedule: "30-10 * * * *",
		Destination: cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups"}}}
	require.NoError(t, k8sClient.Create(ctx, rc))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := getRC(c, rc)
		degraded := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, metav1.ConditionTrue, degraded.Status)
		assert.Equal(c, cachev1.ReasonBackupScheduleInvalid, degraded.Reason)
		assert.Contains(c, degraded.Message, "spec.backup.schedule")
	}, waitFor, tick)
	list := &cachev1.RedisBackupList{}
	require.NoError(t, k8sClient.List(ctx, list, client.InNamespace(ns)))
	assert.Empty(t, list.Items)
}
