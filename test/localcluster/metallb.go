package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/testenv"
)

// MetalLB v0.14.9 (make node builds it from hack/tools/metallb) is the load balancer of the local
// cluster's LoadBalancer Services, in L2 mode, as on bare metal: its controller, in the control
// plane's namespace, gives each Service an address from a pool on the nodes' network; a speaker in
// each node's namespace answers ARP for the addresses its node announces, and that node's
// kube-proxy takes the connections on. Its admission webhook is off (the API server here reaches
// no webhook in the cluster's namespace); memberlist is off too (each speaker sees the others'
// nodes through the API server instead, as MetalLB does without it).

const metallbNamespace = "metallb-system"

// StartMetalLB installs MetalLB's CRDs, an address pool of addresses (a range on the nodes'
// network, 10.87.0.200-10.87.0.220) announced in L2 mode, and starts its controller and a speaker
// per node. stop ends them and deletes the pool.
func (c *Cluster) StartMetalLB(ctx context.Context, addresses string) (stop func(), err error) {
	if c.real == nil {
		return nil, errors.New("MetalLB runs on the local cluster's nodes only")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin", "metallb")
	for _, b := range []string{"controller", "speaker"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%w (make node builds MetalLB)", err)
		}
	}
	if err := c.installMetalLBCRDs(ctx, root); err != nil {
		return nil, err
	}
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metallbNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	objs := metallbPool(addresses)
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating MetalLB's %s: %w", obj.GetKind(), err)
		}
	}
	rn := c.real
	var procs []*node.Process
	stop = func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop(10 * time.Second)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, obj := range objs {
			_ = c.Client.Delete(ctx, obj)
		}
	}
	start := func(netns *node.Netns, name string, argv ...string) error {
		p, err := node.StartLoggedIn(netns, filepath.Join(rn.dir, name+".log"), argv...)
		if err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
		procs = append(procs, p)
		return nil
	}
	if err := start(rn.netns, "metallb-controller", filepath.Join(bin, "controller"), "--kubeconfig", c.NodeKubeconfig,
		"--namespace", metallbNamespace, "--webhook-mode", "disabled", "--disable-cert-rotation", "--log-level", "info"); err != nil {
		stop()
		return nil, err
	}
	for _, n := range rn.nodes {
		// A speaker looks its own pod up (its L2 status objects are owned by it), and finds the
		// other speakers, to elect which node answers for an address, by their pods' IPs
		// (memberlist; without it no node answers in L2 mode): the pod of this process, on a
		// node that does not exist, so that no kubelet runs it, with the node's address.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "speaker-" + n.Name, Namespace: metallbNamespace, Labels: map[string]string{"app": "metallb-speaker"}},
			Spec: corev1.PodSpec{NodeName: "runs-as-a-process-on-" + n.Name,
				Containers: []corev1.Container{{Name: "speaker", Image: "metallb-speaker-runs-as-a-process"}}},
		}
		if err := c.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			stop()
			return nil, fmt.Errorf("creating the speaker's pod object: %w", err)
		}
		objs = append(objs, podObject(pod))
		ip := n.IP()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: ip}
		if err := c.Client.Status().Update(ctx, pod); err != nil {
			stop()
			return nil, fmt.Errorf("giving the speaker's pod object its address: %w", err)
		}
		if err := start(n.Netns, "metallb-speaker-"+n.Name, filepath.Join(bin, "speaker"), "--kubeconfig", c.NodeKubeconfig,
			"--namespace", metallbNamespace, "--node-name", n.Name, "--pod-name", pod.Name, "--log-level", "info",
			"--ml-bindaddr", ip, "--ml-bindport", "7946", "--ml-labels", "app=metallb-speaker"); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// podObject is pod as an unstructured object, to be deleted with the others.
func podObject(pod *corev1.Pod) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": pod.Name, "namespace": pod.Namespace},
	}}
}

// installMetalLBCRDs installs the CRDs of the MetalLB module hack/tools/metallb pins.
func (c *Cluster) installMetalLBCRDs(ctx context.Context, root string) error {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "go.universe.tf/metallb")
	list.Dir = filepath.Join(root, "hack", "tools", "metallb")
	dir, err := list.Output()
	if err != nil {
		return fmt.Errorf("finding MetalLB's module (its CRDs): %w", err)
	}
	crds, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return fmt.Errorf("MetalLB's CRDs in %s: %w", dir, err)
	}
	if len(crds) == 0 {
		return fmt.Errorf("no CRD in MetalLB's module at %s", dir)
	}
	if err := c.applyCRDs(crds...); err != nil {
		return fmt.Errorf("installing MetalLB's CRDs: %w", err)
	}
	return nil
}

// metallbPool is an IPAddressPool of addresses and its L2Advertisement.
func metallbPool(addresses string) []*unstructured.Unstructured {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "local", "namespace": metallbNamespace},
		"spec":     map[string]any{"addresses": []any{addresses}},
	}}
	l2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "local", "namespace": metallbNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{"local"}},
	}}
	return []*unstructured.Unstructured{pool, l2}
}

// MetalLBLog is what a MetalLB process (metallb-controller, metallb-speaker-node-1) logged of
// addresses, announcements and errors, its last 40 such lines, for a failure message.
func (c *Cluster) MetalLBLog(name string) string {
	raw, err := os.ReadFile(filepath.Join(c.real.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "context canceled") || strings.Contains(line, "Stopping") {
			continue
		}
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, "nnounce") || strings.Contains(line, "ssign") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// OutsideMachine adds a machine to the nodes' network that is no node (node.Network.AddOutside):
// dial connects from it, as a client outside the cluster on the same network would (it reaches
// the nodes' addresses and the load balancer's, not the pods' nor the ClusterIPs). remove takes it
// away.
func (c *Cluster) OutsideMachine() (dial func(ctx context.Context, network, addr string) (net.Conn, error), ip string, remove func(), err error) {
	if c.real == nil {
		return nil, "", nil, errors.New("not a local cluster")
	}
	n, ip, remove, err := c.real.network.AddOutside(90)
	if err != nil {
		return nil, "", nil, err
	}
	return n.Dial, ip, remove, nil
}
