package node

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/org/redis-operator/test/procfs"
	"github.com/org/redis-operator/test/testenv"
)

// Node is a real Kubernetes node: a kubelet with containerd, runc and the CNI bridge plugin, in a
// network namespace of its own joined to the cluster's Network. It can be powered off (every
// process and container killed at once, its link down), powered on again with what it kept on
// disk, frozen (every process stopped: a hung machine) and thawed.
type Node struct {
	Name       string
	Netns      *Netns
	Containerd *Containerd
	cfg        Config
	procs      []*Process // the kubelet, then kube-proxy
	mu         sync.Mutex
	forwards   []net.Listener
	// off is true while the node is powered off.
	off bool
}

// Config says what a node joins.
type Config struct {
	// Dir holds everything of the node's own; it must be short (Unix sockets live in it).
	Dir string
	// Name is the node's name.
	Name string
	// Netns is the node's namespace and Addrs its addresses (Network.AddNode).
	Netns *Netns
	Addrs Addrs
	// Network is what the node is joined to: powering it off takes its link down.
	Network *Network
	// Labels are the node's own labels (topology.kubernetes.io/zone), which the kubelet
	// registers it with.
	Labels map[string]string
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
	// TLSRegistry (127.0.0.1:<port>, inside the namespace) is the registry over HTTPS, whose
	// images containerd pulls under its own address, trusting TLSRegistryCA (a PEM file): where
	// operator-sdk run bundle names the images it pulls itself.
	TLSRegistry, TLSRegistryCA string
	// ClusterDNS is the address of the cluster's DNS server, which the kubelet gives pods
	// (dnsPolicy ClusterFirst) with the search list of ClusterDomain; none when empty.
	ClusterDNS string
}

// LeaseDuration is how long a node's lease lasts: its kubelet renews it every quarter of it (5s).
const LeaseDuration = 20 * time.Second

// ClusterDomain is the domain of the cluster's Service names (<service>.<namespace>.svc.cluster.local).
const ClusterDomain = "cluster.local"

// Start brings the node up; it is Ready once the API server says so (the caller waits).
func Start(cfg Config) (n *Node, err error) {
	if err := Required(); err != nil {
		return nil, err
	}
	n = &Node{Name: cfg.Name, Netns: cfg.Netns, cfg: cfg}
	defer func() {
		if err != nil {
			n.Stop()
			n = nil
		}
	}()
	if cfg.Network != nil {
		if err := cfg.Network.Holds(cfg.Dir); err != nil {
			return n, err
		}
	}
	for _, addr := range cfg.ForwardFromMachine {
		if err := n.forwardFromMachine(addr); err != nil {
			return n, err
		}
	}
	if err := n.writeCNIConfig(n.cniConfDir()); err != nil {
		return n, err
	}
	return n, n.boot()
}

// boot starts containerd, the kubelet and kube-proxy: at Start, and at each power on.
func (n *Node) boot() error {
	var err error
	if n.Containerd, err = StartContainerd(ContainerdConfig{Dir: filepath.Join(n.cfg.Dir, "containerd"), RegistryHost: n.cfg.RegistryHost,
		Mirrored: n.cfg.Mirrored, TLSRegistry: n.cfg.TLSRegistry, TLSRegistryCA: n.cfg.TLSRegistryCA,
		Netns: n.Netns, CNIConfDir: n.cniConfDir()}); err != nil {
		return err
	}
	if err := n.startKubelet(n.cfg); err != nil {
		return err
	}
	return n.startKubeProxy(n.cfg)
}

func (n *Node) cniConfDir() string { return filepath.Join(n.cfg.Dir, "cni", "net.d") }

// CgroupRoot is the node's own cgroup tree, in every hierarchy, under which its kubelet puts its
// pods: two kubelets sharing one would each kill the other's pods as orphans. It is named after
// the node's namespace, unique on the machine (node names repeat from one cluster to the next,
// and two clusters may run at once).
func (n *Node) CgroupRoot() string { return "/" + cgroupRootPrefix + n.Netns.Name }

// cgroupRootPrefix starts the name of every node's cgroup tree (Snapshot lists them).
const cgroupRootPrefix = "k8s-"

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

