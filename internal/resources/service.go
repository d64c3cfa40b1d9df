package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

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

// DesiredClientService is the address applications write to: it selects the one pod labelled
// primary. In cluster mode it selects every node: any node answers a cluster client, and
// sends it on (MOVED, ASK) to the node that serves a key.
func DesiredClientService(rc *cachev1.RedisCluster) *corev1ac.ServiceApplyConfiguration {
	if rc.Spec.Cluster != nil {
		return corev1ac.Service(ClientServiceName(rc), rc.Namespace).
			WithLabels(labelsWithComponent(rc, "client")).
			WithOwnerReferences(ownerReference(rc)).
			WithSpec(corev1ac.ServiceSpec().
				WithType(corev1.ServiceTypeClusterIP).
				WithSelector(SelectorLabels(rc)).
				WithPorts(redisServicePort()))
	}
	return roleService(rc, ClientServiceName(rc), "client", RolePrimary)
}

// DesiredReplicasService is the address for reads that may lag: it selects the replicas whose
// link to the primary is up.
func DesiredReplicasService(rc *cachev1.RedisCluster) *corev1ac.ServiceApplyConfiguration {
	return roleService(rc, ReplicasServiceName(rc), "replicas", RoleReplica)
}

func roleService(rc *cachev1.RedisCluster, name, component, role string) *corev1ac.ServiceApplyConfiguration {
	selector := SelectorLabels(rc)
	selector[LabelRole] = role
	return corev1ac.Service(name, rc.Namespace).
		WithLabels(labelsWithComponent(rc, component)).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(selector).
			WithPorts(redisServicePort()))
}

// DesiredExternalServices are the Services clients outside the Kubernetes cluster connect to
// (spec.expose), none without it: in replication mode one that follows the primary, as the
// client Service does, and one for the replicas. They are of their own type (NodePort or
// LoadBalancer) so that the in-cluster Services never change with spec.expose.
func DesiredExternalServices(rc *cachev1.RedisCluster) []*corev1ac.ServiceApplyConfiguration {
	expose := rc.Spec.Expose
	if expose == nil || rc.Spec.Cluster != nil {
		return nil
	}
	services := []*corev1ac.ServiceApplyConfiguration{
		roleService(rc, ExternalServiceName(rc), "external", RolePrimary),
		roleService(rc, ExternalReplicasServiceName(rc), "external-replicas", RoleReplica),
	}
	for _, svc := range services {
		if len(expose.Annotations) > 0 {
			svc.WithAnnotations(expose.Annotations)
		}
		svc.Spec.WithType(corev1.ServiceType(expose.Type))
		if expose.Type == cachev1.ExposeLoadBalancer && len(expose.LoadBalancerSourceRanges) > 0 {
			svc.Spec.WithLoadBalancerSourceRanges(expose.LoadBalancerSourceRanges...)
		}
	}
	return services
}

// DesiredPodDisruptionBudget lets a voluntary disruption (a node drain) take one Redis node at a time.
func DesiredPodDisruptionBudget(rc *cachev1.RedisCluster) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(rc.Name, rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(rc))))
}
