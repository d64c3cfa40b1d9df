package redisbackup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// Backups on a PersistentVolumeClaim. The operator chooses the node as for S3 (source), then a
// pod of its own image, mounting the claim, streams that node's snapshot into a file there and
// reports the outcome in its termination message (resources.BackupPod). The RedisBackup is
// Running while the pod runs; the pod's exit records it Completed or Failed, and the pod goes.
// In cluster mode a pod takes each shard's snapshot in turn, never two at once (the claim may be
// ReadWriteOnce, which pods on two machines cannot mount together): each pod's outcome is
// recorded in status.shards before the next starts, so a restarted operator goes on from there.

// errNoOperatorImage is a volume backup or restore while the operator does not know its image.
var errNoOperatorImage = errors.New("the operator does not know its own image, which runs the pods that use the volume: start it with --operator-image")

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// onVolume takes the backup onto its claim through a pod, or records what its pod did.
func (r *Reconciler) onVolume(ctx context.Context, t *taking) error {
	b := t.b
	pod := &corev1.Pod{}
	err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: takingPodName(b)}, pod)
	if err == nil {
		return recordVolumeBackup(t, pod)
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	if r.OperatorImage == "" {
		return outcome.Wait(backupWait, cachev1.ReasonBackupPending, errNoOperatorImage.Error())
	}
	dest := b.Spec.Destination.PersistentVolumeClaim
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: dest.ClaimName}, &corev1.PersistentVolumeClaim{}); apierrors.IsNotFound(err) {
		return outcome.Wait(backupWait, cachev1.ReasonClaimNotFound, fmt.Sprintf("PersistentVolumeClaim %s does not exist", dest.ClaimName))
	} else if err != nil {
		return fmt.Errorf("reading PersistentVolumeClaim %s: %w", dest.ClaimName, err)
	}
	src, err := r.source(ctx, b)
	if err != nil {
		return err
	}
	opts := resources.BackupPodOptions{Image: r.OperatorImage, ServerName: resources.ClientServiceHost(src.cluster),
		Key: backup.ObjectKey(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name)}
	location := backup.VolumeLocation(dest.ClaimName, opts.Key)
	node := topology.Observed{}
	if src.sharded() {
		if len(b.Status.Shards) == len(src.parts) {
			return completeShards(b, b.Status.Shards)
		}
		i := len(b.Status.Shards)
		p := src.parts[i]
		node = r.nodeOf(ctx, src, i)
		opts.Key = backup.ShardObjectKey(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name, p.Shard)
		shard := shardBackup(p, node, backup.VolumeLocation(dest.ClaimName, opts.Key), backup.Result{})
		opts.Shard, opts.ShardIndex = &shard, i
		location = backup.VolumeLocation(dest.ClaimName, backup.ShardsPrefix(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name))
	} else {
		node = r.nodeOf(ctx, src, 0)
	}
	opts.Node = node.Addr
	// The pod logs in as the operator's own user: a node started by an operator whose user
	// could not sync yet gets the user as this operator defines it first.
	if err := r.giveOperatorUser(ctx, node.Addr, src); err != nil {
		return fmt.Errorf("giving %s the operator's user: %w", node.Name, err)
	}
	if b.Status.Phase != cachev1.BackupRunning {
		nodes := node.Name
		if src.sharded() {
			nodes = src.nodes()
		}
		if err := r.announceRunning(ctx, t, nodes, location); err != nil {
			return err
		}
	}
	if opts.Shard != nil && opts.ShardIndex > 0 {
		// The previous shard's pod, left when the operator stopped between recording its
		// snapshot and deleting it.
		prev := &corev1.Pod{}
		prev.Name, prev.Namespace = resources.ShardBackupPodName(b, opts.ShardIndex-1), b.Namespace
		if err := r.Delete(ctx, prev); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting pod %s: %w", prev.Name, err)
		}
	}
	pod = resources.BackupPod(b, src.cluster, opts)
	if err := r.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	log.FromContext(ctx).Info("Started the backup's pod", "pod", klog.KObj(pod), "node", node.Name)
	// The pod's status changes bring the RedisBackup back (it owns the pod).
	return nil
}

