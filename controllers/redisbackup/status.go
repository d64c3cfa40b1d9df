package redisbackup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/backup"
)

// A RedisBackup's reconcile ends as a RedisCluster's phases do (package outcome): done (nil),
// waiting (outcome.Wait: Pending, with why, looked at again after backupWait) or failed. A
// failure given a reason of its own (failed, outcome.Fail) is the backup's end: it is Failed
// for good, with a Warning Event, and nothing it stored counts. Any other error is retried.
// The status is written by one function (write): once at the end (end), and once before a
// snapshot streams, so that the RedisBackup says Running while it does (announceRunning). Its
// Events say what the status changed to.

// taking is one reconcile of a RedisBackup: the backup as its phases leave it, and as its
// status was last written.
type taking struct {
	b       *cachev1.RedisBackup
	written *cachev1.RedisBackup
	// recordedPod is the volume pod whose outcome this reconcile recorded: deleted once the
	// status holds it.
	recordedPod *corev1.Pod
}

// failed ends the backup Failed, for good: the reason says whether the storage or the snapshot
// failed.
func failed(err error) error {
	if errors.Is(err, backup.ErrStorage) {
		return outcome.Fail(cachev1.ReasonStorageFailed, err)
	}
	return outcome.Fail(cachev1.ReasonSnapshotFailed, err)
}

// announceRunning records, and writes at once, where the snapshot is being taken from and to.
func (r *Reconciler) announceRunning(ctx context.Context, t *taking, node, location string) error {
	setRunning(t.b, node, location)
	if err := r.write(ctx, t); err != nil {
		return fmt.Errorf("recording the backup as running: %w", err)
	}
	return nil
}

// end turns how the reconcile ended into the status, and writes it if it changed: a wait is
// Pending and comes back after its time; a failure is Failed for good. Any other error is
// returned, for controller-runtime to retry.
func (r *Reconciler) end(ctx context.Context, t *taking, err error) (ctrl.Result, error) {
	var result ctrl.Result
	var f *outcome.Failure
	if w, ok := outcome.AsWaiting("", err); ok {
		setPending(t.b, w.Reason, w.Message)
		result.RequeueAfter, err = w.After, nil
	} else if errors.As(err, &f) {
		setFailed(t.b, f.Reason, f.Err)
		err = nil
	}
	if werr := r.write(ctx, t); werr != nil {
		return ctrl.Result{}, fmt.Errorf("recording the backup's status: %w", werr)
	}
	return result, err
}

// write is the one writer of a RedisBackup's status: it patches what changed since the last
// write, if anything did, and says in an Event that the backup completed or failed.
func (r *Reconciler) write(ctx context.Context, t *taking) error {
	if equality.Semantic.DeepEqual(t.written.Status, t.b.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, t.b, client.MergeFrom(t.written)); err != nil {
		return err
	}
	before := t.written.Status.Phase
	t.written = t.b.DeepCopy()
	b := t.b
	switch {
	case b.Status.Phase == before:
	case b.Status.Phase == cachev1.BackupFailed:
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, cachev1.EventBackupFailed, "Backup", "%s", completedCondition(b))
	case b.Status.Phase == cachev1.BackupCompleted && len(b.Status.Shards) > 0:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, cachev1.EventBackupCompleted, "Backup",
			"Stored the snapshots of %d shards at %s (%d bytes)", len(b.Status.Shards), b.Status.Location, b.Status.Size)
	case b.Status.Phase == cachev1.BackupCompleted:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, cachev1.EventBackupCompleted, "Backup",
			"Stored the snapshot of %s at %s (%d bytes, %s)", b.Status.Node, b.Status.Location, b.Status.Size, b.Status.Checksum)
	}
	return nil
}

// completedCondition is the message of the backup's Completed condition.
func completedCondition(b *cachev1.RedisBackup) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, cachev1.ConditionCompleted); c != nil {
		return c.Message
	}
	return ""
}

// setPending records why the backup cannot start yet.
func setPending(b *cachev1.RedisBackup, reason, msg string) {
	b.Status.Phase = cachev1.BackupPending
	setBackupCondition(b, metav1.ConditionFalse, reason, msg)
}

// setRunning records where the snapshot is being taken from, and to.
func setRunning(b *cachev1.RedisBackup, node, location string) {
	if b.Status.StartedAt == nil {
		now := metav1.Now()
		b.Status.StartedAt = &now
	}
	b.Status.Phase, b.Status.Node, b.Status.Location = cachev1.BackupRunning, node, location
	setBackupCondition(b, metav1.ConditionFalse, cachev1.ReasonBackupRunning,
		fmt.Sprintf("Streaming the snapshot of %s to %s", node, location))
}

// setCompleted records what was stored: in cluster mode, every shard's snapshot (already in
// status.shards) and res their total size.
func setCompleted(b *cachev1.RedisBackup, res backup.Result) {
	now := metav1.Now()
	b.Status.Phase, b.Status.CompletedAt = cachev1.BackupCompleted, &now
	if len(b.Status.Shards) > 0 {
		b.Status.Node = shardNodes(b.Status.Shards)
		b.Status.Size = res.Size
		setBackupCondition(b, metav1.ConditionTrue, cachev1.ReasonBackupStored,
			fmt.Sprintf("Stored %d bytes from %d shards (%s)", res.Size, len(b.Status.Shards), b.Status.Node))
		return
	}
	b.Status.Size, b.Status.Checksum = res.Size, res.Checksum
	b.Status.ReplicationID, b.Status.ReplicationOffset = res.ReplicationID, res.ReplicationOffset
	setBackupCondition(b, metav1.ConditionTrue, cachev1.ReasonBackupStored,
		fmt.Sprintf("Stored %d bytes from %s at replication offset %d", res.Size, b.Status.Node, res.ReplicationOffset))
}

// setFailed records why the backup failed, for good. The shards stored before it failed stay
// recorded: a RedisBackup with deletionPolicy Delete deletes them.
func setFailed(b *cachev1.RedisBackup, reason string, err error) {
	if len(b.Status.Shards) > 0 {
		b.Status.Node = shardNodes(b.Status.Shards)
	}
	b.Status.Phase, b.Status.CompletedAt = cachev1.BackupFailed, nil
	setBackupCondition(b, metav1.ConditionFalse, reason, err.Error())
}

// shardNodes names the node each shard's snapshot came from, as the status says them.
func shardNodes(shards []cachev1.ShardBackup) string {
	nodes := make([]string, 0, len(shards))
	for _, sh := range shards {
		nodes = append(nodes, sh.Node)
	}
	return strings.Join(nodes, ",")
}

func setBackupCondition(b *cachev1.RedisBackup, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: cachev1.ConditionCompleted, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: b.Generation})
}