// writeCNIConfig is the pods' network: the bridge plugin on cni0 with host-local addresses from
// the node's pod CIDR, its state under the node's directory. No masquerade: pods reach pods on
// other nodes and the control plane by their own addresses, routed by the Network.
func (n *Node) writeCNIConfig(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, n.cfg.Addrs.PodCIDR, filepath.Join(n.cfg.Dir, "cni", "networks"))
	return os.WriteFile(filepath.Join(dir, "10-pods.conflist"), []byte(conf), 0o644)
}

// startKubelet runs the kubelet in the namespace. Its port is reachable only there, where the
// API server calls it (logs, exec, port-forward) without a client certificate: anonymous, and
// AlwaysAllow. failCgroupV1: this machine has cgroup v1 (hybrid). NeverVerify: otherwise a preloaded image becomes ErrImageNeverPull once the same
// image was pulled under another name. The kubelet's pod logs and root are the node's own; its
// cgroup driver is cgroupfs (containerd 1.6 does not answer RuntimeConfig), its pods under the
// node's own cgroup root. It works out the node's status every second instead of every 10s (and
// still reports an unchanged one every 5 minutes): the node is Ready about 6s sooner after each
// start. Its lease lasts LeaseDuration (40s by default).
func (n *Node) startKubelet(cfg Config) error {
	root := filepath.Join(cfg.Dir, "kubelet")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := makeCgroup(n.CgroupRoot()); err != nil {
		return err
	}
	config := filepath.Join(cfg.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
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
nodeLeaseDurationSeconds: %d
`, n.CgroupRoot(), n.Containerd.Socket, filepath.Join(cfg.Dir, "pod-logs"), cfg.Addrs.IP, cfg.ClusterDNS, ClusterDomain,
		int(LeaseDuration.Seconds())), 0o644); err != nil {
		return err
	}
	args := []string{"--config=" + config, "--kubeconfig=" + cfg.Kubeconfig,
		"--root-dir=" + root, "--node-ip=" + cfg.Addrs.IP, "--hostname-override=" + cfg.Name, "--v=1"}
	if len(cfg.Labels) > 0 {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(cfg.Labels)) {
			labels = append(labels, k+"="+cfg.Labels[k])
		}
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	p, err := startIn(n.Netns, cfg.Dir, "kubelet", false, args...)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return nil
}

func (n *Node) startKubeProxy(cfg Config) error {
	p, err := StartKubeProxy(n.Netns, cfg.Dir, cfg.Name, cfg.Kubeconfig)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return nil
}

// StartKubeProxy runs kube-proxy in iptables mode in netns (a node's, or the control plane's,
// whose own processes reach Services too): its chains live and die there. It leaves conntrack's
// sysctls alone (they are the machine's). Its configuration and log are in dir.
func StartKubeProxy(netns *Netns, dir, hostname, kubeconfig string) (*Process, error) {
	config := filepath.Join(dir, "kube-proxy.yaml")
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
`, hostname, ClusterCIDR, kubeconfig), 0o644); err != nil {
		return nil, err
	}
	return startIn(netns, dir, "kube-proxy", true, "--config="+config, "--v=1")
}

// supervisor runs a program again a second after it exits, as a node's service manager (or a
// DaemonSet's pod) does, until it is sent SIGTERM, which it passes on. kube-proxy needs it: it
// exits by design when its Node's addresses change or its Node is deleted (a node powered off,
// deleted and registered again), and a node without it forwards no new Service.
const supervisor = `trap 'kill $child 2>/dev/null; wait $child; exit 0' TERM INT
while :; do "$@" & child=$!; wait $child; sleep 1; done`

// startIn starts one of the Kubernetes binaries in netns, its output appended to
// <dir>/<name>.log (a node powered on again writes on after what it wrote before). Supervised,
// it runs under supervisor: the Process is the supervising shell, the binary its child.
func startIn(netns *Netns, dir, name string, supervised bool, args ...string) (*Process, error) {
	bin, err := k8sBinary(name)
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin}, args...)
	if supervised {
		argv = append([]string{"sh", "-c", supervisor, "sh"}, argv...)
	}
	return StartLoggedIn(netns, filepath.Join(dir, name+".log"), argv...)
}

