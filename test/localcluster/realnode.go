package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/registry"
	"github.com/org/redis-operator/test/testenv"
)

// RedisVersions are the versions the tests ask for (spec.version): the Redis image, Debian's
// redis-server 7.0, is pushed under each of these tags.
var RedisVersions = []string{"7.0", "7.2"}

// PauseImage is the sandbox image containerd starts first in every pod.
const PauseImage = "registry.k8s.io/pause:3.10"

// realNode is what a cluster on real nodes holds besides its control plane: the network, the
// nodes on it, the kube-proxy of the control plane's namespace, the registry and the cluster's
// DNS. (The volume provisioner is one of the control plane's processes.)
type realNode struct {
	network *node.Network
	// netns is the control plane's namespace (the network's): the harness reaches pods and
	// Services from there.
	netns    *node.Netns
	nodes    []*node.Node
	proxy    *node.Process
	registry *registry.Registry
	// registryCA is the PEM file of the CA of the registry's certificate (its TLSHost).
	registryCA string
	dns        *clusterDNS
	dir        string // the nodes' own (short: Unix sockets live in it)
	before     node.Machine
	// exposed closes what ReachableFromPods opened.
	exposed []func()
}

// NodeName is the name of the i-th node (from 1): node-1, node-2, ...
func NodeName(i int) string { return "node-" + strconv.Itoa(i) }

// ZoneLabel is the zone label every node carries, each in a zone of its own (zone-1, ...), as
// machines in three availability zones are.
const ZoneLabel = "topology.kubernetes.io/zone"

// StartOnRealNode is StartOnRealNodes with one node.
func StartOnRealNode(ctx context.Context, root, dir string) (*Cluster, error) {
	return StartOnRealNodes(ctx, root, dir, 1)
}

