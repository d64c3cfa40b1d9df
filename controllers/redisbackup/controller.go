// Package redisbackup is backups, end to end. The RedisBackup controller (Reconciler) takes
// each RedisBackup once, streaming a snapshot of a caught-up replica (of each shard in cluster
// mode) to S3 or onto a volume, and deletes what it stored when a RedisBackup with
// deletionPolicy Delete goes; where a snapshot is taken from, and how to log in there, it asks
// the RedisCluster's reconciler (SnapshotSources). The RedisCluster's own phases for backups
// are here too, as functions of a scope.Cluster: spec.backup's schedule and retention
// (Schedule) and spec.restore (RestoreSource, RestoreDone, RestoredCondition).
package redisbackup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/internal/topology"
)

// SnapshotSources say where a RedisCluster's backup is taken from, and how to log in there: the
// RedisCluster's reconciler, which observes the nodes and holds their passwords.
type SnapshotSources interface {
	SnapshotSources(cluster types.NamespacedName) ([]backup.Part, auth.Login, error)
}

// Reconciler takes each RedisBackup once: it streams the snapshot of a caught-up
// replica to the destination and records where it is, its size, checksum and replication
// offset. A backup that fails is Failed for good, with the reason; nothing it stored counts.
// Deleting a RedisBackup with deletionPolicy Delete deletes its stored snapshot first.
type Reconciler struct {
	client.Client
	// APIReader reads the credentials Secrets by name, uncached.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	Sources   SnapshotSources
	// Dial opens connections to a RedisCluster's nodes with a login, for the commands a backup
	// sends before its snapshot.
	Dial func(auth.Login) topology.Dialer
	// Snapshots take the snapshots, each over a connection of its own.
	Snapshots backup.Snapshots
	// MaxConcurrentBackups is how many backups stream at once; 2 when zero.
	MaxConcurrentBackups int
	// OperatorImage runs the pods that write and delete backups on volumes.
	OperatorImage string
}

// backupFinalizer holds a RedisBackup with deletionPolicy Delete until its snapshot is deleted.
const backupFinalizer = "cache.example.com/stored-snapshot"

// backupWait is how soon a backup that cannot start yet is looked at again.
const backupWait = 2 * time.Second

// errCredentials is a destination whose credentials Secret or keys are missing.
var errCredentials = errors.New("credentials")

// +kubebuilder:rbac:groups=cache.example.com,resources=redisbackups,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisbackups/status,verbs=patch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisbackups/finalizers,verbs=update

