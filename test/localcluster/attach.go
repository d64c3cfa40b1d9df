package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Attach takes an existing cluster (kind, a cloud cluster) that kubeconfig reaches, as
// kubebuilder's e2e scaffold does, instead of starting the local one: it installs the CRDs,
// grants the operator's ServiceAccount what the CSV grants and deploys the operator as the CSV's
// Deployment with image (the CSV's when ""), which that cluster must be able to pull. Nothing on
// this machine is started; the tests reach pods through the API server (Dial), and those that
// need the local node (its processes, its containers, a server on this machine) skip.
func Attach(ctx context.Context, root, kubeconfig, image string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	c := &Cluster{ControlPlane: &ControlPlane{AdminKubeconfig: kubeconfig, AdminConfig: cfg}, Root: root,
		ServiceAccount: "redis-operator-controller-manager", attached: true}
	if c.Client, err = client.New(cfg, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	deployment, err := operatorDeployment(root)
	if err != nil {
		return nil, err
	}
	if image != "" {
		deployment.Spec.Template.Spec.Containers[0].Image = image
	}
	if err := c.installCRDs(); err != nil {
		return nil, err
	}
	if err := c.grantOperatorPermissions(ctx); err != nil {
		return nil, err
	}
	return c, c.deployOperator(ctx, deployment)
}

// Local says whether the cluster runs on this machine (StartOnRealNode, StartWithOLM): its
// node's processes, containers and network are the tests' to reach.
func (c *Cluster) Local() bool { return c.real != nil }

// Dial connects to an address in the cluster (a ClusterIP or a pod's IP, at a port), as a client
// there would: on the local node from inside its network namespace, where kube-proxy routes
// ClusterIPs; on an attached cluster through the API server's port-forward to the pod behind it
// (a ready endpoint of the Service with that ClusterIP, as kubectl port-forward svc/... picks).
func (c *Cluster) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if c.real != nil {
		return c.real.netns.Dial(ctx, network, address)
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, err
	}
	namespace, pod, podPort, err := c.podAt(ctx, host, port)
	if err != nil {
		return nil, err
	}
	return DialPod(ctx, c.AdminConfig, namespace, pod, podPort)
}

// podAt is the pod serving ip:port: the pod with that IP, or a ready endpoint of the Service
// with that ClusterIP, with the port its EndpointSlice gives.
func (c *Cluster) podAt(ctx context.Context, ip string, port int) (namespace, pod string, podPort int, err error) {
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods); err != nil {
		return "", "", 0, err
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == ip && p.DeletionTimestamp == nil {
			return p.Namespace, p.Name, port, nil
		}
	}
	services := &corev1.ServiceList{}
	if err := c.Client.List(ctx, services); err != nil {
		return "", "", 0, err
	}
	for _, svc := range services.Items {
		if svc.Spec.ClusterIP != ip {
			continue
		}
		endpoints, err := c.readyEndpoints(ctx, svc.Namespace, svc.Name)
		if err != nil {
			return "", "", 0, err
		}
		for _, e := range endpoints {
			if e.pod != "" {
				return svc.Namespace, e.pod, e.port, nil
			}
		}
		return "", "", 0, fmt.Errorf("service %s/%s has no ready endpoint", svc.Namespace, svc.Name)
	}
	return "", "", 0, errors.New("no pod or Service at " + ip)
}

// detach removes what Attach installed but the CRDs (deleting them would delete every
// RedisCluster in the cluster): the operator's namespace and the cluster roles it was granted.
func (c *Cluster) detach() {
	ctx := context.Background()
	_ = c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}})
	for i := range c.grantedRoles {
		name := c.grantedRoles[i]
		_ = c.Client.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
		_ = c.Client.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
}

// FromKubeconfig is the cluster KUBECONFIG names, as the commands make runs against the local
// cluster of make demo-olm (run-bundle, scorecard-run, the *-push targets) reach it: a client,
// and root for what they read from the tree.
func FromKubeconfig(root string) (*Cluster, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster: start one with make demo-olm and export the KUBECONFIG it prints: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	return &Cluster{ControlPlane: &ControlPlane{AdminConfig: cfg}, Client: c, Root: root}, nil
}

// CommandOutside runs a program in the local cluster's own network namespace (the control
// plane's), outside every node: it reaches the nodes at their addresses, as a machine on their
// network does (redis-cli from a VM).
func (c *Cluster) CommandOutside(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	if c.real == nil {
		return nil, errors.New("not a local cluster: no network of its own to run in")
	}
	return c.real.netns.Command(ctx, name, args...), nil
}
