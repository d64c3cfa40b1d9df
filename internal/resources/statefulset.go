package resources

import (
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

const (
	// redisUID is the uid and gid of the redis user in the official image.
	redisUID = 999

	configVolume = "config"
	authVolume   = "auth"
	dataVolume   = "data"
	tlsVolume    = "tls"
	// TLSDir is where the pod mounts spec.tls's Secret.
	TLSDir    = "/etc/redis-tls"
	configDir = "/etc/redis"
	dataDir   = "/data"
)

// StatefulSetOptions are what the controller decides beyond the spec.
type StatefulSetOptions struct {
	// Replicas is spec.replicas, or more while the primary must first move off a pod that a
	// scale-in would remove.
	Replicas int32
	// ConfigHash is ConfigHash of what the nodes read at start.
	ConfigHash string
	// OperatorImage runs the restore init container of a RedisCluster created from a backup.
	OperatorImage string
	// Restore is the backup a RedisCluster with spec.restore is created from, as recorded in
	// its status; nil until it is read.
	Restore *cachev1.RestoreStatus
	// Shard is, in cluster mode, the shard whose StatefulSet this is.
	Shard int
	// RedisImages are the operator's Redis images by version, for a RedisCluster without
	// spec.image.
	RedisImages RedisImages
}

// DesiredStatefulSet runs the Redis nodes of a RedisCluster: one pod per replica, each with a
// stable name, under the restricted Pod Security Standard. Pods are replaced by the operator
// (OnDelete), replicas first and the primary after a switchover, never by the StatefulSet
// controller's own order.
//
// In cluster mode each shard is a StatefulSet of its own, <name>-shard<i>, whose pods carry
// the shard's label: a shard's nodes stay together whatever the others do.
func DesiredStatefulSet(rc *cachev1.RedisCluster, opts StatefulSetOptions) *appsv1ac.StatefulSetApplyConfiguration {
	name, selector, labels := StatefulSetName(rc), SelectorLabels(rc), Labels(rc)
	if rc.Spec.Cluster != nil {
		name = ShardStatefulSetName(rc, opts.Shard)
		selector[LabelShard], labels[LabelShard] = strconv.Itoa(opts.Shard), strconv.Itoa(opts.Shard)
	}
	spec := appsv1ac.StatefulSetSpec().
		WithReplicas(opts.Replicas).
		WithServiceName(HeadlessServiceName(rc)).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
		// Pods start together: a replica does not wait for the one before it to be ready.
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(labels).
			WithAnnotations(map[string]string{ConfigHashAnnotation: opts.ConfigHash}).
			WithSpec(podSpec(rc, opts)))
	if st := rc.Spec.Storage; st != nil {
		claim := corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: st.Size}))
		if st.StorageClassName != nil {
			claim.WithStorageClassName(*st.StorageClassName)
		}
		// As the API server keeps a claim template: no kind, apiVersion or namespace of its own,
		// and a filesystem (the default, said here since the templates are one atomic list: what
		// the API server fills in is ours, and would differ from what we apply).
		claim.WithVolumeMode(corev1.PersistentVolumeFilesystem)
		spec.WithVolumeClaimTemplates((&corev1ac.PersistentVolumeClaimApplyConfiguration{}).
			WithName(dataVolume).
			WithLabels(Labels(rc)).
			WithSpec(claim)).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(retention(st.WhenDeleted)).
				WithWhenScaled(retention(st.WhenScaled)))
	}
	return appsv1ac.StatefulSet(name, rc.Namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(spec)
}

func retention(r cachev1.PVCRetention) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if r == cachev1.PVCDelete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

func podSpec(rc *cachev1.RedisCluster, opts StatefulSetOptions) *corev1ac.PodSpecApplyConfiguration {
	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(TerminationGracePeriod).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(redisUID).
			WithRunAsGroup(redisUID).
			WithFSGroup(redisUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithContainers(redisContainer(rc, opts.RedisImages)).
		WithVolumes(
			corev1ac.Volume().WithName(configVolume).
				WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName(rc))),
			corev1ac.Volume().WithName(authVolume).
				WithSecret(corev1ac.SecretVolumeSource().WithSecretName(AuthConfSecretName(rc)).WithDefaultMode(0o440)),
		)
	if rc.Spec.Storage == nil {
		pod.WithVolumes(corev1ac.Volume().WithName(dataVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	}
	if c := restoreContainer(rc, opts.Restore, opts.OperatorImage, RestoreNameOf(rc, opts.Shard)); c != nil {
		pod.WithInitContainers(c).WithVolumes(restoreVolumes(rc, opts.Restore)...)
	}
	if rc.Spec.TLS != nil {
		// The kubelet keeps the files in step with the Secret; the operator then has each
		// running node load them (Redis does not watch its files).
		pod.WithVolumes(corev1ac.Volume().WithName(tlsVolume).
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(rc.Spec.TLS.SecretName).WithDefaultMode(0o440)))
	}
	if len(rc.Spec.NodeSelector) > 0 {
		pod.WithNodeSelector(rc.Spec.NodeSelector)
	}
	for i := range rc.Spec.Tolerations {
		pod.WithTolerations(toleration(rc.Spec.Tolerations[i]))
	}
	placement(pod, rc, opts)
	return pod
}