// StartLoggedIn starts argv in netns, its output appended to the file logPath.
func StartLoggedIn(netns *Netns, logPath string, argv ...string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := netns.Command(context.Background(), argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	return StartProcess(cmd)
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
		for _, pid := range append([]int{p.Cmd.Process.Pid}, procfs.Children(p.Cmd.Process.Pid)...) {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			// A supervising shell counts as what it runs (its child).
			if name := strings.TrimSpace(string(comm)); err == nil && name != "sh" && name != "sleep" {
				pids[name] = append(pids[name], pid)
			}
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
	b, _ := os.ReadFile(filepath.Join(n.cfg.Dir, name+".log"))
	return string(b[max(0, len(b)-4000):])
}

// Stop ends the node and removes what it made: the kubelet first (the caller deletes its pods
// before), then containerd with whatever containers remain, the mounts under its directory, its
// cgroup tree and its namespace (with its interfaces and rules). What nodes share on the machine
// (sysctls, fixed-path directories) is put back by Restore, once the last node has stopped.
func (n *Node) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.halt()
	if n.Containerd != nil {
		n.Containerd.Stop()
		n.Containerd = nil
	}
	for _, l := range n.forwards {
		_ = l.Close()
	}
	n.forwards = nil
	unmountUnder(n.cfg.Dir)
	removeCgroupTree(n.CgroupRoot())
	if n.cfg.Network != nil {
		n.cfg.Network.RemoveNode(n.Name)
	} else if n.Netns != nil {
		n.Netns.Delete()
	}
}

// halt stops the kubelet and kube-proxy.
func (n *Node) halt() {
	for _, p := range slices.Backward(n.procs) {
		p.Stop(10 * time.Second)
	}
	n.procs = nil
}

// Restore puts back what nodes change on the machine outside their directories, as before was
// (Snapshot, taken before the first node's namespace was made): /run/netns when the harness
// made it and nothing is left in it (a pod's namespace the runtime removed after the node's),
// the kubelets' cgroups, the sysctls they set, and the fixed-path directories that were not
// there. A cluster running beside keeps its cgroups, and the sysctls and directories wait for
// the last cluster out (tenants.go).
func Restore(before Machine) {
	_ = withLock(func() error {
		releaseNetnsDir()
		return nil
	})
	tenants, _ := readTenants()
	live := slices.DeleteFunc(tenants, func(t tenant) bool { return !t.alive })
	removeCgroups(slices.Concat(before.Cgroups, slices.DeleteFunc(kubeletCgroups(), func(cg string) bool {
		return !slices.ContainsFunc(live, func(t tenant) bool { return t.ownsCgroup(cg) })
	})))
	// What every kubelet changes goes back once no other cluster runs (its kubelets rely on it).
	if len(live) > 0 {
		return
	}
	for key, value := range before.Sysctls {
		_ = os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	}
	for d, existed := range before.Dirs {
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
		if !slices.Contains(before, top) {
			removeDirTree(top)
		}
	}
}

// removeCgroupTree removes the cgroup path (/k8s-node-1) in every hierarchy.
func removeCgroupTree(path string) {
	tops, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path))
	for _, top := range tops {
		removeDirTree(top)
	}
}

// removeDirTree removes a cgroup and those under it, deepest first (a cgroup directory goes
// with rmdir once its children are gone and no process is in it).
func removeDirTree(top string) {
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

// makeCgroup makes the cgroup path in every hierarchy of the machine (cgroup v1: one per
// controller, and the unified one).
func makeCgroup(path string) error {
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		var st unix.Statfs_t
		if unix.Statfs(h, &st) != nil || (st.Type != unix.CGROUP_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC) {
			continue // a symlink (cpu -> cpu,cpuacct) resolves to its hierarchy, seen once more: harmless
		}
		if err := os.MkdirAll(filepath.Join(h, path), 0o755); err != nil {
			return fmt.Errorf("making cgroup %s: %w", path, err)
		}
	}
	return nil
}

// IP is the node's address on the network.
func (n *Node) IP() string { return n.cfg.Addrs.IP }
