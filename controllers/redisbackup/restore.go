package redisbackup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
)

// A restore (spec.restore) in three steps:
//  1. RestoreSource reads the RedisBackup once, when the cluster is created, into
//     status.restore; until the backup has completed, no pod is created.
//  2. The first node's restore init container (internal/resources) fetches the snapshot
//     recorded there, checks it, and lays it out before Redis starts; the first primary is
//     that node (topology.Policy.Bootstrap). A snapshot on a PersistentVolumeClaim is instead
//     copied into the first node's data claim by a pod of its own before the StatefulSet
//     exists (restoreFromVolume): the nodes never mount the backup's claim, which may be
//     ReadWriteOnce and is not theirs to depend on.
//  3. RestoreDone sees that node serve as primary, records the restore complete and
//     deletes the <name>-restore ConfigMap, so that it is never restored again.

// errBackupsNotServed is spec.backup or spec.restore while the RedisBackup CRD is not installed.
var errBackupsNotServed = outcome.Fail(cachev1.ReasonBackupsNotServed, errors.New("backups are off: the RedisBackup CRD is not installed or the operator may not watch RedisBackups (install the operator's bundle of this version), or they came after the operator started (restart it)"))

// +kubebuilder:rbac:groups=cache.example.com,resources=redisbackups,verbs=get;list;watch

