package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/org/redis-operator/test/testenv"
)

// Node is a real Kubernetes node: a kubelet with containerd, runc and the CNI bridge plugin, in a
// network namespace of its own. It joins the API server the harness runs on the machine's
// loopback: inside the namespace, the same address is forwarded to it.
type Node struct {
	Name       string
	Netns      *Netns
	Containerd *Containerd
	dir        string
	procs      []*Process // the kubelet, then kube-proxy
	mu         sync.Mutex
	forwards   []net.Listener
	before     Machine
}

// Config says what a node joins.
type Config struct {
	// Dir holds everything of the node's own; it must be short (Unix sockets live in it).
	Dir string
	// Name is the node's name.
	Name string
	// Netns is the node's namespace (CreateNodeNetns); Stop deletes it.
	Netns *Netns
	// Before is the machine as it was before the namespace was made (Snapshot): what Stop
	// restores.
	Before Machine
	// Kubeconfig is the kubelet's and kube-proxy's credentials for the API server, at an address
	// they reach from inside the namespace.
	Kubeconfig string
	// ForwardFromMachine are addresses on the machine's loopback (127.0.0.1:<port>) that answer
	// at the same address inside the namespace: an API server or a registry the harness runs
	// outside it.
	ForwardFromMachine []string
	// RegistryHost (127.0.0.1:<port>, inside the namespace) serves the pulls of the names in
	// Mirrored.
	RegistryHost string
	Mirrored     []string
	// ClusterDNS is the address of the cluster's DNS server, which the kubelet gives pods
	// (dnsPolicy ClusterFirst) with the search list of ClusterDomain; none when empty.
	ClusterDNS string
}

// ClusterDomain is the domain of the cluster's Service names (<service>.<namespace>.svc.cluster.local).
const ClusterDomain = "cluster.local"

// The node's addresses, inside its namespace.
const (
	NodeIP = "10.87.0.2"
	// PodCIDR is where its pods' addresses come from.
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR is where the API server allocates ClusterIPs, which kube-proxy routes.
	ServiceCIDR = "10.96.0.0/16"
	nodeSubnet  = "/24"
)

// CreateNodeNetns makes a node's namespace, name, with the node's address on a bridge of its
// own: the kubelet refuses a loopback address, and the kernel here has no dummy interfaces.
func CreateNodeNetns(name string) (*Netns, error) {
	n, err := CreateNetns(name)
	if err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", "node0", "type", "bridge"},
		{"addr", "add", NodeIP + nodeSubnet, "dev", "node0"},
		{"link", "set", "node0", "up"},
		// A route for every address: ClusterIPs are routed nowhere until kube-proxy's rules
		// rewrite them, and without a route a connection fails before the rules are read.
		{"route", "add", "default", "dev", "node0"},
	} {
		if err := n.IP(args...); err != nil {
			n.Delete()
			return nil, err
		}
	}
	return n, nil
}

// Start brings the node up; it is Ready once the API server says so (the caller waits).
func Start(cfg Config) (n *Node, err error) {
	if err := Required(); err != nil {
		return nil, err
	}
	if cfg.Before.Sysctls == nil {
		return nil, errors.New("node.Config.Before: take a Snapshot before making the namespace")
	}
	n = &Node{Name: cfg.Name, Netns: cfg.Netns, dir: cfg.Dir, before: cfg.Before}
	defer func() {
		if err != nil {
			n.Stop()
			n = nil
		}
	}()
	for _, addr := range cfg.ForwardFromMachine {
		if err := n.forwardFromMachine(addr); err != nil {
			return n, err
		}
	}
	cniConf := filepath.Join(cfg.Dir, "cni", "net.d")
	if err := n.writeCNIConfig(cniConf); err != nil {
		return n, err
	}
	if n.Containerd, err = StartContainerd(ContainerdConfig{Dir: filepath.Join(cfg.Dir, "containerd"), RegistryHost: cfg.RegistryHost,
		Mirrored: cfg.Mirrored, Netns: n.Netns, CNIConfDir: cniConf}); err != nil {
		return n, err
	}
	if err := n.startKubelet(cfg); err != nil {
		return n, err
	}
	return n, n.startKubeProxy(cfg)
}

// forwardFromMachine makes addr (127.0.0.1:<port> on the machine) answer at the same address
// inside the namespace.
func (n *Node) forwardFromMachine(addr string) error {
	l, err := n.Netns.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s in the node's namespace: %w", addr, err)
	}
	n.mu.Lock()
	n.forwards = append(n.forwards, l)
	n.mu.Unlock()
	go Forward(l, func() (net.Conn, error) { return net.Dial("tcp", addr) })
	return nil
}

// ExposeToPods makes addr (127.0.0.1:<port> on the machine: an S3 server the test runs) answer
// at the node's address, same port, which pods reach through their default route; it returns
// that address. Stop closes it.
func (n *Node) ExposeToPods(addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	inNode := net.JoinHostPort(NodeIP, port)
	l, err := n.Netns.Listen("tcp", inNode)
	if err != nil {
		return "", fmt.Errorf("listening on %s in the node's namespace: %w", inNode, err)
	}
	n.mu.Lock()
	n.forwards = append(n.forwards, l)
	n.mu.Unlock()
	go Forward(l, func() (net.Conn, error) { return net.Dial("tcp", addr) })
	return inNode, nil
}

// writeCNIConfig is the pods' network: the bridge plugin on cni0 with host-local addresses from
// the node's pod CIDR, its state under the node's directory.
func (n *Node) writeCNIConfig(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, PodCIDR, filepath.Join(n.dir, "cni", "networks"))
	return os.WriteFile(filepath.Join(dir, "10-pods.conflist"), []byte(conf), 0o644)
}

