package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace the harness made (ip netns add): the node's addresses, bridges,
// routes and iptables rules live in it, so none exists in the machine's own namespace and two
// nodes never collide. Deleting it takes all of them away.
type Netns struct {
	Name string
}

// CreateNetns makes the namespace name with its loopback up.
func CreateNetns(name string) (*Netns, error) {
	err := withLock(func() error {
		// ip netns add makes /run/netns, a mount point, when it is missing; then the harness
		// made it, and its last namespace deleted takes it away again (releaseNetnsDir).
		if _, err := os.Stat(netnsDir); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(netnsDirMade, nil, 0o644); err != nil {
				return err
			}
		}
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			releaseNetnsDir()
			return fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	n := &Netns{Name: name}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		n.Delete()
		return nil, err
	}
	return n, nil
}

const (
	netnsDir = "/run/netns"
	// netnsDirMade is there while /run/netns is the harness's: made by its first namespace on a
	// machine that had none (a freshly booted one), so that the last one deleted, in whichever
	// test process, removes it with its mount.
	netnsDirMade = "/run/redis-operator-netns-made"
)

// releaseNetnsDir removes /run/netns and its mount when the harness made them and no namespace
// is left in it. The caller holds the machine's lock (withLock): a namespace made meanwhile
// would lose its mount.
func releaseNetnsDir() {
	if made, inUse := harnessNetns(); !made || inUse {
		return
	}
	_ = unix.Unmount(netnsDir, unix.MNT_DETACH)
	if err := os.Remove(netnsDir); err == nil || errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(netnsDirMade)
	}
}

// harnessNetns says whether the harness made /run/netns (netnsDirMade), and whether any
// namespace is in it: while both hold, it and its mount go with the last of them, and Snapshot
// counts neither; made and left empty, it is a leftover.
func harnessNetns() (made, inUse bool) {
	if _, err := os.Stat(netnsDirMade); err != nil {
		return false, false
	}
	left, _ := os.ReadDir(netnsDir)
	return true, len(left) > 0
}

// Path is the namespace's file, for nsenter --net and setns.
func (n *Netns) Path() string { return filepath.Join(netnsDir, n.Name) }

// IP runs ip with args in the namespace.
func (n *Netns) IP(args ...string) error {
	out, err := exec.Command("ip", append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Command is a command that runs in the namespace and only there: nsenter switches the network
// namespace alone (ip netns exec would also give it a mount namespace of its own, and the
// kubelet's mounts must be seen by containerd and runc).
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)...)
}

// PodFiles are the files a pod's process finds where Kubernetes puts them, given to a process
// the harness runs in the node's namespace.
type PodFiles struct {
	// ResolvConf becomes /etc/resolv.conf: names resolve through the cluster's DNS (a static Go
	// binary reads no other file).
	ResolvConf string
	// ServiceAccount, when set, is a directory whose files (token, namespace) appear in
	// /var/run/secrets/kubernetes.io/serviceaccount, as in a pod of that ServiceAccount.
	ServiceAccount string
}

// CommandWith is Command with files where a pod has them: the process runs in a mount namespace
// of its own (unshare), where resolv.conf is bind-mounted over the machine's file and /run
// (/var/run) is a fresh tmpfs holding the ServiceAccount's files. The mounts end with the
// process; the machine's files are never touched.
func (n *Netns) CommandWith(ctx context.Context, files PodFiles, name string, args ...string) *exec.Cmd {
	script := `mount --bind "$RESOLV_CONF" /etc/resolv.conf`
	if files.ServiceAccount != "" {
		script += ` && mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount` +
			` && cp "$SERVICE_ACCOUNT"/* /run/secrets/kubernetes.io/serviceaccount/`
	}
	script += ` && unset RESOLV_CONF SERVICE_ACCOUNT && exec "$@"`
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.Path(), "--", "unshare", "--mount", "--propagation", "private", "--",
		"env", "RESOLV_CONF=" + files.ResolvConf, "SERVICE_ACCOUNT=" + files.ServiceAccount, "sh", "-c", script, "sh", name}, args...)...)
	return cmd
}

// Delete removes the namespace (ip netns delete), and with it its interfaces and rules.
func (n *Netns) Delete() {
	_ = withLock(func() error {
		n.deleteLocked()
		return nil
	})
}

// deleteLocked is Delete for a caller that holds the machine's lock.
func (n *Netns) deleteLocked() {
	_ = exec.Command("ip", "netns", "delete", n.Name).Run()
	releaseNetnsDir()
}

// Listen opens a listener inside the namespace. A socket keeps the namespace it was made in,
// so the harness's own goroutines serve it from the machine's namespace.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	return inside(n, func() (net.Listener, error) { return net.Listen(network, address) })
}

// ListenPacket opens a packet listener (UDP) inside the namespace.
func (n *Netns) ListenPacket(network, address string) (net.PacketConn, error) {
	return inside(n, func() (net.PacketConn, error) { return net.ListenPacket(network, address) })
}

// Dial connects to an address inside the namespace (a pod's, a ClusterIP).
func (n *Netns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return inside(n, func() (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, network, address) })
}

// inside is what open returns when it runs in n: the socket it makes keeps the namespace.
func inside[T any](n *Netns, open func() (T, error)) (T, error) {
	var t T
	err := n.do(func() error {
		var err error
		t, err = open()
		return err
	})
	return t, err
}

// do runs f on an OS thread switched into the namespace, then switches it back (InNamespace).
func (n *Netns) do(f func() error) error {
	target, err := os.Open(n.Path())
	if err != nil {
		return err
	}
	defer target.Close()
	if err := InNamespace(target, f); err != nil {
		return fmt.Errorf("network namespace %s: %w", n.Name, err)
	}
	return nil
}

// InNamespace runs f on an OS thread switched into the network namespace ns holds open (a socket
// made there stays there), then switches the thread back. The thread must come back, not end: a
// process started from it with a parent-death signal (the node's kubelet, a test's redis-server)
// would die with it. Only a thread that cannot be switched back is left locked, to end with its
// goroutine.
func InNamespace(ns *os.File, f func() error) error {
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errs <- err
			return
		}
		defer origin.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errs <- fmt.Errorf("entering: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
			errs <- errors.Join(ferr, fmt.Errorf("leaving: %w", err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errs <- ferr
	}()
	return <-errs
}

// Forward accepts connections on l and joins each to a connection that dial opens, until l is
// closed: the API server on the machine's loopback seen from inside the namespace, or the
// namespace's API server seen from the machine's loopback.
func Forward(l net.Listener, dial func() (net.Conn, error)) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := dial()
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
