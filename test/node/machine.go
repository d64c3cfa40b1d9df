package node

import (
	"os"
	"path/filepath"
	"strings"
)

// Machine is what a node changes outside its directory, and the machine must find as it was
// when the node stops: the sysctls the kubelet sets, the directories at fixed paths that the
// kubelet, containerd and the CNI plugins write whatever their configuration says, the kubelet's
// cgroups, network namespaces (the node's and its pods'), the node's processes and its
// containers', and the number of mounts.
type Machine struct {
	Sysctls map[string]string
	Dirs    map[string]bool // whether each fixed-path directory exists
	Cgroups []string
	Netns   []string
	// NetnsDir says whether /run/netns exists: ip netns add makes it, a mount point.
	NetnsDir  bool
	Processes []string
	Mounts    int
}

var (
	kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}
	fixedDirs      = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd"}
	// nodeBinaries name the node's own processes in a command line. The control plane's are not
	// listed: other suites (envtest) run those binaries on the machine at the same time, and the
	// harness finds its own by their directory.
	nodeBinaries = []string{"kubelet", "kube-proxy", "containerd"}
)

// Snapshot reads the machine.
func Snapshot() Machine {
	m := Machine{Sysctls: map[string]string{}, Dirs: map[string]bool{}}
	for _, key := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + key); err == nil {
			m.Sysctls[key] = strings.TrimSpace(string(b))
		}
	}
	for _, d := range fixedDirs {
		_, err := os.Stat(d)
		m.Dirs[d] = err == nil
	}
	m.Cgroups = kubeletCgroups()
	m.Netns, _ = filepath.Glob("/run/netns/*")
	_, err := os.Stat("/run/netns")
	m.NetnsDir = err == nil
	m.Processes = nodeProcesses()
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		m.Mounts = strings.Count(string(b), "\n")
	}
	return m
}

// nodeProcesses are the command lines of the node's processes and of every process in a PID
// namespace other than the machine's: a container's (Redis in another suite's tests runs in the
// machine's own, and is not counted).
func nodeProcesses() []string {
	machine, _ := os.Readlink("/proc/self/ns/pid")
	var procs []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		ns, err := os.Readlink(filepath.Join(dir, "ns", "pid"))
		if err == nil && ns != machine {
			procs = append(procs, cmdline)
			continue
		}
		for _, name := range nodeBinaries {
			if strings.Contains(cmdline, name) {
				procs = append(procs, cmdline)
				break
			}
		}
	}
	return procs
}

// kubeletCgroups are the cgroups kubelets make, in each hierarchy: the default root's, and the
// nodes' own roots (Node.CgroupRoot).
func kubeletCgroups() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	own, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRootPrefix + "*")
	return append(m, own...)
}
