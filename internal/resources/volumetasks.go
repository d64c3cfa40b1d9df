package resources

import (
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// Backups on a PersistentVolumeClaim: the operator holds no volume, so a pod of its own image
// mounts the claim and does the one thing the operator cannot do from where it runs: take a
// snapshot into a file there (BackupPod), delete some (DeleteBackupPod), or copy one into a
// first node's data claim before its StatefulSet exists (RestorePod). Each runs once
// (restartPolicy Never) and reports through its exit code and termination message; the
// operator reads the outcome from the pod's status and deletes the pod.

const (
	// LabelBackupCluster on a RedisBackup, and on the pods of volume backups and restores,
	// names the RedisCluster.
	LabelBackupCluster = "cache.example.com/cluster"

	// The subcommands of the operator's binary that the pods run.
	BackupCommand       = "backup"
	DeleteBackupCommand = "delete-backup"

	// EnvRedisPassword is the operator's own password, from its Secret, in a backup pod.
	EnvRedisPassword = "REDIS_PASSWORD"

	// TerminationLog is where a volume task writes its outcome: the kubelet reports the file
	// as the container's termination message.
	TerminationLog = "/dev/termination-log"

	// Exit codes of a volume task: the snapshot could not be taken (the node's side), or the
	// volume refused it (the storage's side).
	ExitSnapshotFailed = 1
	ExitStorageFailed  = 3

	// The component label of the volume tasks' pods.
	BackupComponent  = "backup"
	RestoreComponent = "restore"

	backupVolume = "backup"
	backupDir    = "/backup"
)

// BackupPodName names the pod that takes a RedisBackup onto its volume.
func BackupPodName(b *cachev1.RedisBackup) string { return b.Name + "-backup" }

// ShardBackupPodName names the pod that takes the i-th shard's snapshot of a RedisBackup in
// cluster mode onto its volume.
func ShardBackupPodName(b *cachev1.RedisBackup, i int) string {
	return BackupPodName(b) + "-" + strconv.Itoa(i)
}

// DeleteBackupPodName names the pod that deletes a RedisBackup's snapshot from its volume.
func DeleteBackupPodName(b *cachev1.RedisBackup) string { return b.Name + "-delete" }

// ScheduledBackupName names the RedisBackup spec.backup's schedule takes at t: named after t, so
// that an operator that crashed after creating it creates no second one.
func ScheduledBackupName(rc *cachev1.RedisCluster, t time.Time) string {
	return rc.Name + "-" + t.UTC().Format("20060102-150405")
}

// FirstDataClaimName is the StatefulSet's claim for the data of shard's first node (in
// replication mode, shard ignored, the first node's): the one a restore from a volume fills
// before the StatefulSet exists, and which the StatefulSet then uses.
func FirstDataClaimName(rc *cachev1.RedisCluster, shard int) string {
	return dataVolume + "-" + FirstNodeName(rc, shard)
}

// ShardBackupAnnotation on a shard's backup pod holds what the operator decided for that shard
// (cachev1.ShardBackup as JSON: name, slots, node, location), recorded with the pod's outcome.
const ShardBackupAnnotation = "cache.example.com/shard-backup"

// BackupPodOptions are what the operator decided for a backup to a volume.
type BackupPodOptions struct {
	// Image is the operator's own image.
	Image string
	// Node is the address (host:port) of the node the snapshot is taken from.
	Node string
	// Key is the snapshot's path on the volume.
	Key string
	// ServerName is the name each node's certificate must be valid for, with TLS.
	ServerName string
	// Shard is, in cluster mode, the shard the snapshot is of, and ShardIndex its place in the
	// backup (the pod's name); nil in replication mode.
	Shard      *cachev1.ShardBackup
	ShardIndex int
}

// BackupPod takes the snapshot of one node onto the RedisBackup's claim: it logs in as the
// operator's own user (password from its Secret, never in argv) and writes its outcome (size,
// checksum, replication offset) to its termination message.
func BackupPod(b *cachev1.RedisBackup, rc *cachev1.RedisCluster, o BackupPodOptions) *corev1.Pod {
	claim := b.Spec.Destination.PersistentVolumeClaim.ClaimName
	args := []string{"--node=" + o.Node, "--dir=" + backupDir, "--claim=" + claim, "--key=" + o.Key,
		"--result-file=" + TerminationLog}
	volumes := []corev1.Volume{claimVolume(backupVolume, claim, false)}
	mounts := []corev1.VolumeMount{{Name: backupVolume, MountPath: backupDir}}
	if rc.Spec.TLS != nil {
		args = append(args, "--tls-dir="+TLSDir, "--server-name="+o.ServerName)
		volumes = append(volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: rc.Spec.TLS.SecretName, DefaultMode: ptr.To[int32](0o440)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: tlsVolume, MountPath: TLSDir, ReadOnly: true})
	}
	name := BackupPodName(b)
	if o.Shard != nil {
		name = ShardBackupPodName(b, o.ShardIndex)
	}
	pod := volumeTaskPod(name, b.Namespace, controllerOf("RedisBackup", b), BackupComponent, rc.Name, o.Image,
		append([]string{OperatorBinary, BackupCommand}, args...), volumes, mounts)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: EnvRedisPassword, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: OperatorSecretName(rc)}, Key: PasswordKey}}}}
	if o.Shard != nil {
		raw, _ := json.Marshal(o.Shard) // plain strings and numbers: never fails
		pod.Annotations = map[string]string{ShardBackupAnnotation: string(raw)}
	}
	return pod
}

