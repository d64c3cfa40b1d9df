package resources

import (
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
	dataVolume   = "data"
	configDir    = "/etc/redis"
	dataDir      = "/data"
)

// DesiredStatefulSet runs the Redis nodes of a RedisCluster: one pod per replica, each with a
// stable name, under the restricted Pod Security Standard.
func DesiredStatefulSet(rc *cachev1.RedisCluster) *appsv1ac.StatefulSetApplyConfiguration {
	podLabels := Labels(rc)
	return appsv1ac.StatefulSet(StatefulSetName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(rc.Spec.Replicas).
			WithServiceName(HeadlessServiceName(rc)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(rc))).
			// Pods start together: a replica does not wait for the one before it to be ready.
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
				WithType(appsv1.RollingUpdateStatefulSetStrategyType)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithAnnotations(map[string]string{ConfigHashAnnotation: ConfigHash(RedisConf(rc))}).
				WithSpec(podSpec(rc))))
}

func podSpec(rc *cachev1.RedisCluster) *corev1ac.PodSpecApplyConfiguration {
	return corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(30).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(redisUID).
			WithRunAsGroup(redisUID).
			WithFSGroup(redisUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithContainers(redisContainer(rc)).
		WithVolumes(
			corev1ac.Volume().WithName(configVolume).
				WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName(rc))),
			corev1ac.Volume().WithName(dataVolume).
				WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		)
}

func redisContainer(rc *cachev1.RedisCluster) *corev1ac.ContainerApplyConfiguration {
	port := intstr.FromString("redis")
	return corev1ac.Container().
		WithName("redis").
		WithImage(Image(rc)).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("redis-server", configDir+"/"+ConfigFileName).
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
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(configVolume).WithMountPath(configDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(dataVolume).WithMountPath(dataDir),
		)
}
