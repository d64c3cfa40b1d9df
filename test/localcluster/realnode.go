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
)

// RedisVersions are the versions the tests ask for (spec.version): the Redis image, Debian's
// redis-server 7.0, is pushed under each of these tags.
var RedisVersions = []string{"7.0", "7.2"}

// PauseImage is the sandbox image containerd starts first in every pod.
const PauseImage = "registry.k8s.io/pause:3.10"

// realNode is what a cluster on a real node holds besides its control plane.
type realNode struct {
	netns    *node.Netns
	node     *node.Node
	registry *registry.Registry
	dns      *clusterDNS
	dir      string // the node's own (short: Unix sockets live in it)
	before   node.Machine
	// stopProvisioning ends the volume provisioner; provisioned is closed when it has.
	stopProvisioning context.CancelFunc
	provisioned      chan struct{}
}

// StartOnRealNode brings up the control plane and a real node (test/node: kubelet, containerd,
// runc, the CNI bridge, kube-proxy) in a network namespace of their own, with a registry holding
// the operator's image (built from this tree), Redis's (make redis-image) and pause. It
// installs the CRDs, grants the operator's ServiceAccount what the CSV grants, and runs the
// operator as the CSV's Deployment, from its image, until it is available.
func StartOnRealNode(ctx context.Context, root, dir string) (*Cluster, error) {
	deployment, err := operatorDeployment(root)
	if err != nil {
		return nil, err
	}
	imgs, err := nodeImages(root, dir, map[string]string{deployment.Spec.Template.Spec.Containers[0].Image: ""})
	if err != nil {
		return nil, err
	}
	c, err := startRealNode(ctx, root, dir, imgs)
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
	c, err := startRealNode(ctx, root, dir, imgs)
	if err != nil {
		return nil, err
	}
	if c.OLM, err = c.StartOLM(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startRealNode starts the registry with imgs, the node's namespace, the control plane in it,
// the node, and the volume provisioner.
func startRealNode(ctx context.Context, root, dir string, imgs map[string]v1.Image) (c *Cluster, err error) {
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
	if rn.netns, err = node.CreateNodeNetns(filepath.Base(rn.dir)); err != nil {
		return nil, err
	}
	if rn.registry, err = registry.Start(filepath.Join(dir, "registry")); err != nil {
		return nil, err
	}
	mirrored, err := rn.registry.PushAll(ctx, imgs)
	if err != nil {
		return nil, err
	}
	cp, err := StartControlPlane(ctx, Options{BinDir: filepath.Join(root, "bin", "k8s"), Dir: dir, Netns: rn.netns})
	if err != nil {
		return nil, err
	}
	c = &Cluster{ControlPlane: cp, Root: root, ServiceAccount: "redis-operator-controller-manager", real: rn}
	if c.Client, err = client.New(cp.AdminConfig, client.Options{Scheme: Scheme()}); err != nil {
		return c, err
	}
	if err := c.publishRegistryHosting(ctx, rn.registry.Host); err != nil {
		return c, err
	}
	if rn.dns, err = startClusterDNS(rn.netns, c.Client); err != nil {
		return c, err
	}
	if rn.node, err = node.Start(node.Config{Dir: rn.dir, Name: "node-1", Netns: rn.netns, Before: rn.before, Kubeconfig: cp.NodeKubeconfig,
		ForwardFromMachine: []string{rn.registry.Host}, RegistryHost: rn.registry.Host,
		Mirrored: mirrored, ClusterDNS: node.NodeIP}); err != nil {
		return c, err
	}
	if err := c.waitNodeReady(ctx, "node-1", 90*time.Second); err != nil {
		return c, fmt.Errorf("%w\nkubelet:\n%s", err, rn.node.Log("kubelet"))
	}
	provisioning, stop := context.WithCancel(context.Background())
	rn.stopProvisioning, rn.provisioned = stop, make(chan struct{})
	go func() {
		defer close(rn.provisioned)
		provisioner{client: c.Client, dir: rn.dir, node: "node-1"}.run(provisioning)
	}()
	return c, nil
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

// olmImages adds what OLM's pods and the scorecard's run: the opm image of the registry pods
// (make opm builds it static), the scorecard tests' images (./scorecard under each command the
// bundle's scorecard configuration runs in them: scorecard-test, redis-operator-scorecard), and
// the untar image of the scorecard's init container.
func olmImages(root, dir string, imgs map[string]v1.Image) error {
	var err error
	if imgs[OPMImage], err = images.OPM(filepath.Join(root, "bin", "opm"), filepath.Join(root, "bin", "grpc_health_probe")); err != nil {
		return fmt.Errorf("the opm image (make opm grpc-health-probe): %w", err)
	}
	cp := filepath.Join(dir, "images", "cp")
	if err := images.BuildStatic(root, "./test/images/cp", cp); err != nil {
		return err
	}
	if imgs[images.OLMImage], err = images.OLMUtil(filepath.Join(root, "bin", "olm", "cpb"), cp); err != nil {
		return fmt.Errorf("OLM's image (make olm): %w", err)
	}
	scorecard, untar := filepath.Join(dir, "images", "scorecard-test"), filepath.Join(dir, "images", "untar")
	if err := images.BuildStatic(root, "./scorecard", scorecard); err != nil {
		return err
	}
	if err := images.BuildStatic(root, "./test/images/untar", untar); err != nil {
		return err
	}
	tests, err := scorecardTestImages(root)
	if err != nil {
		return err
	}
	for name, commands := range tests {
		binaries := map[string]string{}
		for _, command := range commands {
			binaries["/usr/local/bin/"+command] = scorecard
		}
		if imgs[name], err = images.Static(binaries, nil); err != nil {
			return err
		}
	}
	imgs[ScorecardUntarImage], err = images.Static(map[string]string{"/bin/tar": untar}, []string{"/bin/tar"})
	return err
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
// waits until the kubelet has removed them, then stops the node and its registry. The control
// plane is stopped after, by the caller; the namespace goes last.
func (c *Cluster) stopRealNode() {
	rn := c.real
	if rn.node != nil && c.Client != nil {
		c.stopProcess("kube-controller-manager")
		c.stopProcess("kube-scheduler")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		nss := &corev1.NamespaceList{}
		if err := c.Client.List(ctx, nss); err == nil {
			for _, ns := range nss.Items {
				_ = c.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns.Name), client.GracePeriodSeconds(1))
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
	rn.stop()
}

func (rn *realNode) stop() {
	if rn.stopProvisioning != nil {
		rn.stopProvisioning()
		<-rn.provisioned
	}
	if rn.dns != nil {
		rn.dns.stop()
	}
	if rn.node != nil {
		rn.node.Stop() // deletes the namespace
	} else if rn.netns != nil {
		rn.netns.Delete()
	}
	if rn.registry != nil {
		_ = rn.registry.Stop()
	}
	if rn.dir != "" {
		_ = os.RemoveAll(rn.dir)
	}
}

// ServiceAddress is where a Service's clients connect: its ClusterIP at its first port, which
// kube-proxy routes inside the node's namespace (Dial reaches it).
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
// reachable from pods at the node's address, same port, and returns that address.
func (c *Cluster) ReachableFromPods(addr string) (string, error) {
	return c.real.node.ExposeToPods(addr)
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
	if c.real == nil {
		return errors.New("this Cluster has no node of its own: it was made from a kubeconfig")
	}
	_, err := c.real.node.Containerd.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
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
	if c.real == nil {
		return errors.New("this Cluster has no node of its own: it was made from a kubeconfig")
	}
	_, err := c.real.node.Containerd.Ctr(ctx, "tasks", verb, id)
	return err
}

// PodNetns is the file of the network namespace of a pod's container (its process's
// /proc/<pid>/ns/net), for a test to put packet filters there (test/partition).
func (c *Cluster) PodNetns(ctx context.Context, namespace, pod, container string) (string, error) {
	if c.real == nil {
		return "", errors.New("this Cluster has no node of its own: it was made from a kubeconfig")
	}
	id, err := c.ContainerID(ctx, namespace, pod, container)
	if err != nil {
		return "", err
	}
	out, err := c.real.node.Containerd.Ctr(ctx, "tasks", "ls")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		// TASK PID STATUS
		if f := strings.Fields(line); len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			return "/proc/" + f[1] + "/ns/net", nil
		}
	}
	return "", fmt.Errorf("pod %s/%s: container %s (%s) has no running task", namespace, pod, container, id)
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

// NodePIDs are the real node's own processes by name (kubelet, kube-proxy, containerd,
// containerd-shim), for what the node costs.
func (c *Cluster) NodePIDs() map[string][]int {
	if c.real == nil || c.real.node == nil {
		return nil
	}
	return c.real.node.PIDs()
}

// The ConfigMap in which a cluster says where its local registry is (KEP-1755, as kind's
// guide and Tilt use it): make run-bundle and the *-push targets read it.
const (
	registryHostingNamespace = "kube-public"
	registryHostingName      = "local-registry-hosting"
	registryHostingKey       = "localRegistryHosting.v1"
)

func (c *Cluster) publishRegistryHosting(ctx context.Context, host string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: registryHostingNamespace, Name: registryHostingName},
		Data: map[string]string{registryHostingKey: fmt.Sprintf("host: %q\nhelp: %q\n", host,
			"Images keep their names here: example.com/redis-operator:v0.2.0 is "+host+"/example.com/redis-operator:v0.2.0 (plain HTTP), "+
				"which the node pulls as example.com/redis-operator:v0.2.0.")}}
	if err := c.Client.Create(ctx, cm); err != nil {
		return fmt.Errorf("publishing the local registry's address: %w", err)
	}
	return nil
}

// LocalRegistry is the address of the registry of the cluster c reads (127.0.0.1:<port>, plain
// HTTP), from the ConfigMap the cluster publishes it in.
func LocalRegistry(ctx context.Context, c client.Reader) (string, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: registryHostingNamespace, Name: registryHostingName}, cm); err != nil {
		return "", fmt.Errorf("reading where the cluster's registry is (ConfigMap %s/%s; a cluster of make demo-olm has it): %w",
			registryHostingNamespace, registryHostingName, err)
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