// takingPodName names the pod that takes the backup's snapshot now: its one, or in cluster mode
// the pod of the first shard not stored yet.
func takingPodName(b *cachev1.RedisBackup) string {
	if holdsShards(b) {
		return resources.ShardBackupPodName(b, len(b.Status.Shards))
	}
	return resources.BackupPodName(b)
}

// recordVolumeBackup records the outcome of the backup's pod once it has exited (in cluster
// mode, the outcome of its shard, and the backup goes on with the next); the pod goes once the
// status holds it (Reconcile deletes t.recordedPod).
func recordVolumeBackup(t *taking, pod *corev1.Pod) error {
	exit := scope.PodExit(pod)
	if exit == nil {
		return nil
	}
	t.recordedPod = pod
	var res backup.Result
	var err error
	if exit.ExitCode == 0 {
		res, err = backup.DecodeResult(exit.Message)
	} else {
		err = scope.VolumeTaskError(exit)
	}
	if raw, ok := pod.Annotations[resources.ShardBackupAnnotation]; ok {
		return recordShardOnVolume(t.b, raw, res, err)
	}
	if err != nil {
		return failed(err)
	}
	setCompleted(t.b, res)
	return nil
}

// recordShardOnVolume records the snapshot of the shard a pod took (raw: what the operator
// decided for it, ShardBackupAnnotation), or fails the backup with what went wrong. The status
// change brings the RedisBackup back, for the next shard.
func recordShardOnVolume(b *cachev1.RedisBackup, raw string, res backup.Result, taken error) error {
	var sh cachev1.ShardBackup
	if err := json.Unmarshal([]byte(raw), &sh); err != nil {
		return failed(fmt.Errorf("%w: the backup pod's %s annotation: %w", backup.ErrSnapshot, resources.ShardBackupAnnotation, err))
	}
	if taken != nil {
		return failed(fmt.Errorf("shard %s: %w", sh.Name, taken))
	}
	sh.Size, sh.Checksum, sh.ReplicationID, sh.ReplicationOffset = res.Size, res.Checksum, res.ReplicationID, res.ReplicationOffset
	b.Status.Shards = append(slices.Clone(b.Status.Shards), sh)
	return nil
}

// deleteFromVolume deletes the snapshot from its claim through a pod; done once that pod has
// exited, or when it cannot run (the claim or the namespace is going): the snapshot is then left,
// said in an Event, rather than holding the RedisBackup (and its namespace) for ever.
func (r *Reconciler) deleteFromVolume(ctx context.Context, b *cachev1.RedisBackup) (done bool, err error) {
	// A backup still being written would land after the delete: stop it first.
	taking := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: takingPodName(b)}, taking); err == nil {
		if scope.PodExit(taking) == nil {
			return false, client.IgnoreNotFound(r.Delete(ctx, taking))
		}
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	pod := &corev1.Pod{}
	err = r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: resources.DeleteBackupPodName(b)}, pod)
	if err == nil {
		t := scope.PodExit(pod)
		switch {
		case t == nil:
			return false, nil
		case t.ExitCode != 0:
			r.leftInPlace(b, scope.VolumeTaskError(t).Error())
		default:
			log.FromContext(ctx).Info("Deleted the stored snapshot", "location", b.Status.Location)
		}
		return true, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	var claim string
	var keys []string
	for _, location := range storedLocations(b) {
		c, key, err := backup.VolumeKey(location)
		if err != nil {
			r.leftInPlace(b, err.Error())
			return true, nil
		}
		claim, keys = c, append(keys, key)
	}
	if len(keys) == 0 {
		return true, nil // a backup in cluster mode that stored no shard
	}
	if r.OperatorImage == "" {
		r.leftInPlace(b, errNoOperatorImage.Error())
		return true, nil
	}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: claim}, &corev1.PersistentVolumeClaim{}); apierrors.IsNotFound(err) {
		r.leftInPlace(b, fmt.Sprintf("PersistentVolumeClaim %s does not exist", claim))
		return true, nil
	} else if err != nil {
		return false, err
	}
	pod = resources.DeleteBackupPod(b, r.OperatorImage, keys)
	switch err := r.Create(ctx, pod); {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		r.leftInPlace(b, "the namespace is being deleted")
		return true, nil
	case err != nil && !apierrors.IsAlreadyExists(err):
		return false, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	return false, nil
}
