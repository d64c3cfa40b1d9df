package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// The restore of spec.restore: an init container, running the operator's own image with its
// restore subcommand, fetches the backup's snapshot into the first node's data directory, checks
// it and lays it out before Redis starts. What to fetch is in the ConfigMap <name>-restore,
// which the container reads as its environment (optional): the operator deletes it once the
// first node serves the data, and the container then does nothing. So the pod template never
// changes for the restore, and nothing is restored twice.

const (
	restoreContainerName = "restore"
	restoreCAVolume      = "restore-ca"
	restoreCADir         = "/etc/redis-restore-ca"

	// The environment of the restore container, from the <name>-restore ConfigMap.
	EnvRestoreLocation = "RESTORE_LOCATION"
	EnvRestoreChecksum = "RESTORE_CHECKSUM"
	EnvRestoreEndpoint = "RESTORE_ENDPOINT"
	EnvRestoreRegion   = "RESTORE_REGION"
	// EnvPodName is the pod's name: only the first node restores.
	EnvPodName = "POD_NAME"

	// OperatorBinary is the operator's binary in its image.
	OperatorBinary = "/manager"
	// RestoreCommand is the operator's subcommand that restores a snapshot.
	RestoreCommand = "restore"
)

// RestoreNameOf names what restores shard's first node (in replication mode, shard ignored, the
// first node's): the ConfigMap that says what to fetch from S3, or the pod that copies the
// snapshot from a volume. <name>-restore, and in cluster mode <name>-shard<i>-restore.
func RestoreNameOf(rc *cachev1.RedisCluster, shard int) string {
	return StatefulSetNameOf(rc, shard) + "-restore"
}

// RestoreNames name what restores each first node: one, or one per shard.
func RestoreNames(rc *cachev1.RedisCluster) []string {
	if rc.Spec.Cluster == nil {
		return []string{RestoreNameOf(rc, 0)}
	}
	var out []string
	for i := range int(rc.Spec.Cluster.Shards) {
		out = append(out, RestoreNameOf(rc, i))
	}
	return out
}

// RestoredSnapshot is the location and checksum of the snapshot shard's first node restores (in
// replication mode, shard ignored, the backup's one snapshot); empty for a shard the backup does
// not hold (one added while the restore runs: it starts empty).
func RestoredSnapshot(rc *cachev1.RedisCluster, r *cachev1.RestoreStatus, shard int) (location, checksum string) {
	switch {
	case rc.Spec.Cluster == nil:
		return r.Location, r.Checksum
	case shard >= len(r.Shards):
		return "", ""
	}
	return r.Shards[shard].Location, r.Shards[shard].Checksum
}

// DesiredRestoreConfigMaps say what the restore containers fetch: the snapshot recorded in
// status.restore when the cluster was created, in an S3 bucket; in cluster mode, one ConfigMap
// per shard, with its shard's snapshot.
func DesiredRestoreConfigMaps(rc *cachev1.RedisCluster, r *cachev1.RestoreStatus) []*corev1ac.ConfigMapApplyConfiguration {
	var out []*corev1ac.ConfigMapApplyConfiguration
	for shard, name := range RestoreNames(rc) {
		location, checksum := RestoredSnapshot(rc, r, shard)
		out = append(out, corev1ac.ConfigMap(name, rc.Namespace).
			WithLabels(Labels(rc)).
			WithOwnerReferences(ownerReference(rc)).
			WithData(map[string]string{
				EnvRestoreLocation: location,
				EnvRestoreChecksum: checksum,
				EnvRestoreEndpoint: r.Destination.S3.Endpoint,
				EnvRestoreRegion:   r.Destination.S3.Region,
			}))
	}
	return out
}

// AppendOnly says whether the nodes run with appendonly yes: with persistence, unless
// spec.config says otherwise.
func AppendOnly(rc *cachev1.RedisCluster) bool {
	if v, ok := rc.Spec.Config["appendonly"]; ok {
		return v == "yes"
	}
	return rc.Spec.Storage != nil
}

// restoreContainer is the init container of a RedisCluster created from a backup; nil without
// spec.restore. The credentials' keys are optional, as the ConfigMap is: once the data is
// restored, the Secret may go without stopping a pod from starting.
func restoreContainer(rc *cachev1.RedisCluster, r *cachev1.RestoreStatus, image, configMap string) *corev1ac.ContainerApplyConfiguration {
	// A restore from a volume fills the first node's claim before the StatefulSet exists
	// (RestorePod): the nodes never mount the backup's claim.
	if rc.Spec.Restore == nil || r == nil || r.Destination.S3 == nil {
		return nil
	}
	s3 := r.Destination.S3
	secretKey := func(key string) *corev1ac.EnvVarApplyConfiguration {
		return corev1ac.EnvVar().WithName(key).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(s3.CredentialsSecret).WithKey(key).WithOptional(true)))
	}
	args := []string{"--data-dir=" + dataDir, "--aof=" + strconv.FormatBool(AppendOnly(rc))}
	c := corev1ac.Container().
		WithName(restoreContainerName).
		WithImage(image).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand(OperatorBinary, RestoreCommand).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithEnv(
			corev1ac.EnvVar().WithName(EnvPodName).WithValueFrom(corev1ac.EnvVarSource().
				WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
			secretKey(cachev1.S3AccessKeyIDKey),
			secretKey(cachev1.S3SecretAccessKeyKey),
		).
		WithEnvFrom(corev1ac.EnvFromSource().WithConfigMapRef(
			corev1ac.ConfigMapEnvSource().WithName(configMap).WithOptional(true))).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(dataVolume).WithMountPath(dataDir))
	if ca := s3.CABundle; ca != nil {
		args = append(args, "--ca-file="+restoreCADir+"/"+SecretKey(*ca))
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(restoreCAVolume).WithMountPath(restoreCADir).WithReadOnly(true))
	}
	return c.WithArgs(args...)
}

// restoreVolumes are the volumes of the restore container beyond the data: the CA bundle.
func restoreVolumes(rc *cachev1.RedisCluster, r *cachev1.RestoreStatus) []*corev1ac.VolumeApplyConfiguration {
	if rc.Spec.Restore == nil || r == nil || r.Destination.S3 == nil || r.Destination.S3.CABundle == nil {
		return nil
	}
	return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(restoreCAVolume).
		WithSecret(corev1ac.SecretVolumeSource().WithSecretName(r.Destination.S3.CABundle.Name).
			WithDefaultMode(0o440).WithOptional(true))}
}

// SecretKey is the key a SecretKeyRef names: its key, or "password" when it names none (the
// API defaults it; an object written before the default, or built in code, may lack it).
func SecretKey(ref cachev1.SecretKeyRef) string {
	if ref.Key == "" {
		return PasswordKey
	}
	return ref.Key
}