// StartOnRealNodes brings up the control plane and n real nodes (test/node: kubelet,
// containerd, runc, the CNI bridge, kube-proxy), each in a network namespace of its own on the
// cluster's network, with a registry holding the operator's image (built from this tree),
// Redis's (make redis-image) and pause. It installs the CRDs, grants the operator's
// ServiceAccount what the CSV grants, and runs the operator as the CSV's Deployment, from its
// image, until it is available.
func StartOnRealNodes(ctx context.Context, root, dir string, n int) (*Cluster, error) {
	deployment, err := operatorDeployment(root)
	if err != nil {
		return nil, err
	}
	imgs, err := nodeImages(root, dir, map[string]string{deployment.Spec.Template.Spec.Containers[0].Image: ""})
	if err != nil {
		return nil, err
	}
	c, err := startRealNode(ctx, root, dir, imgs, n)
	if err != nil {
		return nil, err
	}
	if err := c.installCRDs(); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.grantOperatorPermissions(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.deployOperator(ctx, deployment); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// StartWithOLM brings up the control plane, the real node and OLM, with nothing of the operator
// installed: OLM installs it, from a catalog. The registry holds the operator's image at each
// of versions (every version is built from the code checked out: two releases differ here only
// in the version they report), the opm image of the registry pods, and the scorecard's images.
func StartWithOLM(ctx context.Context, root, dir string, versions ...string) (*Cluster, error) {
	operators := map[string]string{}
	for _, v := range versions {
		operators[OperatorImage(v)] = v
	}
	imgs, err := nodeImages(root, dir, operators)
	if err != nil {
		return nil, err
	}
	if err := olmImages(root, dir, imgs); err != nil {
		return nil, err
	}
	c, err := startRealNode(ctx, root, dir, imgs, 1)
	if err != nil {
		return nil, err
	}
	if c.OLM, err = c.StartOLM(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startRealNode starts the registry with imgs, the network and the control plane in its
// namespace, the nodes, and the volume provisioner.
func startRealNode(ctx context.Context, root, dir string, imgs map[string]v1.Image, nodes int) (c *Cluster, err error) {
	if nodes < 1 {
		return nil, fmt.Errorf("a cluster needs a node at least, not %d", nodes)
	}
	rn := &realNode{before: node.Snapshot()}
	defer func() {
		if err != nil {
			if c != nil {
				c.Stop()
			} else {
				rn.stop()
			}
			c = nil
		}
	}()
	if rn.dir, err = os.MkdirTemp("", "node-"); err != nil {
		return nil, err
	}
	if rn.network, err = node.CreateNetwork(filepath.Base(rn.dir)); err != nil {
		return nil, err
	}
	if err = errors.Join(rn.network.Holds(rn.dir), rn.network.Holds(dir)); err != nil {
		return nil, err
	}
	rn.netns = rn.network.Netns
	if rn.registry, err = registry.Start(filepath.Join(dir, "registry")); err != nil {
		return nil, err
	}
	if rn.registryCA, err = serveRegistryTLS(rn.registry, filepath.Join(dir, "registry")); err != nil {
		return nil, err
	}
	mirrored, err := rn.registry.PushAll(ctx, imgs)
	if err != nil {
		return nil, err
	}
	// OLM v1's catalogd and operator-controller pull catalogs and bundles from the registry.
	stopForward, err := rn.network.ForwardFromMachine(rn.registry.Host)
	if err != nil {
		return nil, err
	}
	rn.exposed = append(rn.exposed, stopForward)
	cp, err := StartControlPlane(ctx, Options{BinDir: filepath.Join(root, "bin", "k8s"), Dir: dir, Netns: rn.netns})
	if err != nil {
		return nil, err
	}
	c = &Cluster{ControlPlane: cp, Root: root, ServiceAccount: "redis-operator-controller-manager", real: rn}
	if c.Client, err = client.New(cp.AdminConfig, client.Options{Scheme: Scheme()}); err != nil {
		return c, err
	}
	if err := c.publishRegistryHosting(ctx, rn.registry, rn.registryCA); err != nil {
		return c, err
	}
	if err := c.createStorageClass(ctx); err != nil {
		return c, err
	}
	if rn.dns, err = startClusterDNS(rn.netns, c.Client); err != nil {
		return c, err
	}
	for i := 1; i <= nodes; i++ {
		name := NodeName(i)
		netns, addrs, err := rn.network.AddNode(name, i)
		if err != nil {
			return c, err
		}
		nodeDir := filepath.Join(rn.dir, strconv.Itoa(i))
		n, err := node.Start(node.Config{Dir: nodeDir, Name: name, Netns: netns, Addrs: addrs, Network: rn.network,
			Labels: map[string]string{ZoneLabel: "zone-" + strconv.Itoa(i)}, Kubeconfig: cp.NodeKubeconfig,
			ForwardFromMachine: []string{rn.registry.Host, rn.registry.TLSHost}, RegistryHost: rn.registry.Host,
			Mirrored: mirrored, TLSRegistry: rn.registry.TLSHost, TLSRegistryCA: rn.registryCA, ClusterDNS: node.ControlPlaneIP})
		if err != nil {
			return c, err // Start removed the node's namespace
		}
		rn.nodes = append(rn.nodes, n)
	}
	for _, n := range rn.nodes {
		if err := c.waitNodeReady(ctx, n.Name, 90*time.Second); err != nil {
			return c, fmt.Errorf("%w\nkubelet:\n%s", err, n.Log("kubelet"))
		}
	}
	// The control plane's own processes (OLM's, the harness's clients) reach Services too.
	// kube-proxy waits 30s for a Node of its name, which the control plane has none of: it
	// takes the first node's, whose addresses it would use only for NodePorts.
	if rn.proxy, err = node.StartKubeProxy(rn.netns, rn.dir, NodeName(1), cp.NodeKubeconfig); err != nil {
		return c, err
	}
	if err := c.waitServicesRouted(ctx, 30*time.Second); err != nil {
		return c, err
	}
	if err := c.startProvisioner(ctx, root, rn.dir, c.Nodes()); err != nil {
		return c, err
	}
	return c, nil
}

// waitServicesRouted waits until kube-proxy routes ClusterIPs in the control plane's namespace:
// the kubernetes Service's answers there.
func (c *Cluster) waitServicesRouted(ctx context.Context, timeout time.Duration) error {
	addr, err := c.ServiceAddress(ctx, "default", "kubernetes")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := c.real.netns.Dial(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the kubernetes Service (%s) is not routed in the control plane's namespace within %s: %w", addr, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNodeReady waits until the kubelet has registered the node and it is Ready.
func (c *Cluster) waitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready within %s", name, timeout)
}

// nodeImages builds the images every real node's registry serves, under the names the
// manifests use: the operator's (each name in operators, its manager reporting the version given,
// "" for the tree's own), pause, and Redis's (make redis-image) at RedisVersions.
func nodeImages(root, dir string, operators map[string]string) (map[string]v1.Image, error) {
	pause := filepath.Join(dir, "images", "pause")
	if err := images.BuildStatic(root, "./test/images/pause", pause); err != nil {
		return nil, err
	}
	pauseImg, err := images.Pause(pause)
	if err != nil {
		return nil, err
	}
	_, redisImg, err := images.Load(filepath.Join(root, "bin", "images", "redis"))
	if err != nil {
		return nil, fmt.Errorf("%w (make redis-image)", err)
	}
	all := map[string]v1.Image{PauseImage: pauseImg}
	for _, v := range RedisVersions {
		all["docker.io/library/redis:"+v] = redisImg
	}
	for name, version := range operators {
		manager := filepath.Join(dir, "images", "manager-"+version)
		var ldflags []string
		if version != "" {
			ldflags = append(ldflags, "-X main.version="+version)
		}
		if err := images.BuildStatic(root, "./cmd", manager, ldflags...); err != nil {
			return nil, err
		}
		if all[name], err = images.Operator(manager); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// olmImages adds what OLM's pods and operator-sdk's run: the opm image of the registry pods
// (make opm builds it static) and the empty index image operator-sdk run bundle adds a bundle
// to; the scorecard tests' images: the SDK's scorecard-test (make operator-sdk builds it) and
// ours (./scorecard, under the command the bundle's scorecard configuration runs in it:
// redis-operator-scorecard); and busybox, the init containers' image of run bundle's registry
// pod and of the scorecard's test pods, also under the name of the ubi9 image that run
// bundle-upgrade's registry pod runs (images.UBIStandInImage).
func olmImages(root, dir string, imgs map[string]v1.Image) error {
	var err error
	if imgs[OPMImage], err = images.OPM(filepath.Join(root, "bin", "opm"), filepath.Join(root, "bin", "grpc_health_probe")); err != nil {
		return fmt.Errorf("the opm image (make opm grpc-health-probe): %w", err)
	}
	if imgs[EmptyIndexImage], err = images.EmptyIndex(imgs[OPMImage]); err != nil {
		return err
	}
	if imgs[images.BusyboxImage], err = images.Busybox(); err != nil {
		return err
	}
	imgs[images.UBIStandInImage] = imgs[images.BusyboxImage]
	sdkTests := filepath.Join(root, "bin", "scorecard-test")
	if _, err := os.Stat(sdkTests); err != nil {
		return fmt.Errorf("the scorecard-test image (make operator-sdk): %w", err)
	}
	cp := filepath.Join(dir, "images", "cp")
	if err := images.BuildStatic(root, "./test/images/cp", cp); err != nil {
		return err
	}
	if imgs[images.OLMImage], err = images.OLMUtil(filepath.Join(root, "bin", "olm", "cpb"), cp); err != nil {
		return fmt.Errorf("OLM's image (make olm): %w", err)
	}
	scorecard := filepath.Join(dir, "images", "redis-operator-scorecard")
	if err := images.BuildStatic(root, "./scorecard", scorecard); err != nil {
		return err
	}
	tests, err := scorecardTestImages(root)
	if err != nil {
		return err
	}
	for name, commands := range tests {
		binaries := map[string]string{}
		for _, command := range commands {
			binary := scorecard
			if command == "scorecard-test" { // the SDK's built-in tests
				binary = sdkTests
			}
			binaries["/usr/local/bin/"+command] = binary
		}
		if imgs[name], err = images.Static(binaries, nil); err != nil {
			return err
		}
	}
	return nil
}

// operatorDeployment is the CSV's Deployment, in the operator's namespace, watching every
// namespace as OLM runs it for an AllNamespaces OperatorGroup.
func operatorDeployment(root string) (*appsv1.Deployment, error) {
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, "bundle", "manifests"))
	if err != nil {
		return nil, err
	}
	specs := b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(specs) != 1 || len(specs[0].Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("the CSV has %d deployments, not one with a container", len(specs))
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: OperatorNamespace, Name: specs[0].Name}, Spec: specs[0].Spec}
	// olm.targetNamespaces "" is OLM's AllNamespaces: WATCH_NAMESPACE reads it.
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["olm.targetNamespaces"] = ""
	return d, nil
}

// deployOperator creates the operator's Deployment and waits until it is available.
func (c *Cluster) deployOperator(ctx context.Context, d *appsv1.Deployment) error {
	if err := c.Client.Create(ctx, d); err != nil {
		return fmt.Errorf("creating the operator's Deployment: %w", err)
	}
	if err := c.Kubectl("-n", OperatorNamespace, "rollout", "status", "deployment/"+d.Name, "--timeout=120s"); err != nil {
		logs, _ := c.KubectlOutput("-n", OperatorNamespace, "logs", "deployment/"+d.Name, "--tail=40")
		return fmt.Errorf("%w\noperator's logs:\n%s", err, logs)
	}
	return nil
}

// stopRealNode deletes every pod (the controllers stopped first, so that none comes back),
// waits until the kubelets have removed them, then stops the nodes. A node a test left frozen is
// thawed, one left cut joined, and the pods of one left off are deleted at once (nothing runs
// them). The control plane is stopped after, by the caller; the network, registry and namespaces
// go last (release).
func (c *Cluster) stopRealNode() {
	rn := c.real
	if len(rn.nodes) > 0 && c.Client != nil {
		c.stopProcess("kube-controller-manager")
		c.stopProcess("kube-scheduler")
		c.stopProcess(provisionerProcess) // no helper pod comes after the pods are deleted
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		off := map[string]bool{}
		for _, n := range rn.nodes {
			if n.Off() {
				off[n.Name] = true
				continue
			}
			_ = n.Thaw()
			_ = rn.network.Join(n.Name)
		}
		pods := &corev1.PodList{}
		if err := c.Client.List(ctx, pods); err == nil {
			for _, p := range pods.Items {
				grace := int64(1)
				if off[p.Spec.NodeName] || p.Spec.NodeName == "" {
					grace = 0
				}
				_ = c.Client.Delete(ctx, &p, client.GracePeriodSeconds(grace))
			}
		}
		for ctx.Err() == nil {
			pods := &corev1.PodList{}
			if err := c.Client.List(ctx, pods); err != nil || len(pods.Items) == 0 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	rn.stopNodes()
}

// stop stops what the cluster runs on the machine, then gives its network back.
func (rn *realNode) stop() {
	rn.stopNodes()
	rn.release()
}

// stopNodes stops the nodes and what serves them in the network.
func (rn *realNode) stopNodes() {
	for _, close := range rn.exposed {
		close()
	}
	if rn.dns != nil {
		rn.dns.stop()
	}
	for _, n := range rn.nodes {
		n.Stop() // deletes its namespace
	}
	if rn.proxy != nil {
		rn.proxy.Stop(10 * time.Second)
	}
}

// release deletes the network, which ends the cluster's tenancy of the machine: the control
// plane, which runs in it, must have stopped before (another cluster's Snapshot would count its
// processes as left behind), and the registry, directories and machine-wide settings go with it.
func (rn *realNode) release() {
	if rn.network != nil {
		rn.network.Delete()
	}
	if rn.registry != nil {
		_ = rn.registry.Stop()
	}
	if rn.dir != "" {
		_ = os.RemoveAll(rn.dir)
	}
	node.Restore(rn.before)
}

// Nodes are the names of the cluster's real nodes, in order.
func (c *Cluster) Nodes() []string {
	if c.real == nil {
		return nil
	}
	names := make([]string, 0, len(c.real.nodes))
	for _, n := range c.real.nodes {
		names = append(names, n.Name)
	}
	return names
}

// node is the real node of that name.
func (c *Cluster) node(name string) (*node.Node, error) {
	if c.real == nil {
		return nil, errors.New("this Cluster has no node of its own: it was made from a kubeconfig")
	}
	for _, n := range c.real.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %s in this cluster", name)
}

// onNode does what to the real node of that name.
func (c *Cluster) onNode(name string, what func(*node.Node) error) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	return what(n)
}

// NodeLog is the end of a node component's log (kubelet, kube-proxy), for a failure message.
func (c *Cluster) NodeLog(name, component string) string {
	n, err := c.node(name)
	if err != nil {
		return err.Error()
	}
	return n.Log(component)
}

// PowerOff stops a node at once, as a machine losing power (node.Node.PowerOff): its pods'
// processes die with it, and the API server only sees its lease lapse.
func (c *Cluster) PowerOff(name string) error { return c.onNode(name, (*node.Node).PowerOff) }

// PowerOn boots a node that was powered off, on what it kept on disk.
func (c *Cluster) PowerOn(name string) error { return c.onNode(name, (*node.Node).PowerOn) }

// FreezeNode stops every process of a node (SIGSTOP): a hung machine. ThawNode lets them run.
func (c *Cluster) FreezeNode(name string) error { return c.onNode(name, (*node.Node).Freeze) }

// ThawNode lets a frozen node's processes run on.
func (c *Cluster) ThawNode(name string) error { return c.onNode(name, (*node.Node).Thaw) }

// CutNode isolates a node's network from the other nodes and the control plane; JoinNode
// joins it again.
func (c *Cluster) CutNode(name string) error {
	return c.onNode(name, func(*node.Node) error { return c.real.network.Cut(name) })
}

// JoinNode joins a cut node to the network again.
func (c *Cluster) JoinNode(name string) error {
	return c.onNode(name, func(*node.Node) error { return c.real.network.Join(name) })
}

// ServiceAddress is where a Service's clients connect: its ClusterIP at its first port, which
// kube-proxy routes inside the control plane's namespace (Dial reaches it).
func (c *Cluster) ServiceAddress(ctx context.Context, namespace, service string) (string, error) {
	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: service}, svc); err != nil {
		return "", fmt.Errorf("reading Service %s: %w", service, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return "", fmt.Errorf("service %s has no ClusterIP or no port", service)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), nil
}

// ReachableFromPods makes addr, a server the test runs on the machine's loopback (an S3 server),
// reachable from pods of every node at the control plane's address, same port, and returns
// that address.
func (c *Cluster) ReachableFromPods(addr string) (string, error) {
	exposed, stop, err := c.real.network.ExposeToPods(addr)
	if err != nil {
		return "", err
	}
	c.real.exposed = append(c.real.exposed, stop)
	return exposed, nil
}

// ContainerID is the runtime's id of a pod's container, as its status says.
func (c *Cluster) ContainerID(ctx context.Context, namespace, pod, container string) (string, error) {
	p := &corev1.Pod{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, p); err != nil {
		return "", err
	}
	if id, _ := runningContainer(p, container); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("pod %s/%s has no container %s running", namespace, pod, container)
}

// runningContainer is the runtime's id of a pod's container (without its containerd://
// prefix) and its restart count, as the pod's status says; "" before it has started.
func runningContainer(p *corev1.Pod, container string) (string, int32) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.ContainerID != "" {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id, s.RestartCount
		}
	}
	return "", 0
}

// KillContainer ends a container's process at once (SIGKILL from the machine, as a crash or the
// OOM killer would), by its id: the kubelet sees it exit and restarts it.
func (c *Cluster) KillContainer(ctx context.Context, id string) error {
	n, _, err := c.nodeOfContainer(ctx, id)
	if err != nil {
		return err
	}
	_, err = n.Containerd.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	return err
}

// FreezeContainer stops every process of a container where it is (the cgroup freezer, as a
// paused VM or a long stop would), without its knowing; ThawContainer lets them run on.
func (c *Cluster) FreezeContainer(ctx context.Context, id string) error {
	return c.ctrTask(ctx, "pause", id)
}

// ThawContainer lets a frozen container's processes run on.
func (c *Cluster) ThawContainer(ctx context.Context, id string) error {
	return c.ctrTask(ctx, "resume", id)
}

func (c *Cluster) ctrTask(ctx context.Context, verb, id string) error {
	n, _, err := c.nodeOfContainer(ctx, id)
	if err != nil {
		return err
	}
	_, err = n.Containerd.Ctr(ctx, "tasks", verb, id)
	return err
}

// PodNetns is the file of the network namespace of a pod's container (its process's
// /proc/<pid>/ns/net), for a test to put packet filters there (test/partition).
func (c *Cluster) PodNetns(ctx context.Context, namespace, pod, container string) (string, error) {
	id, err := c.ContainerID(ctx, namespace, pod, container)
	if err != nil {
		return "", err
	}
	_, pid, err := c.nodeOfContainer(ctx, id)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: container %s: %w", namespace, pod, container, err)
	}
	return "/proc/" + pid + "/ns/net", nil
}

// nodeOfContainer is the node whose containerd runs the container id (its task running or
// frozen), and its task's pid.
func (c *Cluster) nodeOfContainer(ctx context.Context, id string) (*node.Node, string, error) {
	if c.real == nil {
		return nil, "", errors.New("this Cluster has no node of its own: it was made from a kubeconfig")
	}
	for _, n := range c.real.nodes {
		if n.Off() || n.Containerd == nil {
			continue
		}
		out, err := n.Containerd.Ctr(ctx, "tasks", "ls")
		if err != nil {
			return nil, "", err
		}
		for _, line := range strings.Split(out, "\n") {
			// TASK PID STATUS: RUNNING, or PAUSED (frozen: FreezeContainer), not STOPPED
			if f := strings.Fields(line); len(f) >= 3 && f[0] == id && f[2] != "STOPPED" {
				return n, f[1], nil
			}
		}
	}
	return nil, "", fmt.Errorf("no node runs a task of container %s", id)
}

// operatorContainer is the operator's pod and its manager container's id and restarts.
func (c *Cluster) operatorContainer(ctx context.Context) (pod string, id string, restarts int32, err error) {
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace(OperatorNamespace), client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		return "", "", 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if id, restarts := runningContainer(&p, "manager"); id != "" {
			return p.Name, id, restarts, nil
		}
	}
	return "", "", 0, errors.New("no operator pod with a manager container")
}