// RestoreSource is step 1 (the RestoreSource phase), and keeps the <name>-restore ConfigMap
// while the restore is not done. It records the backup in c.Restore.
func RestoreSource(ctx context.Context, c *scope.Cluster) error {
	rc := c.RC
	if rc.Spec.Restore == nil {
		return nil
	}
	if !c.BackupsServed && rc.Status.Restore == nil {
		return errBackupsNotServed
	}
	if rc.Status.Restore != nil {
		c.Restore = rc.Status.Restore.DeepCopy()
	} else {
		name := rc.Spec.Restore.FromBackup
		b := &cachev1.RedisBackup{}
		switch err := c.Client.Get(ctx, types.NamespacedName{Namespace: rc.Namespace, Name: name}, b); {
		case apierrors.IsNotFound(err):
			// The RedisBackup's watch (clustersWaitingFor) wakes the reconcile.
			return outcome.Wait(0, cachev1.ReasonBackupNotReady, fmt.Sprintf("waiting for the backup: RedisBackup %s does not exist; no node starts until it has completed", name))
		case err != nil:
			return fmt.Errorf("reading RedisBackup %s: %w", name, err)
		case b.Status.Phase != cachev1.BackupCompleted:
			return outcome.Wait(0, cachev1.ReasonBackupNotReady, fmt.Sprintf("waiting for the backup: RedisBackup %s is %s; no node starts until it has completed", name, phaseOrPending(b)))
		}
		if err := restorable(rc, b); err != nil {
			return outcome.Fail(cachev1.ReasonRestoreFailed, err)
		}
		c.Restore = &cachev1.RestoreStatus{Backup: name, Location: b.Status.Location, Checksum: b.Status.Checksum,
			Size: b.Status.Size, Destination: b.Spec.Destination, Shards: b.Status.Shards}
	}
	if c.Restore.CompletedAt != nil {
		return nil
	}
	if c.OperatorImage == "" {
		return outcome.Fail(cachev1.ReasonRestoreFailed, errors.New("the operator does not know its own image, which restores the data: start it with --operator-image"))
	}
	if c.Restore.Destination.PersistentVolumeClaim != nil {
		return restoreFromVolume(ctx, c)
	}
	if c.ChildrenKnown {
		return nil
	}
	for _, desired := range resources.DesiredRestoreConfigMaps(rc, c.Restore) {
		err := scope.Apply(ctx, c, "ConfigMap", scope.Child[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
			Desired: desired, Name: types.NamespacedName{Namespace: rc.Namespace, Name: *desired.Name}, Live: &corev1.ConfigMap{}, Extract: corev1ac.ExtractConfigMap,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// restorable says why the completed backup b cannot be restored into rc; nil when it can. A
// backup of either mode restores only into its own mode, and one of cluster mode into as many
// shards as it holds: each shard's first node loads one shard's snapshot.
func restorable(rc *cachev1.RedisCluster, b *cachev1.RedisBackup) error {
	shards := len(b.Status.Shards)
	switch {
	case rc.Spec.Cluster == nil && shards > 0:
		return fmt.Errorf("RedisBackup %s is of a RedisCluster in cluster mode (%d shards): restore it into a RedisCluster with spec.cluster.shards %d", b.Name, shards, shards)
	case rc.Spec.Cluster != nil && shards == 0:
		return fmt.Errorf("RedisBackup %s is of a RedisCluster with one primary: a RedisCluster in cluster mode restores only a backup of one in cluster mode (restore it without spec.cluster, then move the data)", b.Name)
	case rc.Spec.Cluster != nil && shards != int(rc.Spec.Cluster.Shards):
		return fmt.Errorf("RedisBackup %s holds %d shards and spec.cluster.shards is %d: a restore needs the same number (restore into %d shards, then change spec.cluster.shards)", b.Name, shards, rc.Spec.Cluster.Shards, shards)
	}
	return nil
}

func phaseOrPending(b *cachev1.RedisBackup) cachev1.BackupPhase {
	if b.Status.Phase == "" {
		return cachev1.BackupPending
	}
	return b.Status.Phase
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=delete

// RestoringNodes are the pods that restore the data: the first, or in cluster mode each shard's
// first.
func RestoringNodes(rc *cachev1.RedisCluster) []string {
	if rc.Spec.Cluster == nil {
		return []string{resources.FirstNodeName(rc, 0)}
	}
	var firsts []string
	for i := range int(rc.Spec.Cluster.Shards) {
		firsts = append(firsts, resources.FirstNodeName(rc, i))
	}
	return firsts
}

// RestoreDone is step 3 (the RestoreDone phase): it records the restore done once served says
// the restoring nodes (RestoringNodes) serve the data (in replication mode, the first as
// primary; in cluster mode each shard's first as its primary, in a cluster that has formed), and
// deletes what said what to restore. A restoring node whose init container failed is reported
// with the restore's own words.
func RestoreDone(ctx context.Context, c *scope.Cluster, served func(firsts []string) bool) error {
	rc := c.RC
	firsts := RestoringNodes(rc)
	if c.Restore == nil || c.Restore.CompletedAt != nil {
		return nil
	}
	for _, first := range firsts {
		if why := restoreFailure(c.Pods, first); why != "" {
			return outcome.Fail(cachev1.ReasonRestoreFailed, fmt.Errorf("restoring RedisBackup %s on %s failed: %s", c.Restore.Backup, first, why))
		}
	}
	if !served(firsts) {
		return nil
	}
	// The ConfigMaps that said what to fetch, or the pods that copied from a volume: each
	// named for the node it restored.
	for _, name := range resources.RestoreNames(rc) {
		for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Pod{}} {
			obj.SetName(name)
			obj.SetNamespace(rc.Namespace)
			if err := c.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %T %s: %w", obj, name, err)
			}
		}
	}
	now := metav1.Now()
	c.Restore.CompletedAt = &now
	c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventRestored, "Restore",
		"%s serves the data of RedisBackup %s (%s)", strings.Join(firsts, ", "), c.Restore.Backup, c.Restore.Location)
	return nil
}

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;create;delete

// restoreFromVolume fills the first node's data claim (in cluster mode, each shard's first
// node's) from the backup's claim, through a restore pod, before its StatefulSet exists; the
// phases after it wait until every pod is done. The pods run one after another: the backup's
// claim may be ReadWriteOnce, which pods on two machines cannot mount together.
func restoreFromVolume(ctx context.Context, c *scope.Cluster) error {
	rc := c.RC
	if rc.Spec.Storage == nil {
		return outcome.Fail(cachev1.ReasonRestoreFailed, fmt.Errorf("RedisBackup %s is on PersistentVolumeClaim %s: a restore from a volume fills the first node's data claim, and this cluster has none (set spec.storage, or restore a backup stored in S3)",
			c.Restore.Backup, c.Restore.Destination.PersistentVolumeClaim.ClaimName))
	}
	for shard, name := range resources.RestoreNames(rc) {
		if location, _ := resources.RestoredSnapshot(rc, c.Restore, shard); location == "" {
			continue // a shard the backup does not hold starts empty
		}
		pod := &corev1.Pod{}
		err := c.Client.Get(ctx, types.NamespacedName{Namespace: rc.Namespace, Name: name}, pod)
		if apierrors.IsNotFound(err) {
			if err := c.Client.Get(ctx, types.NamespacedName{Namespace: rc.Namespace, Name: resources.StatefulSetNameOf(rc, shard)}, &appsv1.StatefulSet{}); err == nil {
				continue // its restore pod was done, and is gone
			} else if !apierrors.IsNotFound(err) {
				return err
			}
			if err := c.Client.Create(ctx, resources.FirstDataClaim(rc, shard)); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating PersistentVolumeClaim %s: %w", resources.FirstDataClaimName(rc, shard), err)
			}
			pod = resources.RestorePod(rc, c.Restore, shard, c.OperatorImage)
			if err := c.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating pod %s: %w", pod.Name, err)
			}
			return waitRestorePod
		}
		if err != nil {
			return err
		}
		switch t := scope.PodExit(pod); {
		case t == nil:
			return waitRestorePod
		case t.ExitCode != 0:
			return outcome.Fail(cachev1.ReasonRestoreFailed, fmt.Errorf("restoring RedisBackup %s into %s failed: %w",
				c.Restore.Backup, resources.FirstDataClaimName(rc, shard), scope.VolumeTaskError(t)))
		}
	}
	return nil
}