// placement says where the pods go: the user's affinity and spread constraints when given,
// each replacing its default. By default (as CloudNativePG's), the pods of one shard (in
// replication mode, every pod) prefer nodes apart (pod anti-affinity by hostname), so that one
// machine's loss takes at most one copy of the data where the nodes allow it; and all the
// RedisCluster's pods spread over nodes and zones where the scheduler can (whenUnsatisfiable
// ScheduleAnyway: fewer nodes than pods still run them all).
func placement(pod *corev1ac.PodSpecApplyConfiguration, rc *cachev1.RedisCluster, opts StatefulSetOptions) {
	if rc.Spec.Affinity != nil {
		pod.WithAffinity(affinity(rc.Spec.Affinity))
	} else {
		together := SelectorLabels(rc)
		if rc.Spec.Cluster != nil {
			together[LabelShard] = strconv.Itoa(opts.Shard)
		}
		pod.WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
			WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
				WithWeight(100).
				WithPodAffinityTerm(corev1ac.PodAffinityTerm().
					WithTopologyKey(corev1.LabelHostname).
					WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(together))))))
	}
	if len(rc.Spec.TopologySpreadConstraints) > 0 {
		for i := range rc.Spec.TopologySpreadConstraints {
			pod.WithTopologySpreadConstraints(spreadConstraint(rc.Spec.TopologySpreadConstraints[i]))
		}
		return
	}
	for _, key := range []string{corev1.LabelHostname, corev1.LabelTopologyZone} {
		pod.WithTopologySpreadConstraints(corev1ac.TopologySpreadConstraint().
			WithMaxSkew(1).
			WithTopologyKey(key).
			WithWhenUnsatisfiable(corev1.ScheduleAnyway).
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(rc))))
	}
}

// crashedPrimaryWait is how long, in cluster mode without a volume and with replicas, a primary
// whose Redis restarted in its pod waits before it starts again: twice the node timeout (the
// cluster agrees it failed) and the election of its replica (rank 0: within a second), rounded
// up to whole seconds. Zero when it has no replica to wait for, or keeps its data on a volume.
func crashedPrimaryWait(rc *cachev1.RedisCluster) time.Duration {
	if rc.Spec.Cluster == nil || rc.Spec.Storage != nil || rc.Spec.Replicas < 2 {
		return 0
	}
	timeout := DefaultClusterNodeTimeout
	if t := rc.Spec.Cluster.NodeTimeout; t != nil {
		timeout = t.Duration
	}
	return (2*timeout + 2*time.Second + time.Second - 1).Truncate(time.Second)
}

func redisContainer(rc *cachev1.RedisCluster, images RedisImages) *corev1ac.ContainerApplyConfiguration {
	port := intstr.FromString("redis")
	c := corev1ac.Container().
		WithName(RedisContainerName).
		WithImage(Image(rc, images)).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("redis-server", configDir+"/"+ConfigFileName).
		// Redis says why it refuses to start (a bad directive) in its last log lines: the
		// kubelet keeps them as the termination message, which the operator reports.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithLifecycle(handoverHook(rc)).
		WithPorts(corev1ac.ContainerPort().WithName("redis").WithContainerPort(RedisPort).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(port)).
			WithPeriodSeconds(2).
			WithFailureThreshold(2)).
		WithLivenessProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(port)).
			WithInitialDelaySeconds(10).
			WithPeriodSeconds(10).
			WithFailureThreshold(3)).
		WithResources(resourceRequirements(rc.Spec.Resources)).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(configVolume).WithMountPath(configDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(authVolume).WithMountPath(AuthDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(dataVolume).WithMountPath(dataDir),
		)
	if rc.Spec.TLS != nil {
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSDir).WithReadOnly(true))
	}
	if wait := crashedPrimaryWait(rc); wait > 0 {
		// Without a volume a Redis that crashed (killed, out of memory) comes back empty in
		// the same pod, while nodes.conf, in the pod's emptyDir, still makes it its slots'
		// primary: back within the node timeout, it would serve its slots empty, and its
		// replica would copy the emptiness. So a node whose nodes.conf says it was a primary
		// (only a restart in the same pod has one) waits until Redis Cluster has promoted its
		// replica, which holds the keys; then it starts, learns that its slots have a newer
		// owner, and replicates it. The startup probe gives it that long before the liveness
		// probe begins.
		waits := `*myself,master*`
		if rc.Spec.Expose != nil {
			// With spec.expose a replaced pod keeps its Service's address, and a replica
			// replicates an address: a new, empty node answering there at once would be
			// the replica's primary again, and the replica would copy its emptiness (the
			// old node, whose address now answers with another ID, is never marked
			// failed). So a new pod (no nodes.conf) waits as well: its Service answers
			// nothing until its old node, if it was a primary, has been failed over.
			waits += `|""`
		}
		c.Command = []string{"/bin/sh", "-c", `case "$(cat ` + dataDir + `/nodes.conf 2>/dev/null)" in ` + waits + `) sleep ` +
			strconv.Itoa(int(wait.Seconds())) + `;; esac; exec redis-server ` + configDir + "/" + ConfigFileName + ` "$@"`, "redis-server"}
		c.WithStartupProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("redis"))).
			WithPeriodSeconds(2).
			WithFailureThreshold(int32(wait.Seconds())/2 + 15))
	}
	if rc.Spec.Cluster != nil {
		// Each node tells the others its pod IP, which the file cannot hold. (apiVersion is
		// the API server's default, given here so that the applied StatefulSet never drifts.)
		c.WithEnv(corev1ac.EnvVar().WithName("POD_IP").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("status.podIP")))).
			WithArgs("--cluster-announce-ip", "$(POD_IP)")
	}
	return c
}
