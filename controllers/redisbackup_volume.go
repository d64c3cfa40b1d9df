package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
)

// Backups on a PersistentVolumeClaim. The operator chooses the node as for S3 (source), then a
// pod of its own image, mounting the claim, streams that node's snapshot into a file there and
// reports the outcome in its termination message (resources.BackupPod). The RedisBackup is
// Running while the pod runs; the pod's exit records it Completed or Failed, and the pod goes.

// errShardsOnVolume is a volume backup of a RedisCluster in cluster mode.
var errShardsOnVolume = errors.New("a RedisCluster in cluster mode is backed up to S3 only: a PersistentVolumeClaim destination is not built for its shards yet")

// errNoOperatorImage is a volume backup or restore while the operator does not know its image.
var errNoOperatorImage = errors.New("the operator does not know its own image, which runs the pods that use the volume: start it with --operator-image")

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// reconcileOnVolume takes the backup onto its claim through a pod, or records what its pod did.
func (r *RedisBackupReconciler) reconcileOnVolume(ctx context.Context, b *cachev1.RedisBackup) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: resources.BackupPodName(b)}, pod)
	if err == nil {
		return r.recordVolumeBackup(ctx, b, pod)
	}
	if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if r.OperatorImage == "" {
		return r.wait(ctx, b, cachev1.ReasonBackupPending, errNoOperatorImage.Error())
	}
	dest := b.Spec.Destination.PersistentVolumeClaim
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: dest.ClaimName}, &corev1.PersistentVolumeClaim{}); apierrors.IsNotFound(err) {
		return r.wait(ctx, b, cachev1.ReasonClaimNotFound, fmt.Sprintf("PersistentVolumeClaim %s does not exist", dest.ClaimName))
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading PersistentVolumeClaim %s: %w", dest.ClaimName, err)
	}
	src, pending, err := r.source(ctx, b)
	if err != nil || pending != "" {
		return r.waitOr(ctx, b, pending, err)
	}
	if src.sharded() {
		return r.finish(ctx, b, nil, errShardsOnVolume)
	}
	node := src.parts[0].Source
	// The pod logs in as the operator's own user: a node started by an operator whose user
	// could not sync yet gets the user as this operator defines it first.
	if err := r.giveOperatorUser(ctx, node.Addr, src.login); err != nil {
		return ctrl.Result{}, fmt.Errorf("giving %s the operator's user: %w", node.Name, err)
	}
	key := backup.ObjectKey(dest.Prefix, b.Namespace, b.Spec.Cluster, b.Name)
	if err := r.recordRunning(ctx, b, node.Name, backup.VolumeLocation(dest.ClaimName, key)); err != nil {
		return ctrl.Result{}, err
	}
	pod = resources.BackupPod(b, src.cluster, resources.BackupPodOptions{
		Image: r.OperatorImage, Node: node.Addr, Key: key, ServerName: primaryServiceName(src.cluster),
	})
	if err := r.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	log.FromContext(ctx).Info("Started the backup's pod", "pod", klog.KObj(pod), "node", node.Name)
	// The pod's status changes bring the RedisBackup back (it owns the pod).
	return ctrl.Result{}, nil
}

// recordVolumeBackup records the outcome of the backup's pod once it has exited, and deletes it.
func (r *RedisBackupReconciler) recordVolumeBackup(ctx context.Context, b *cachev1.RedisBackup, pod *corev1.Pod) (ctrl.Result, error) {
	t := terminated(pod)
	if t == nil {
		return ctrl.Result{}, nil
	}
	var res *backup.Result
	var err error
	if t.ExitCode == 0 {
		var decoded backup.Result
		if decoded, err = backup.DecodeResult(t.Message); err == nil {
			res = &decoded
		}
	} else {
		err = volumeTaskError(t)
	}
	out, err := r.finish(ctx, b, res, err)
	if err != nil {
		return out, err
	}
	if err := r.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
		return out, fmt.Errorf("deleting pod %s: %w", pod.Name, err)
	}
	return out, nil
}

// deleteFromVolume deletes the snapshot from its claim through a pod; done once that pod has
// exited, or when it cannot run (the claim or the namespace is going): the snapshot is then left,
// said in an Event, rather than holding the RedisBackup (and its namespace) for ever.
func (r *RedisBackupReconciler) deleteFromVolume(ctx context.Context, b *cachev1.RedisBackup) (done bool, err error) {
	// A backup still being written would land after the delete: stop it first.
	taking := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: resources.BackupPodName(b)}, taking); err == nil {
		if terminated(taking) == nil {
			return false, client.IgnoreNotFound(r.Delete(ctx, taking))
		}
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	pod := &corev1.Pod{}
	err = r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: resources.DeleteBackupPodName(b)}, pod)
	if err == nil {
		t := terminated(pod)
		switch {
		case t == nil:
			return false, nil
		case t.ExitCode != 0:
			r.leftInPlace(b, volumeTaskError(t).Error())
		default:
			log.FromContext(ctx).Info("Deleted the stored snapshot", "location", b.Status.Location)
		}
		return true, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	claim, key, err := backup.VolumeKey(b.Status.Location)
	if err != nil {
		r.leftInPlace(b, err.Error())
		return true, nil
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
	pod = resources.DeleteBackupPod(b, r.OperatorImage, key)
	switch err := r.Create(ctx, pod); {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		r.leftInPlace(b, "the namespace is being deleted")
		return true, nil
	case err != nil && !apierrors.IsAlreadyExists(err):
		return false, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	return false, nil
}

// terminated is the exit of a run-once pod's container; nil while it has not exited.
func terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return nil
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Terminated != nil {
			return c.State.Terminated
		}
	}
	// Failed before its container ran (evicted, its node lost).
	return &corev1.ContainerStateTerminated{ExitCode: 1, Message: strings.TrimSpace(pod.Status.Reason + " " + pod.Status.Message)}
}

// taskError is what a volume task's pod said when it failed.
type taskError struct {
	msg   string
	cause error
}

func (e *taskError) Error() string { return e.msg }
func (e *taskError) Unwrap() error { return e.cause }

// volumeTaskError is the failure a pod's exit reports: the volume's (storage) or the node's
// (snapshot), in the pod's own words.
func volumeTaskError(t *corev1.ContainerStateTerminated) error {
	msg := strings.Join(strings.Fields(t.Message), " ")
	if msg == "" {
		msg = fmt.Sprintf("the pod exited with code %d", t.ExitCode)
	}
	cause := backup.ErrSnapshot
	if t.ExitCode == resources.ExitStorageFailed {
		cause = backup.ErrStorage
	}
	return &taskError{msg: msg, cause: cause}
}
