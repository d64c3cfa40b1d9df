package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Two local clusters may run on the machine at once (two real-node suites run side by side).
// Each network is a tenant of the machine while it exists: a file named after it in tenantsDir
// says which test process made it and which directories hold its nodes. With it:
//   - Snapshot leaves out what belongs to a tenant (its namespaces, cgroups, processes and
//     mounts), so that a suite compares the machine before and after its own cluster only;
//   - what every kubelet changes machine-wide (sysctls, fixed-path directories) is recorded by
//     the first tenant in (savedFile) and put back by the last one out (Restore), whatever order
//     the clusters start and stop in;
//   - a tenant whose process is gone (a test binary killed by go test's -timeout, which no
//     cleanup survives) is reaped by the next tenant in: its processes, mounts, namespaces and
//     cgroups.
//
// The record is changed under a machine-wide lock (an abstract unix socket, which leaves nothing
// behind when its process ends), and removed with the last tenant.
const (
	tenantsDir = "/run/redis-operator-nodes"
	savedFile  = "machine.json"
	lockName   = "@redis-operator-nodes"
)

// tenant is a network's entry: its test process (pid and start time, as /proc has them: a pid is
// reused) and its nodes' directories.
type tenant struct {
	Name  string   `json:"name"`
	PID   int      `json:"pid"`
	Start string   `json:"start"`
	Dirs  []string `json:"dirs,omitempty"`
	alive bool
}

// saved is what the kubelets change machine-wide, as the machine had it before the first tenant.
type saved struct {
	Sysctls map[string]string `json:"sysctls"`
	Dirs    map[string]bool   `json:"dirs"`
}

// withLock runs f holding the machine-wide lock.
func withLock(f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: lockName})
		if err == nil {
			defer func() { _ = syscall.Close(fd) }()
			return f()
		}
		_ = syscall.Close(fd)
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return fmt.Errorf("the machine's tenants lock: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processStart is the start time of pid (field 22 of /proc/<pid>/stat), "" when it is gone.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command (field 2) is in parentheses and may hold spaces: count from its end.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	if f := strings.Fields(rest); len(f) > 19 {
		return f[19]
	}
	return ""
}

// readTenants lists the record's tenants, each marked alive when its process still runs.
func readTenants() ([]tenant, *saved) {
	entries, _ := os.ReadDir(tenantsDir)
	var tenants []tenant
	var s *saved
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(tenantsDir, e.Name()))
		if err != nil {
			continue
		}
		if e.Name() == savedFile {
			s = &saved{}
			if json.Unmarshal(b, s) != nil {
				s = nil
			}
			continue
		}
		var t tenant
		if json.Unmarshal(b, &t) != nil {
			continue
		}
		t.alive = t.Start != "" && processStart(t.PID) == t.Start
		tenants = append(tenants, t)
	}
	return tenants, s
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// enter makes name a tenant of the machine: it reaps the tenants whose process is gone, and
// when it is the first, records the machine as it is (or keeps the record a reaped tenant left:
// that one was taken before it changed anything).
func enter(name string) error {
	return withLock(func() error {
		tenants, s := readTenants()
		for _, t := range tenants {
			if !t.alive {
				t.reap()
				_ = os.Remove(filepath.Join(tenantsDir, t.Name))
			}
		}
		if err := os.MkdirAll(tenantsDir, 0o755); err != nil {
			return err
		}
		if s == nil {
			sysctls, dirs := machineWide()
			if err := writeJSON(filepath.Join(tenantsDir, savedFile), saved{Sysctls: sysctls, Dirs: dirs}); err != nil {
				return err
			}
		}
		pid := os.Getpid()
		return writeJSON(filepath.Join(tenantsDir, name), tenant{Name: name, PID: pid, Start: processStart(pid)})
	})
}

// addDir records dir as one of tenant name's node directories.
func addDir(name, dir string) error {
	return withLock(func() error {
		path := filepath.Join(tenantsDir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var t tenant
		if err := json.Unmarshal(b, &t); err != nil {
			return err
		}
		t.Dirs = append(t.Dirs, dir)
		return writeJSON(path, t)
	})
}

// leave removes tenant name. The last one out removes the record; its saved values are the
// caller's to put back (Restore, with the Snapshot taken before, which reported them).
func leave(name string) {
	err := withLock(func() error {
		if err := os.Remove(filepath.Join(tenantsDir, name)); err != nil {
			return err
		}
		if tenants, _ := readTenants(); len(tenants) == 0 {
			return os.RemoveAll(tenantsDir)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "network %s leaving the machine's tenants: %v\n", name, err)
	}
}

// owns says whether what is named by netns, cgroup or path belongs to tenant t.
func (t tenant) ownsNetns(name string) bool {
	return name == t.Name || strings.HasPrefix(name, t.Name+"-")
}

func (t tenant) ownsCgroup(path string) bool {
	return strings.Contains(path, "/"+cgroupRootPrefix+t.Name+"-")
}

func (t tenant) ownsPath(path string) bool {
	for _, d := range t.Dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// ownsProcess says whether the process of pid, with command line cmdline, is one of t's: a node
// binary started with one of its directories, or a container in one of its cgroups.
func (t tenant) ownsProcess(pid, cmdline string) bool {
	for _, d := range t.Dirs {
		if strings.Contains(cmdline, d+"/") {
			return true
		}
	}
	b, _ := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	return t.ownsCgroup(string(b))
}

// reap removes what a tenant whose process is gone left: its containers (runc state under its
// directories) and processes, its mounts, its namespaces, cgroups and directories.
func (t tenant) reap() {
	for _, d := range t.Dirs {
		roots, _ := filepath.Glob(filepath.Join(d, "containerd", "runc", "*"))
		for _, root := range roots {
			ids, _ := os.ReadDir(root)
			for _, id := range ids {
				_ = exec.Command("runc", "--root", root, "delete", "--force", id.Name()).Run()
			}
		}
	}
	eachProcess(func(pid, cmdline string) {
		if t.ownsProcess(pid, cmdline) {
			if n, err := strconv.Atoi(pid); err == nil {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
	for _, d := range t.Dirs {
		unmountUnder(d)
	}
	namespaces, _ := filepath.Glob(filepath.Join(netnsDir, t.Name+"*"))
	for _, ns := range namespaces {
		if t.ownsNetns(filepath.Base(ns)) {
			(&Netns{Name: filepath.Base(ns)}).deleteLocked() // enter holds the lock
		}
	}
	for _, cg := range kubeletCgroups() {
		if t.ownsCgroup(cg) {
			removeDirTree(cg)
		}
	}
	for _, d := range t.Dirs {
		_ = os.RemoveAll(d)
	}
}
