package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/org/redis-operator/test/procfs"
)

// What happens to machines, done to a node: power off, power on, freeze, thaw. A node powered
// off keeps its disk (containerd's images and snapshots, the kubelet's directory, its volumes)
// and loses what a reboot loses (its processes, containers, mounts and runtime state).

// PowerOff stops the node at once, as a machine losing power: its link goes down first (no
// goodbye reaches anyone), then every process of it is killed with SIGKILL (the kubelet,
// kube-proxy, containerd, the shims and every container), its mounts go and its runtime state
// (what a machine keeps in /run) is removed. The API server hears nothing more from it: the
// node controller marks it NotReady once its lease lapses.
func (n *Node) PowerOff() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.off {
		return fmt.Errorf("node %s is already off", n.Name)
	}
	if n.cfg.Network == nil {
		return errors.New("a node on no Network cannot be powered off")
	}
	if err := n.cfg.Network.Cut(n.Name); err != nil {
		return err
	}
	n.off = true
	pids := n.processTree()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, p := range n.procs {
		<-p.Done()
	}
	n.procs = nil
	if n.Containerd != nil {
		n.Containerd.Crashed()
		n.Containerd = nil
	}
	waitGone(pids, 10*time.Second)
	unmountUnder(n.cfg.Dir)
	removeCgroupTree(n.CgroupRoot())
	// /run is a tmpfs on a machine: containerd's state (its tasks, the shims' sockets) and the
	// kubelet's pod network state are gone after a reboot.
	for _, volatile := range []string{filepath.Join(n.cfg.Dir, "containerd", "state"), filepath.Join(n.cfg.Dir, "containerd", "runc"),
		filepath.Join(n.cfg.Dir, "cni", "networks")} {
		if err := os.RemoveAll(volatile); err != nil {
			return err
		}
	}
	return nil
}

// PowerOn boots a node that was powered off: containerd, the kubelet and kube-proxy start again
// on what the node kept, and its link comes up. The kubelet finds its pods in the API server
// and starts those still bound to it.
func (n *Node) PowerOn() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.off {
		return fmt.Errorf("node %s is not off", n.Name)
	}
	if err := n.cfg.Network.Join(n.Name); err != nil {
		return err
	}
	if err := n.boot(); err != nil {
		return err
	}
	n.off = false
	return nil
}

// Off says whether the node is powered off.
func (n *Node) Off() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.off
}

// Freeze stops every process of the node where it is (SIGSTOP), as a hung machine: the kubelet
// no longer reports, containers no longer answer, though the kernel still holds their sockets
// open (a connection is accepted, then nothing comes back). Thaw lets them run on.
func (n *Node) Freeze() error { return n.signalAll(syscall.SIGSTOP) }

// Thaw lets the processes of a frozen node run on (SIGCONT).
func (n *Node) Thaw() error { return n.signalAll(syscall.SIGCONT) }

func (n *Node) signalAll(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.off {
		return fmt.Errorf("node %s is off", n.Name)
	}
	var errs []error
	for _, pid := range n.processTree() {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// processTree is every process of the node: the kubelet and kube-proxy, containerd, the shims,
// and every process under them (the containers'), parents first.
func (n *Node) processTree() []int {
	var roots []int
	for _, p := range n.procs {
		roots = append(roots, p.Cmd.Process.Pid)
	}
	if n.Containerd != nil && n.Containerd.proc != nil {
		roots = append(roots, n.Containerd.PID())
		roots = append(roots, n.Containerd.ShimPIDs()...)
	}
	children := map[int][]int{}
	for _, st := range procfs.All() {
		children[st.PPID] = append(children[st.PPID], st.PID)
	}
	seen := map[int]bool{}
	var out []int
	for len(roots) > 0 {
		pid := roots[0]
		roots = roots[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		roots = append(roots, children[pid]...)
	}
	return out
}

// waitGone waits until none of pids exists any more (or timeout): a killed process's mounts and
// cgroup stay until it has exited.
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		alive := false
		for _, pid := range pids {
			// A zombie is gone for our purpose: its parent (a killed shim) reaps it never.
			if procfs.Alive(pid) {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
