package node

import (
	"os"
	"path/filepath"
	"strings"
)

// Machine is what a node changes outside its directory, and the machine must find as it was
// when the node stops: the sysctls the kubelet sets, the directories at fixed paths that the
// kubelet, containerd and the CNI plugins write whatever their configuration says, the kubelet's
// cgroups, network namespaces (the node's and its pods'), the cluster's processes and the
// number of mounts.
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
	// clusterBinaries name the cluster's processes in a command line.
	clusterBinaries = []string{"kubelet", "kube-proxy", "containerd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
		"etcd ", "redis-server", "/pause", "/manager"}
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
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		for _, name := range clusterBinaries {
			if strings.Contains(cmdline, name) {
				m.Processes = append(m.Processes, cmdline)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		m.Mounts = strings.Count(string(b), "\n")
	}
	return m
}

// kubeletCgroups are the cgroups the kubelet makes, in each hierarchy.
func kubeletCgroups() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	return m
}