// Reconcile takes a RedisBackup that has not finished, in order: read it fresh, hold it with the
// finalizer (deletionPolicy Delete), take it (toStore to S3, onVolume to a claim: destination,
// source, the snapshot of each part, recorded), then end writes the status once. A RedisBackup
// being deleted deletes what it stored first.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &cachev1.RedisBackup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.deleteSnapshot(ctx, b)
	}
	if finished(b) {
		return ctrl.Result{}, nil
	}
	// The cache may not hold this reconciler's own last write yet: a backup it just finished
	// would be taken again, over the stored one. Read it fresh before anything is taken.
	if err := r.APIReader.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if finished(b) || !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if b.Spec.DeletionPolicy == cachev1.BackupDelete && !controllerutil.ContainsFinalizer(b, backupFinalizer) {
		// Before anything is stored: a RedisBackup deleted mid-upload still cleans up.
		before := b.DeepCopy()
		controllerutil.AddFinalizer(b, backupFinalizer)
		if err := r.Patch(ctx, b, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	t := &taking{b: b, written: b.DeepCopy()}
	var err error
	if b.Spec.Destination.PersistentVolumeClaim != nil {
		err = r.onVolume(ctx, t)
	} else {
		err = r.toStore(ctx, t)
	}
	result, err := r.end(ctx, t, err)
	if err == nil && t.recordedPod != nil {
		// The pod goes once the status holds its outcome: an operator that stops between the
		// two finds the pod again and records the same outcome.
		if err := r.Delete(ctx, t.recordedPod); client.IgnoreNotFound(err) != nil {
			return result, fmt.Errorf("deleting pod %s: %w", t.recordedPod.Name, err)
		}
	}
	return result, err
}

// toStore streams the snapshot (in cluster mode, each shard's) to S3.
func (r *Reconciler) toStore(ctx context.Context, t *taking) error {
	b := t.b
	store, err := r.store(ctx, b.Namespace, *b.Spec.Destination.S3)
	if errors.Is(err, errCredentials) {
		return outcome.Wait(backupWait, cachev1.ReasonCredentialsNotFound, err.Error())
	}
	if err != nil {
		return failed(fmt.Errorf("%w: %w", backup.ErrStorage, err))
	}
	src, err := r.source(ctx, b)
	if err != nil {
		return err
	}
	if src.sharded() {
		return r.toStoreByShard(ctx, t, store, src)
	}
	node := r.nodeOf(ctx, src, 0)
	key := backup.ObjectKey(b.Spec.Destination.S3.Prefix, b.Namespace, b.Spec.Cluster, b.Name)
	if err := r.announceRunning(ctx, t, node.Name, store.Location(key)); err != nil {
		return err
	}
	result, err := r.stream(ctx, node, src, store, key)
	if err != nil {
		return failed(err)
	}
	setCompleted(b, result)
	return nil
}

// stream streams node's snapshot to key.
func (r *Reconciler) stream(ctx context.Context, node topology.Observed, src snapshotSource, store *backup.Store, key string) (backup.Result, error) {
	result, err := r.Snapshots.Take(ctx, node.Addr, src.login, store, key)
	if errors.Is(err, topology.ErrNoPermission) {
		// A node started by an operator whose own user could not sync yet: give it the user
		// as this operator defines it, and try once more.
		if gerr := r.giveOperatorUser(ctx, node.Addr, src); gerr == nil {
			result, err = r.Snapshots.Take(ctx, node.Addr, src.login, store, key)
		}
	}
	return result, err
}

// toStoreByShard takes a snapshot of each shard of a RedisCluster in cluster mode, one after
// the other, each to an object of its own under the backup's prefix; the backup is Completed
// once every one is stored, Failed at the first that is not. Each shard's slots are read anew
// when its snapshot is taken, so that completeShards can tell whether slots moved meanwhile.
func (r *Reconciler) toStoreByShard(ctx context.Context, t *taking, store *backup.Store, src snapshotSource) error {
	b := t.b
	dest := b.Spec.Destination.S3
	if err := r.announceRunning(ctx, t, src.nodes(), store.Location(backup.ShardsPrefix(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name))); err != nil {
		return err
	}
	var stored []cachev1.ShardBackup
	for {
		if len(stored) > 0 {
			next, err := r.source(ctx, b)
			if w, ok := outcome.AsWaiting("", err); ok {
				// What is stored so far is recorded: deleted with the backup.
				b.Status.Shards = stored
				return failed(fmt.Errorf("%w: the cluster changed while the backup was taken (%s): take it again", backup.ErrSnapshot, w.Message))
			} else if err != nil {
				return err
			}
			src = next
		}
		if len(stored) == len(src.parts) {
			return completeShards(b, stored)
		}
		p := src.parts[len(stored)]
		node := r.nodeOf(ctx, src, len(stored))
		key := backup.ShardObjectKey(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name, p.Shard)
		res, err := r.stream(ctx, node, src, store, key)
		if err != nil {
			b.Status.Shards = stored
			return failed(fmt.Errorf("shard %s: %w", p.Shard, err))
		}
		stored = append(stored, shardBackup(p, node, store.Location(key), res))
	}
}

// shardBackup is what a backup records of the snapshot of part p, taken from node.
func shardBackup(p backup.Part, node topology.Observed, location string, res backup.Result) cachev1.ShardBackup {
	return cachev1.ShardBackup{Name: p.Shard, Slots: p.Slots, Node: node.Name, Location: location,
		Size: res.Size, Checksum: res.Checksum, ReplicationID: res.ReplicationID, ReplicationOffset: res.ReplicationOffset}
}

// completeShards records a backup in cluster mode whose every shard's snapshot is stored:
// Completed when the slots they recorded hold each slot exactly once, Failed when slots moved
// between two shards' snapshots (a key would be in two of them, or in none).
func completeShards(b *cachev1.RedisBackup, stored []cachev1.ShardBackup) error {
	b.Status.Shards = stored
	if !everySlotOnce(stored) {
		return failed(fmt.Errorf("%w: slots moved between the shards while their snapshots were taken (the snapshots do not hold every slot exactly once): take the backup again", backup.ErrSnapshot))
	}
	var total backup.Result
	for _, sh := range stored {
		total.Size += sh.Size
	}
	setCompleted(b, total)
	return nil
}

// everySlotOnce is true when the shards' recorded slots hold each of the 16384 slots exactly
// once: what a restore gives back. Each shard's slots are read when its snapshot is taken, so a
// slot that moved from a shard already taken to one taken after is in both, and one that moved
// the other way is in neither.
func everySlotOnce(stored []cachev1.ShardBackup) bool {
	slots := make([][]string, len(stored))
	for i, sh := range stored {
		slots[i] = sh.Slots
	}
	layout, err := shards.ParseLayout(slots)
	return err == nil && layout.Covers(len(stored))
}

// snapshotSource is where a backup is taken from: the node of each part (one in replication
// mode, one per shard in cluster mode), and how to log in there.
type snapshotSource struct {
	cluster *cachev1.RedisCluster
	parts   []backup.Part
	login   auth.Login
}

// sharded is true for a RedisCluster in cluster mode: a snapshot per shard.
func (s snapshotSource) sharded() bool { return len(s.parts) > 0 && s.parts[0].Shard != "" }

// nodes names every part's source, as the status says them.
func (s snapshotSource) nodes() string {
	names := make([]string, 0, len(s.parts))
	for _, p := range s.parts {
		names = append(names, p.Source.Name)
	}
	return strings.Join(names, ",")
}

// source reads where the backup's parts are taken from; it waits (BackupPending) while there
// are none yet.
func (r *Reconciler) source(ctx context.Context, b *cachev1.RedisBackup) (snapshotSource, error) {
	cluster := types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}
	src := snapshotSource{cluster: &cachev1.RedisCluster{}}
	if err := r.Get(ctx, cluster, src.cluster); apierrors.IsNotFound(err) {
		return src, outcome.Wait(backupWait, cachev1.ReasonBackupPending, fmt.Sprintf("RedisCluster %s does not exist", b.Spec.Cluster))
	} else if err != nil {
		return src, err
	}
	parts, login, err := r.Sources.SnapshotSources(cluster)
	if err != nil {
		return src, outcome.Wait(backupWait, cachev1.ReasonBackupPending, fmt.Sprintf("RedisCluster %s: %s", b.Spec.Cluster, err))
	}
	src.parts, src.login = parts, login
	return src, nil
}

