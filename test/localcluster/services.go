package localcluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceEndpoints are the addresses (ip:port) a Service sends clients to: its EndpointSlices'
// ready endpoints, what kube-proxy routes the ClusterIP to.
func (c *Cluster) ServiceEndpoints(ctx context.Context, namespace, service string) ([]string, error) {
	endpoints, err := c.readyEndpoints(ctx, namespace, service)
	var addrs []string
	for _, e := range endpoints {
		addrs = append(addrs, net.JoinHostPort(e.ip, strconv.Itoa(e.port)))
	}
	return addrs, err
}

// endpoint is one ready address of a Service: a pod's IP at the Service's target port.
type endpoint struct {
	ip, pod string
	port    int
}

// readyEndpoints are the ready, not terminating endpoints of a Service's EndpointSlices.
func (c *Cluster) readyEndpoints(ctx context.Context, namespace, service string) ([]endpoint, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.Client.List(ctx, slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s: %w", service, err)
	}
	var endpoints []endpoint
	for _, s := range slices.Items {
		if len(s.Ports) == 0 || s.Ports[0].Port == nil {
			continue
		}
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, false) || ptr.Deref(e.Conditions.Terminating, false) {
				continue
			}
			pod := ""
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				pod = e.TargetRef.Name
			}
			for _, a := range e.Addresses {
				endpoints = append(endpoints, endpoint{ip: a, pod: pod, port: int(*s.Ports[0].Port)})
			}
		}
	}
	return endpoints, nil
}

// SecretValue reads one key of a Secret.
func (c *Cluster) SecretValue(ctx context.Context, namespace, name, key string) (string, error) {
	s := &corev1.Secret{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		return "", err
	}
	return string(s.Data[key]), nil
}

// WaitServiceEndpoints waits until the Service has exactly want ready endpoints (at least one
// when want is 0) and returns them.
func (c *Cluster) WaitServiceEndpoints(ctx context.Context, namespace, service string, want int) ([]string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		addrs, err := c.ServiceEndpoints(ctx, namespace, service)
		if err == nil && len(addrs) > 0 && (want == 0 || len(addrs) == want) {
			return addrs, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("service %s: %w", service, err)
			}
			return addrs, fmt.Errorf("service %s has endpoints %v, want %d", service, addrs, want)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PodBehind is the pod a single-endpoint Service sends clients to now; "" when it sends them
// to none, or to more than one.
func (c *Cluster) PodBehind(ctx context.Context, namespace, service string) (string, error) {
	endpoints, err := c.readyEndpoints(ctx, namespace, service)
	if err != nil || len(endpoints) != 1 {
		return "", err
	}
	return endpoints[0].pod, nil
}