// startKubelet runs the kubelet in the namespace. Its port is reachable only there, where the
// API server calls it (logs, exec, port-forward) without a client certificate: anonymous, and
// AlwaysAllow. failCgroupV1: this machine has cgroup v1 (hybrid). NeverVerify: otherwise a preloaded image becomes ErrImageNeverPull once the same
// image was pulled under another name. The kubelet's pod logs and root are the node's own; its
// cgroup driver is cgroupfs (containerd 1.6 does not answer RuntimeConfig). It works out the
// node's status every second instead of every 10s (and still reports an unchanged one every
// 5 minutes): the node is Ready about 6s sooner after each start.
func (n *Node) startKubelet(cfg Config) error {
	root := filepath.Join(cfg.Dir, "kubelet")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	config := filepath.Join(cfg.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
imagePullCredentialsVerificationPolicy: NeverVerify
podLogsDir: %s
address: %s
readOnlyPort: 0
healthzPort: 0
failSwapOn: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
mergeDefaultEvictionSettings: false
resolvConf: ""
serializeImagePulls: false
clusterDNS: [%s]
clusterDomain: %s
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 5m
`, n.Containerd.Socket, filepath.Join(cfg.Dir, "pod-logs"), NodeIP, cfg.ClusterDNS, ClusterDomain), 0o644); err != nil {
		return err
	}
	return n.run("kubelet", "--config="+config, "--kubeconfig="+cfg.Kubeconfig,
		"--root-dir="+root, "--node-ip="+NodeIP, "--hostname-override="+cfg.Name, "--v=1")
}

// startKubeProxy runs kube-proxy in iptables mode in the namespace: its chains live and die
// there. It leaves conntrack's sysctls alone (they are the machine's).
func (n *Node) startKubeProxy(cfg Config) error {
	config := filepath.Join(cfg.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
healthzBindAddress: ""
metricsBindAddress: ""
`, cfg.Name, PodCIDR, cfg.Kubeconfig), 0o644); err != nil {
		return err
	}
	return n.run("kube-proxy", "--config="+config, "--v=1")
}

// run starts one of the node's Kubernetes binaries in the namespace, its output in
// <dir>/<name>.log.
func (n *Node) run(name string, args ...string) error {
	bin, err := k8sBinary(name)
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(n.dir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := n.Netns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	p, err := StartProcess(cmd)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return nil
}

// k8sBinary is <name> beside the other Kubernetes binaries the harness runs (bin/k8s: make
// node).
func k8sBinary(name string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	b := filepath.Join(testenv.BinaryDir(root), name)
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("%s is missing: run make node", b)
	}
	return b, nil
}

// PIDs are the process ids of the node's own processes, by name: kubelet, kube-proxy,
// containerd, and the shims (one per pod), for what the node costs.
func (n *Node) PIDs() map[string][]int {
	pids := map[string][]int{}
	for _, p := range n.procs {
		// nsenter has become the binary it started: its comm is the binary's name.
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Cmd.Process.Pid))
		if err == nil {
			name := strings.TrimSpace(string(comm))
			pids[name] = append(pids[name], p.Cmd.Process.Pid)
		}
	}
	if n.Containerd != nil {
		pids["containerd"] = []int{n.Containerd.PID()}
		pids["containerd-shim"] = n.Containerd.ShimPIDs()
	}
	return pids
}

// Log is the end of a component's log (kubelet, kube-proxy), for a failure message.
func (n *Node) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, name+".log"))
	return string(b[max(0, len(b)-4000):])
}

// Stop ends the node and undoes what it did to the machine: the kubelet first (the caller
// deletes its pods before), then containerd with whatever containers remain, the mounts under
// its directory, the namespace with its interfaces and rules, the kubelet's cgroups, the
// sysctls it set, and the fixed-path directories that were not there before.
func (n *Node) Stop() {
	for _, p := range slices.Backward(n.procs) {
		p.Stop(10 * time.Second)
	}
	n.procs = nil
	if n.Containerd != nil {
		n.Containerd.Stop()
	}
	n.mu.Lock()
	for _, l := range n.forwards {
		_ = l.Close()
	}
	n.forwards = nil
	n.mu.Unlock()
	unmountUnder(n.dir)
	// Pod sandboxes' namespaces that containerd made and a forced stop left.
	now, _ := filepath.Glob("/run/netns/cni-*")
	for _, ns := range now {
		if !slices.Contains(n.before.Netns, ns) {
			_ = unix.Unmount(ns, unix.MNT_DETACH)
			_ = os.Remove(ns)
		}
	}
	if n.Netns != nil {
		n.Netns.Delete()
	}
	if left, _ := filepath.Glob("/run/netns/*"); !n.before.NetnsDir && len(left) == 0 {
		_ = unix.Unmount("/run/netns", unix.MNT_DETACH)
		_ = os.Remove("/run/netns")
	}
	removeCgroups(n.before.Cgroups)
	for key, value := range n.before.Sysctls {
		_ = os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	}
	for d, existed := range n.before.Dirs {
		if !existed {
			_ = os.RemoveAll(d)
		}
	}
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	for range 3 { // a mount may hide another at the same point
		points := MountPointsUnder(dir)
		if len(points) == 0 {
			return
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
}

// MountPointsUnder lists the machine's mount points under dir (dir included).
func MountPointsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	return points
}

// removeCgroups removes the kubelet's cgroup trees that were not there before, deepest first
// (a cgroup directory goes with rmdir once its children are gone).
func removeCgroups(before []string) {
	for _, top := range kubeletCgroups() {
		if slices.Contains(before, top) {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}
