package node

import (
	"os"
	"path/filepath"
	"slices"
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
	// NetnsDir says whether /run/netns exists, leaving it out while it is the harness's and
	// holds namespaces (harnessNetns): ip netns add makes it, a mount point, on a machine
	// that has none, and the harness's last namespace deleted removes it.
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

// Snapshot reads the machine, leaving out what belongs to another cluster (a tenant:
// tenants.go): its namespaces, cgroups, processes and mounts, whether it runs beside or its test
// process was killed (the next cluster to start removes what that one left, which is no suite's
// own). While a tenant's record exists, the sysctls and fixed-path directories are the ones it
// saved, as the machine had them before any kubelet ran: the last tenant out puts them back.
func Snapshot() Machine {
	tenants, s := readTenants()
	owned := func(own func(tenant) bool) bool {
		for _, t := range tenants {
			if own(t) {
				return true
			}
		}
		return false
	}
	m := readMachine(func(pid, cmdline string) bool {
		return owned(func(t tenant) bool { return t.ownsProcess(pid, cmdline) })
	}, func(point string) bool {
		return owned(func(t tenant) bool {
			return t.ownsPath(point) || (strings.HasPrefix(point, netnsDir+"/") && t.ownsNetns(filepath.Base(point)))
		})
	})
	m.Cgroups = without(m.Cgroups, func(cg string) bool { return owned(func(t tenant) bool { return t.ownsCgroup(cg) }) })
	m.Netns = without(m.Netns, func(ns string) bool { return owned(func(t tenant) bool { return t.ownsNetns(filepath.Base(ns)) }) })
	if s != nil {
		m.Sysctls, m.Dirs = s.Sysctls, s.Dirs
	}
	return m
}

// without is list less what drop says, nil when nothing is left (as a list read empty is).
func without(list []string, drop func(string) bool) []string {
	if list = slices.DeleteFunc(list, drop); len(list) == 0 {
		return nil
	}
	return list
}

// readMachine reads the machine as it is, without the processes and mount points skip names.
func readMachine(skipProcess func(pid, cmdline string) bool, skipMount func(point string) bool) Machine {
	var m Machine
	m.Sysctls, m.Dirs = machineWide()
	m.Cgroups = kubeletCgroups()
	m.Netns, _ = filepath.Glob(netnsDir + "/*")
	made, inUse := harnessNetns()
	harness := made && inUse
	_, err := os.Stat(netnsDir)
	m.NetnsDir = err == nil && !harness
	m.Processes = nodeProcesses(skipProcess)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) > 4 && !skipMount(f[4]) && (!harness || f[4] != netnsDir) {
				m.Mounts++
			}
		}
	}
	return m
}

// machineWide reads what every kubelet changes on the machine: its sysctls, and whether each
// fixed-path directory exists.
func machineWide() (sysctls map[string]string, dirs map[string]bool) {
	sysctls, dirs = map[string]string{}, map[string]bool{}
	for _, key := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + key); err == nil {
			sysctls[key] = strings.TrimSpace(string(b))
		}
	}
	for _, d := range fixedDirs {
		_, err := os.Stat(d)
		dirs[d] = err == nil
	}
	return sysctls, dirs
}

// nodeProcesses are the command lines of the node's processes and of every process in a PID
// namespace other than the machine's: a container's (Redis in another suite's tests runs in the
// machine's own, and is not counted). skip leaves out those of a cluster running beside.
func nodeProcesses(skip func(pid, cmdline string) bool) []string {
	machine, _ := os.Readlink("/proc/self/ns/pid")
	var procs []string
	eachProcess(func(pid, cmdline string) {
		if skip(pid, cmdline) {
			return
		}
		ns, err := os.Readlink(filepath.Join("/proc", pid, "ns", "pid"))
		if err == nil && ns != machine {
			procs = append(procs, cmdline)
			return
		}
		for _, name := range nodeBinaries {
			if strings.Contains(cmdline, name) {
				procs = append(procs, cmdline)
				return
			}
		}
	})
	return procs
}

// eachProcess calls f with the id and the command line (arguments joined by spaces) of every
// process on the machine that has one (not a kernel thread).
func eachProcess(f func(pid, cmdline string)) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(b) > 0 {
			f(filepath.Base(dir), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// kubeletCgroups are the cgroups kubelets make, in each hierarchy: the default root's, and the
// nodes' own roots (Node.CgroupRoot).
func kubeletCgroups() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	own, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRootPrefix + "*")
	return append(m, own...)
}