// DeleteBackupPod deletes a RedisBackup's snapshots (one, or one per shard) from its claim.
func DeleteBackupPod(b *cachev1.RedisBackup, image string, keys []string) *corev1.Pod {
	claim := b.Spec.Destination.PersistentVolumeClaim.ClaimName
	command := []string{OperatorBinary, DeleteBackupCommand, "--dir=" + backupDir, "--claim=" + claim}
	for _, key := range keys {
		command = append(command, "--key="+key)
	}
	return volumeTaskPod(DeleteBackupPodName(b), b.Namespace, controllerOf("RedisBackup", b), BackupComponent, b.Spec.Cluster, image,
		command,
		[]corev1.Volume{claimVolume(backupVolume, claim, false)},
		[]corev1.VolumeMount{{Name: backupVolume, MountPath: backupDir}})
}

// RestorePod copies the snapshot of shard (in replication mode, shard ignored, the backup's one)
// recorded in status.restore from its claim (read-only) into the data claim of the shard's first
// node, checked against its checksum, before the shard's StatefulSet exists.
func RestorePod(rc *cachev1.RedisCluster, r *cachev1.RestoreStatus, shard int, image string) *corev1.Pod {
	location, checksum := RestoredSnapshot(rc, r, shard)
	pod := volumeTaskPod(RestoreNameOf(rc, shard), rc.Namespace, controllerOf("RedisCluster", rc), RestoreComponent, rc.Name, image,
		[]string{OperatorBinary, RestoreCommand, "--data-dir=" + dataDir, "--aof=" + strconv.FormatBool(AppendOnly(rc)),
			"--source-dir=" + backupDir, "--for-node=" + FirstNodeName(rc, shard)},
		[]corev1.Volume{
			claimVolume(dataVolume, FirstDataClaimName(rc, shard), false),
			claimVolume(backupVolume, r.Destination.PersistentVolumeClaim.ClaimName, true),
		},
		[]corev1.VolumeMount{{Name: dataVolume, MountPath: dataDir}, {Name: backupVolume, MountPath: backupDir, ReadOnly: true}})
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: EnvRestoreLocation, Value: location},
		{Name: EnvRestoreChecksum, Value: checksum},
	}
	return pod
}

// FirstDataClaim is the data claim of shard's first node (FirstDataClaimName) as the
// StatefulSet's claim template would create it, for a restore to fill before the StatefulSet
// exists; the StatefulSet uses a claim of that name that is already there.
func FirstDataClaim(rc *cachev1.RedisCluster, shard int) *corev1.PersistentVolumeClaim {
	st := rc.Spec.Storage
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: FirstDataClaimName(rc, shard), Namespace: rc.Namespace, Labels: Labels(rc)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: st.Size}},
			StorageClassName: st.StorageClassName,
		},
	}
	return claim
}

func volumeTaskPod(name, namespace string, owner metav1.OwnerReference, component, cluster, image string, command []string,
	volumes []corev1.Volume, mounts []corev1.VolumeMount) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			// Not the nodes' instance label: these pods are no Redis node of the cluster.
			Labels: map[string]string{LabelName: nameValue, LabelManagedBy: ManagedByValue, LabelComponent: component,
				LabelBackupCluster: cluster},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// The files are the redis user's, as the nodes' own are: a node reads what a
			// restore wrote.
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](redisUID), RunAsGroup: ptr.To[int64](redisUID),
				FSGroup: ptr.To[int64](redisUID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: component, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: command, VolumeMounts: mounts,
				TerminationMessagePath:   TerminationLog,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: volumes,
		},
	}
}

func claimVolume(name, claim string, readOnly bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
		ClaimName: claim, ReadOnly: readOnly}}}
}

// controllerOf makes obj, of kind in our group, the controller of a pod: deleting it deletes
// the pod, and the pod's changes requeue it.
func controllerOf(kind string, obj metav1.Object) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: cachev1.GroupVersion.String(), Kind: kind, Name: obj.GetName(), UID: obj.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}
