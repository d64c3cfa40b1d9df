package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

func redisServicePort() *corev1ac.ServicePortApplyConfiguration {
	return corev1ac.ServicePort().
		WithName("redis").
		WithProtocol(corev1.ProtocolTCP).
		WithPort(RedisPort).
		WithTargetPort(intstr.FromString("redis"))
}

// DesiredHeadlessService gives every pod a stable DNS name,
// <pod>.<name>-headless.<namespace>.svc, which survives a restart with a new IP.
// It publishes pods before they are ready: replicas find their primary while it still loads.
func DesiredHeadlessService(rc *cachev1.RedisCluster) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(HeadlessServiceName(rc), rc.Namespace).
		WithLabels(labelsWithComponent(rc, "headless")).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(SelectorLabels(rc)).
			WithPorts(redisServicePort()))
}

// DesiredClientService is the address applications connect to.
func DesiredClientService(rc *cachev1.RedisCluster) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(ClientServiceName(rc), rc.Namespace).
		WithLabels(labelsWithComponent(rc, "client")).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(SelectorLabels(rc)).
			WithPorts(redisServicePort()))
}