// OperatorPod is the name of the operator's pod.
func (c *Cluster) OperatorPod(ctx context.Context) (string, error) {
	pod, _, _, err := c.operatorContainer(ctx)
	return pod, err
}

// OperatorRestarts is how often the kubelet has restarted the operator's container.
func (c *Cluster) OperatorRestarts(ctx context.Context) (int32, error) {
	_, _, restarts, err := c.operatorContainer(ctx)
	return restarts, err
}

// NodePIDs are the real nodes' own processes by name (kubelet, kube-proxy, containerd,
// containerd-shim), for what the nodes cost.
func (c *Cluster) NodePIDs() map[string][]int {
	if c.real == nil {
		return nil
	}
	pids := map[string][]int{}
	for _, n := range c.real.nodes {
		for name, p := range n.PIDs() {
			pids[name] = append(pids[name], p...)
		}
	}
	return pids
}

// The ConfigMap in which a cluster says where its local registry is (KEP-1755, as kind's
// guide and Tilt use it): make run-bundle and the *-push targets read it.
const (
	registryHostingNamespace = "kube-public"
	registryHostingName      = "local-registry-hosting"
	registryHostingKey       = "localRegistryHosting.v1"
)

// Beside KEP-1755's key, the ConfigMap says where the registry answers over HTTPS and with
// which certificate: operator-sdk run bundle pulls from there (see registry.Registry.TLSHost).
const (
	registryTLSHostKey = "tlsHost"
	registryCAKey      = "ca.crt"
)