// waitRestorePod is a restore pod that has not finished: the StatefulSet waits for it. The pod's
// watch (podToRedisCluster) wakes the reconcile when it ends.
var waitRestorePod = outcome.Wait(0, cachev1.ReasonRestoring, "a restore pod copies the backup into the first node's data claim; no node starts before every one is done")

// restoreFailure is why the pod's restore init container failed, from its termination message;
// empty when it did not.
func restoreFailure(pods []corev1.Pod, name string) string {
	for _, p := range pods {
		if p.Name != name {
			continue
		}
		for _, c := range p.Status.InitContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 {
					msg := strings.Join(strings.Fields(t.Message), " ")
					if msg == "" {
						msg = fmt.Sprintf("exit code %d", t.ExitCode)
					}
					return msg
				}
			}
		}
	}
	return ""
}

// restoreReasons are the reasons of the phases that fail or wait for the restore: the Restored
// condition says them.
var restoreReasons = []string{cachev1.ReasonBackupsNotServed, cachev1.ReasonBackupNotReady, cachev1.ReasonRestoring, cachev1.ReasonRestoreFailed}

// RestoredCondition says where the restore of rc's spec.restore is (the Restored condition),
// from what this reconcile's phases recorded in c; nil without one.
func RestoredCondition(rc *cachev1.RedisCluster, c *scope.Cluster) *metav1.Condition {
	if rc.Spec.Restore == nil {
		return nil
	}
	r, u := c.Restore, outcome.Of(c.Failed, c.Waiting)
	switch {
	case r != nil && r.CompletedAt != nil:
		return scope.Condition(cachev1.ConditionRestored, metav1.ConditionTrue, cachev1.ReasonRestoreComplete,
			fmt.Sprintf("Restored from RedisBackup %s (%s, %s)", r.Backup, r.Location, r.Checksum))
	case slices.Contains(restoreReasons, u.Reason):
		return scope.Condition(cachev1.ConditionRestored, metav1.ConditionFalse, u.Reason, u.Message)
	case r == nil:
		// Another phase failed before the backup was read: keep what the status says.
		if meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionRestored) != nil {
			return nil
		}
		return scope.Condition(cachev1.ConditionRestored, metav1.ConditionFalse, cachev1.ReasonBackupNotReady, "The backup has not been read yet")
	}
	who := resources.FirstNodeName(rc, 0)
	if rc.Spec.Cluster != nil {
		who = "The first node of each shard"
	}
	return scope.Condition(cachev1.ConditionRestored, metav1.ConditionFalse, cachev1.ReasonRestoring,
		fmt.Sprintf("%s restores RedisBackup %s before Redis starts", who, r.Backup))
}

// ClustersWaitingFor maps a RedisBackup to the RedisClusters whose restore waits for it: the
// RedisCluster reconciler's watch of RedisBackups.
func ClustersWaitingFor(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := &cachev1.RedisClusterList{}
		if err := c.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, rc := range list.Items {
			if rc.Spec.Restore != nil && rc.Spec.Restore.FromBackup == obj.GetName() && rc.Status.Restore == nil {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rc)})
			}
		}
		return out
	}
}