// nodeOf is the node the i-th part's snapshot is taken from: its replica once that holds every
// write the primary took before now, else the primary. (A replica that has just synced gets the
// stream only after its first acknowledgement, up to a second later; one that does not within
// caughtUpWait is passed over.)
func (r *Reconciler) nodeOf(ctx context.Context, src snapshotSource, i int) topology.Observed {
	p := src.parts[i]
	if p.Source.Name == p.Primary.Name {
		return p.Source
	}
	dial := r.Dial(src.login)
	primary, rep := dial(p.Primary.Addr), dial(p.Source.Addr)
	defer primary.Close()
	defer rep.Close()
	if err := topology.ReplicaReaches(ctx, primary, rep, caughtUpWait); err != nil {
		log.FromContext(ctx).Info("The replica did not catch up with the primary; taking the snapshot from the primary", "replica", p.Source.Name, "error", err.Error())
		return p.Primary
	}
	return p.Source
}

func finished(b *cachev1.RedisBackup) bool {
	return b.Status.Phase == cachev1.BackupCompleted || b.Status.Phase == cachev1.BackupFailed
}

// caughtUpWait bounds how long a replica may take to receive the primary's stream up to where
// it was when the backup started.
const caughtUpWait = 10 * time.Second

// giveOperatorUser sets the operator's own user on the node as this operator defines it for
// the source's mode.
func (r *Reconciler) giveOperatorUser(ctx context.Context, addr string, src snapshotSource) error {
	n := r.Dial(src.login)(addr)
	defer n.Close()
	return auth.SetUser(ctx, n, resources.OperatorUser(src.login.Password, src.cluster.Spec.Cluster != nil))
}

// store connects to the destination with the credentials of its Secret.
func (r *Reconciler) store(ctx context.Context, namespace string, dest cachev1.S3Destination) (*backup.Store, error) {
	return destinationStore(ctx, r.APIReader, namespace, dest)
}