// serveRegistryTLS has reg serve over HTTPS too, with a certificate for 127.0.0.1 that a CA of
// the harness signs, and returns the PEM file of that CA, written in dir.
func serveRegistryTLS(reg *registry.Registry, dir string) (string, error) {
	ca, err := testenv.NewCA("redis-operator local registry")
	if err != nil {
		return "", err
	}
	kp, err := ca.IssueFor(nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", err
	}
	if err := reg.ServeTLS(kp.TLSCertificate()); err != nil {
		return "", err
	}
	caFile := filepath.Join(dir, "ca.crt")
	return caFile, os.WriteFile(caFile, ca.PEM, 0o644)
}

func (c *Cluster) publishRegistryHosting(ctx context.Context, reg *registry.Registry, caFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	host := reg.Host
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: registryHostingNamespace, Name: registryHostingName},
		Data: map[string]string{registryHostingKey: fmt.Sprintf("host: %q\nhelp: %q\n", host,
			"Images keep their names here: example.com/redis-operator:v0.2.0 is "+host+"/example.com/redis-operator:v0.2.0 (plain HTTP), "+
				"which the node pulls as example.com/redis-operator:v0.2.0; over HTTPS, "+reg.TLSHost+"/example.com/redis-operator:v0.2.0, "+
				"which the node pulls under that name, trusting the certificate of ca.crt."),
			registryTLSHostKey: reg.TLSHost, registryCAKey: string(ca)}}
	if err := c.Client.Create(ctx, cm); err != nil {
		return fmt.Errorf("publishing the local registry's address: %w", err)
	}
	return nil
}

