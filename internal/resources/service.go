package resources

import (
	"cmp"

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
// LoadBalancer) so that the in-cluster Services never change with spec.expose. Cluster mode has
// one per node instead (DesiredNodeServices).
func DesiredExternalServices(rc *cachev1.RedisCluster) []*corev1ac.ServiceApplyConfiguration {
	if rc.Spec.Expose == nil || rc.Spec.Cluster != nil {
		return nil
	}
	return []*corev1ac.ServiceApplyConfiguration{
		exposed(rc, roleService(rc, ExternalServiceName(rc), "external", RolePrimary)),
		exposed(rc, roleService(rc, ExternalReplicasServiceName(rc), "external-replicas", RoleReplica)),
	}
}

// exposed makes svc of spec.expose's type, with its annotations and source ranges.
func exposed(rc *cachev1.RedisCluster, svc *corev1ac.ServiceApplyConfiguration) *corev1ac.ServiceApplyConfiguration {
	expose := rc.Spec.Expose
	if len(expose.Annotations) > 0 {
		svc.WithAnnotations(expose.Annotations)
	}
	svc.Spec.WithType(corev1.ServiceType(expose.Type))
	if expose.Type == cachev1.ExposeLoadBalancer && len(expose.LoadBalancerSourceRanges) > 0 {
		svc.Spec.WithLoadBalancerSourceRanges(expose.LoadBalancerSourceRanges...)
	}
	return svc
}

// DesiredNodeServices are, in cluster mode with spec.expose, one Service per node, each
// selecting its one pod, for the pods named: a cluster client outside follows the address each
// node announces (MOVED, CLUSTER SLOTS), and that address is its Service's. The nodes reach each
// other there too (Redis 7.0 announces one address for its clients, its replicas and the bus),
// so the bus port is published beside Redis's, and pods that are not ready are published: a node
// that is starting, or that the cluster has not admitted yet, must still be reached by its peers.
func DesiredNodeServices(rc *cachev1.RedisCluster, pods []string) []*corev1ac.ServiceApplyConfiguration {
	if rc.Spec.Expose == nil || rc.Spec.Cluster == nil {
		return nil
	}
	var out []*corev1ac.ServiceApplyConfiguration
	for _, pod := range pods {
		selector := SelectorLabels(rc)
		selector[LabelPodName] = pod
		out = append(out, exposed(rc, corev1ac.Service(NodeServiceName(pod), rc.Namespace).
			WithLabels(labelsWithComponent(rc, NodeServiceComponent)).
			WithOwnerReferences(ownerReference(rc)).
			WithSpec(corev1ac.ServiceSpec().
				WithSelector(selector).
				WithPublishNotReadyAddresses(true).
				WithPorts(redisServicePort(), corev1ac.ServicePort().
					WithName("bus").
					WithProtocol(corev1.ProtocolTCP).
					WithPort(BusPort).
					WithTargetPort(intstr.FromInt32(BusPort))))))
	}
	return out
}

// NodeOutside is the address clients outside reach a node at through its Service (svc): its
// Kubernetes node's address (hostIP) and the two node ports for a NodePort, the load balancer's
// address and the Service's ports for a LoadBalancer. ok is false while that is not known yet
// (no node port allocated, no load balancer address, the pod not scheduled) or when the load
// balancer gives only a hostname, which the cluster bus cannot use.
func NodeOutside(svc *corev1.Service, hostIP string) (ip string, port, bus int32, ok bool) {
	var redisPort, busPort corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		switch p.Name {
		case "redis":
			redisPort = p
		case "bus":
			busPort = p
		}
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		ip, port, bus = hostIP, redisPort.NodePort, busPort.NodePort
	case corev1.ServiceTypeLoadBalancer:
		if ingress := svc.Status.LoadBalancer.Ingress; len(ingress) > 0 {
			ip = ingress[0].IP
		}
		port, bus = redisPort.Port, busPort.Port
	}
	return ip, port, bus, ip != "" && port != 0 && bus != 0
}

// OutsideAddress is an address clients outside the Kubernetes cluster dial, and the Service
// that gives it.
type OutsideAddress struct {
	Service string
	// Host is an IP address, or a DNS name (a load balancer that gives only a name); empty while
	// the Service has none yet.
	Host string
	// AnyNode is true for a NodePort Service of replication mode: it is reached at every
	// Kubernetes node's address, of which each client chooses one.
	AnyNode bool
}

// ExternalOutside is where clients outside dial replication mode's external Service svc: its
// load balancer's address (or name, when it gives only one), or any node's for a NodePort.
func ExternalOutside(svc *corev1.Service) OutsideAddress {
	out := OutsideAddress{Service: svc.Name}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		out.AnyNode = true
	case corev1.ServiceTypeLoadBalancer:
		if ingress := svc.Status.LoadBalancer.Ingress; len(ingress) > 0 {
			out.Host = cmp.Or(ingress[0].IP, ingress[0].Hostname)
		}
	}
	return out
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