// destinationStore connects to an S3 destination with the credentials (and CA bundle) of its
// Secrets, read by name.
func destinationStore(ctx context.Context, reader client.Reader, namespace string, dest cachev1.S3Destination) (*backup.Store, error) {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: dest.CredentialsSecret}, secret); apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Secret %s does not exist", errCredentials, dest.CredentialsSecret)
	} else if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", dest.CredentialsSecret, err)
	}
	creds := backup.Credentials{AccessKeyID: string(secret.Data[cachev1.S3AccessKeyIDKey]), SecretAccessKey: string(secret.Data[cachev1.S3SecretAccessKeyKey])}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		return nil, fmt.Errorf("%w: Secret %s needs the keys %s and %s", errCredentials, dest.CredentialsSecret,
			cachev1.S3AccessKeyIDKey, cachev1.S3SecretAccessKeyKey)
	}
	var caPEM []byte
	if ca := dest.CABundle; ca != nil {
		caSecret := &corev1.Secret{}
		if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ca.Name}, caSecret); err != nil {
			return nil, fmt.Errorf("%w: CA bundle Secret %s: %w", errCredentials, ca.Name, err)
		}
		key := resources.SecretKey(*ca)
		if caPEM = caSecret.Data[key]; len(caPEM) == 0 {
			return nil, fmt.Errorf("%w: CA bundle Secret %s has no key %q", errCredentials, ca.Name, key)
		}
	}
	return backup.NewStore(dest, creds, caPEM)
}

// deleteSnapshot deletes the stored snapshot of a RedisBackup with deletionPolicy Delete, then
// lets the RedisBackup go. Without its credentials it cannot: the snapshot is left, said in an
// Event, rather than holding the RedisBackup (and its namespace) for ever.
func (r *Reconciler) deleteSnapshot(ctx context.Context, b *cachev1.RedisBackup) error {
	if !controllerutil.ContainsFinalizer(b, backupFinalizer) {
		return nil
	}
	if b.Status.Location != "" {
		if b.Spec.Destination.PersistentVolumeClaim != nil {
			if done, err := r.deleteFromVolume(ctx, b); err != nil || !done {
				return err
			}
		} else if err := r.deleteFromStore(ctx, b); err != nil {
			return err
		}
	}
	before := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, backupFinalizer)
	return r.Patch(ctx, b, client.MergeFrom(before))
}

// deleteFromStore deletes the snapshot from its S3 bucket.
func (r *Reconciler) deleteFromStore(ctx context.Context, b *cachev1.RedisBackup) error {
	store, err := r.store(ctx, b.Namespace, *b.Spec.Destination.S3)
	switch {
	case errors.Is(err, errCredentials):
		r.leftInPlace(b, err.Error())
		return nil
	case err != nil:
		return err
	}
	for _, location := range storedLocations(b) {
		key, err := store.KeyOf(location)
		if err != nil {
			return err
		}
		if err := store.Delete(ctx, key); err != nil {
			return err
		}
		log.FromContext(ctx).Info("Deleted the stored snapshot", "location", location)
	}
	return nil
}

// holdsShards is a backup of a RedisCluster in cluster mode, from when it started: its location
// is the prefix its shards' snapshots share.
func holdsShards(b *cachev1.RedisBackup) bool { return strings.HasSuffix(b.Status.Location, "/") }

// storedLocations are where a backup's snapshots are: its one, or each shard's recorded. (A
// shard stored while the operator crashed is in no list: it is overwritten by nothing and left,
// as a failed upload is.)
func storedLocations(b *cachev1.RedisBackup) []string {
	if !holdsShards(b) {
		return []string{b.Status.Location}
	}
	var out []string
	for _, sh := range b.Status.Shards {
		out = append(out, sh.Location)
	}
	return out
}

// leftInPlace says, in an Event, that the snapshot stays where it is, and why.
func (r *Reconciler) leftInPlace(b *cachev1.RedisBackup, why string) {
	r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, cachev1.EventBackupFailed, "Delete",
		"The snapshot at %s is left in place: %s", b.Status.Location, why)
}

// SetupWithManager runs the reconciler; a backup streams for as long as it takes, so a few run
// at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	workers := r.MaxConcurrentBackups
	if workers == 0 {
		workers = 2
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&cachev1.RedisBackup{}).
		// The pods that take, and delete, backups on volumes.
		Owns(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("redisbackup").
		Complete(r)
}