// LocalTLSRegistry is where the registry of the cluster c reads answers over HTTPS
// (127.0.0.1:<port>), and the PEM certificate that signs its certificate.
func LocalTLSRegistry(ctx context.Context, c client.Reader) (host string, ca []byte, err error) {
	cm, err := registryHosting(ctx, c)
	if err != nil {
		return "", nil, err
	}
	if cm.Data[registryTLSHostKey] == "" || cm.Data[registryCAKey] == "" {
		return "", nil, fmt.Errorf("ConfigMap %s/%s names no registry over HTTPS", registryHostingNamespace, registryHostingName)
	}
	return cm.Data[registryTLSHostKey], []byte(cm.Data[registryCAKey]), nil
}

// LocalRegistry is the address of the registry of the cluster c reads (127.0.0.1:<port>, plain
// HTTP), from the ConfigMap the cluster publishes it in.
func LocalRegistry(ctx context.Context, c client.Reader) (string, error) {
	cm, err := registryHosting(ctx, c)
	if err != nil {
		return "", err
	}
	var hosting struct {
		Host string `json:"host"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[registryHostingKey]), &hosting); err != nil {
		return "", fmt.Errorf("reading ConfigMap %s/%s: %w", registryHostingNamespace, registryHostingName, err)
	}
	if hosting.Host == "" {
		return "", fmt.Errorf("ConfigMap %s/%s names no registry host", registryHostingNamespace, registryHostingName)
	}
	return hosting.Host, nil
}

// registryHosting reads the ConfigMap in which the cluster says where its registry is.
func registryHosting(ctx context.Context, c client.Reader) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: registryHostingNamespace, Name: registryHostingName}, cm); err != nil {
		return nil, fmt.Errorf("reading where the cluster's registry is (ConfigMap %s/%s; a cluster of make demo-olm has it): %w",
			registryHostingNamespace, registryHostingName, err)
	}
	return cm, nil
}

// NodeRules are the iptables rules (nat and filter) that mention match, in the named node's
// network namespace, or in the control plane's for "": what kube-proxy made of a Service there,
// for a failure message.
func (c *Cluster) NodeRules(name, match string) string {
	netns := c.real.netns
	if name != "" {
		n, err := c.node(name)
		if err != nil {
			return err.Error()
		}
		netns = n.Netns
	}
	var out []string
	for _, table := range []string{"nat", "filter"} {
		raw, err := netns.Command(context.Background(), "iptables-save", "-t", table).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("iptables-save -t %s: %v: %s", table, err, raw)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, match) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}
