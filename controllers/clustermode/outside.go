package clustermode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Clients outside the Kubernetes cluster (spec.expose) follow the addresses the nodes hand out
// (MOVED, ASK, CLUSTER SHARDS and SLOTS): each node gets a Service of its own, and announces that
// Service's address. Redis 7.0 announces one address, which its peers use for the bus and its
// replicas to replicate too, so inside and outside share it: a node restarted on the same
// Kubernetes node (NodePort) or behind the same load balancer address keeps its address, and
// kube-proxy forwards the nodes' own traffic as it does the clients'.

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete

// Outside applies, with spec.expose, the Service of each node (of each pod the spec asks for,
// and of each pod still running while its shard drains), and says what each node announces:
// its Service's address once that is known (a node port allocated, a load balancer address
// given), else what it announces now. The Shards phase has them announce it (it runs even when
// a Service is refused: what the nodes announce comes from the Services as they are). Without
// spec.expose every node announces its pod's own address again, and the Services are deleted
// once no node is reached through them any more.
func Outside(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	rc := c.RC
	live, err := nodeServices(ctx, c)
	if err != nil {
		return err
	}
	var pods []string
	if rc.Spec.Expose != nil {
		pods = outsidePods(rc, s.Members)
	}
	wanted := map[string]bool{}
	for _, pod := range pods {
		wanted[resources.NodeServiceName(pod)] = true
	}
	hostIPs := map[string]string{}
	for _, p := range c.Pods {
		hostIPs[p.Name] = p.Status.HostIP
	}
	for i := range s.Members {
		mb := &s.Members[i]
		if rc.Spec.Expose == nil {
			mb.Announce = mb.Own()
			continue
		}
		if svc, ok := live[resources.NodeServiceName(mb.Pod)]; ok {
			if ip, port, bus, ok := resources.NodeOutside(svc, hostIPs[mb.Pod]); ok {
				mb.Announce = shards.Announced{IP: ip, Port: int(port), BusPort: int(bus)}
			}
		}
	}
	c.Outside = outsideAddresses(rc, pods, live, hostIPs)
	for _, desired := range resources.DesiredNodeServices(rc, pods) {
		svc, read := live[*desired.Name]
		if !read {
			svc = &corev1.Service{}
		}
		err := scope.Apply(ctx, c, "Service", scope.Child[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
			Desired: desired, Name: c.NameOf(*desired.Name), Live: svc, Read: read, Extract: corev1ac.ExtractService,
		})
		if err != nil {
			return err
		}
	}
	// A Service goes once its node is gone, or, without spec.expose, once every node is
	// reached at its pod's address: deleted earlier, it would cut the nodes off each other.
	retire := rc.Spec.Expose != nil || shards.AtOwnAddresses(s.Members)
	for _, name := range slices.Sorted(maps.Keys(live)) {
		if wanted[name] || !retire {
			continue
		}
		svc := live[name]
		if err := c.Client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Service %s: %w", name, err)
		}
		c.Deleted(ctx, "Service", svc)
	}
	return nil
}

// outsideAddresses are where clients outside reach each pod's node, as its Service gives it now
// (for the Exposed condition); a node whose Service has none yet (or is not there yet) is pending.
// nil without spec.expose.
func outsideAddresses(rc *cachev1.RedisCluster, pods []string, live map[string]*corev1.Service, hostIPs map[string]string) []resources.OutsideAddress {
	if rc.Spec.Expose == nil {
		return nil
	}
	out := []resources.OutsideAddress{}
	for _, pod := range pods {
		a := resources.OutsideAddress{Service: resources.NodeServiceName(pod)}
		if svc, ok := live[a.Service]; ok {
			if ip, _, _, ok := resources.NodeOutside(svc, hostIPs[pod]); ok {
				a.Host = ip
			}
		}
		out = append(out, a)
	}
	return out
}

// outsidePods are the pods whose nodes have a Service with spec.expose: every pod the spec
// asks for, and every pod that runs (a shard being drained still serves its slots).
func outsidePods(rc *cachev1.RedisCluster, members []shards.Member) []string {
	var pods []string
	for shard := range int(rc.Spec.Cluster.Shards) {
		for ordinal := range int(rc.Spec.Replicas) {
			pods = append(pods, resources.ShardStatefulSetName(rc, shard)+"-"+strconv.Itoa(ordinal))
		}
	}
	for _, m := range members {
		if !slices.Contains(pods, m.Pod) {
			pods = append(pods, m.Pod)
		}
	}
	return pods
}

// nodeServices are the Services of one node each that the RedisCluster controls, by name.
func nodeServices(ctx context.Context, c *scope.Cluster) (map[string]*corev1.Service, error) {
	rc := c.RC
	list := &corev1.ServiceList{}
	selector := resources.SelectorLabels(rc)
	selector[resources.LabelComponent] = resources.NodeServiceComponent
	if err := c.Client.List(ctx, list, client.InNamespace(rc.Namespace), client.MatchingLabels(selector)); err != nil {
		return nil, fmt.Errorf("listing the nodes' Services: %w", err)
	}
	out := map[string]*corev1.Service{}
	for i := range list.Items {
		if svc := &list.Items[i]; metav1.IsControlledBy(svc, rc) {
			out[svc.Name] = svc
		}
	}
	return out, nil
}
