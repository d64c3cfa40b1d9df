// Package node runs the real parts below the local cluster's API server: containerd with runc
// (Debian's packages), pulling from the harness's OCI registry. Each instance has its root,
// state, sockets and runc root under its own directory; what containerd 1.6 and ctr keep at
// fixed paths (shims' sockets in /run/containerd/s, stdio fifos in /run/containerd/fifo) is
// removed when it stops, if it was not there before and nothing else uses it.
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Containerd is a running containerd.
type Containerd struct {
	// Socket is its gRPC socket, for ctr --address and the kubelet's container runtime endpoint.
	Socket string
	// RuncRoot is where runc keeps its containers' state.
	RuncRoot string
	// HostsDir holds a hosts.toml per registry host: every pull goes to the harness's registry.
	HostsDir string
	// cgroupParent holds the cgroups of the containers run with Cgroup, in every hierarchy.
	cgroupParent string
	cniConfDir   string
	registryHost string
	dir          string
	proc         *Process
	// madeRunDir says that /run/containerd did not exist before this containerd made it.
	madeRunDir bool
}

// runDir is where containerd 1.6 keeps its shims' sockets, whatever its state directory.
const runDir = "/run/containerd"

// Required reports what this machine lacks to run containerd, or nil.
func Required() error {
	var missing []string
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing: apt-get install containerd runc", strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return errors.New("containerd needs root")
	}
	return nil
}

// ContainerdConfig says where a containerd runs.
type ContainerdConfig struct {
	// Dir holds everything of its own.
	Dir string
	// RegistryHost (127.0.0.1:<port>) serves every pull of the names in Mirrored (docker.io,
	// example.com, registry.k8s.io).
	RegistryHost string
	Mirrored     []string
	// TLSRegistry (127.0.0.1:<port>) serves the names under its own address over HTTPS, with a
	// certificate TLSRegistryCA (a PEM file) signs; none when empty.
	TLSRegistry, TLSRegistryCA string
	// Netns, when set, is where containerd runs, and so the pods' network (CNIConfDir).
	Netns      *Netns
	CNIConfDir string
}

// StartContainerd runs containerd until Stop.
func StartContainerd(cfg ContainerdConfig) (*Containerd, error) {
	if err := Required(); err != nil {
		return nil, err
	}
	dir, registryHost := cfg.Dir, cfg.RegistryHost
	c := &Containerd{dir: dir, registryHost: registryHost, Socket: filepath.Join(dir, "containerd.sock"), RuncRoot: filepath.Join(dir, "runc"),
		HostsDir: filepath.Join(dir, "certs.d"), cgroupParent: "redis-operator-" + filepath.Base(dir), cniConfDir: cfg.CNIConfDir}
	if len(c.Socket) > 100 {
		return nil, fmt.Errorf("containerd's socket path %s is longer than a Unix socket's 108 bytes allow", c.Socket)
	}
	for _, host := range cfg.Mirrored {
		// The registry holds each name under /v2/<host>/<repository>, so that one registry
		// mirrors them all with their names kept (test/registry).
		if err := c.mirror(host, host); err != nil {
			return nil, err
		}
	}
	if cfg.TLSRegistry != "" {
		if err := c.trust(cfg.TLSRegistry, cfg.TLSRegistryCA); err != nil {
			return nil, err
		}
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(c.config()), 0o644); err != nil {
		return nil, err
	}
	if _, err := os.Stat(runDir); errors.Is(err, os.ErrNotExist) {
		c.madeRunDir = true
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command("containerd", "--config", config)
	if cfg.Netns != nil {
		cmd = cfg.Netns.Command(context.Background(), "containerd", "--config", config)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if c.proc, err = StartProcess(cmd); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.proc.Done():
			return nil, fmt.Errorf("containerd exited at start: %s", c.logTail())
		default:
		}
		if conn, err := net.Dial("unix", c.Socket); err == nil {
			conn.Close()
			if _, err := c.Ctr(context.Background(), "version"); err == nil {
				return c, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Stop()
	return nil, fmt.Errorf("containerd did not answer within 30s: %s", c.logTail())
}

// config is containerd 1.6's configuration. restrict_oom_score_adj: this machine's processes
// lack CAP_SYS_RESOURCE, and without it every sandbox fails ("can't get final child's PID from
// pipe: EOF"). The CRI's runc root is the instance's own, as ctr's is (Ctr), and so are the pods'
// network namespaces (under its state directory, not /run/netns: a node's pods' namespaces are
// told from another cluster's by their path, and go with the node's mounts).
func (c *Containerd) config() string {
	cni := ""
	if c.cniConfDir != "" {
		cni = fmt.Sprintf("  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = \"/usr/lib/cni\"\n    conf_dir = %q\n", c.cniConfDir)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = %q
%s`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.Socket, c.Socket+".ttrpc", c.HostsDir, c.RuncRoot, cni)
}

// mirror sends the pulls of the names under host to path on the registry
// (http://<registry>/v2/<path>/<repository>; override_path: the path is the registry's own).
// containerd reads hosts.toml at each pull.
func (c *Containerd) mirror(host, path string) error {
	if err := os.MkdirAll(filepath.Join(c.HostsDir, host), 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"http://%s/v2/%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n",
		host, c.registryHost, path)
	return os.WriteFile(filepath.Join(c.HostsDir, host, "hosts.toml"), []byte(hosts), 0o644)
}

// trust has containerd pull the names under host from host over HTTPS, verifying its
// certificate with the CA certificate in caFile.
func (c *Containerd) trust(host, caFile string) error {
	if err := os.MkdirAll(filepath.Join(c.HostsDir, host), 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = \"https://%s\"\n\n[host.\"https://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", host, host, caFile)
	return os.WriteFile(filepath.Join(c.HostsDir, host, "hosts.toml"), []byte(hosts), 0o644)
}

// MirrorAt sends the pulls of the names under host to path on the registry instead of
// <host>, until the returned function sends them back: a mirror of the registry's own.
func (c *Containerd) MirrorAt(host, path string) (restore func() error, err error) {
	if err := c.mirror(host, path); err != nil {
		return nil, err
	}
	return func() error { return c.mirror(host, host) }, nil
}

// ForgetImages removes every name containerd gives the images of these manifest digests
// (sha256:...), tags and digests alike: their next pod pulls them again. It returns the names
// removed. The snapshots of running containers stay.
func (c *Containerd) ForgetImages(ctx context.Context, digests ...string) ([]string, error) {
	out, err := c.Ctr(ctx, "images", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n")[1:] { // REF TYPE DIGEST SIZE PLATFORMS LABELS
		fields := strings.Fields(line)
		if len(fields) > 2 && slices.Contains(digests, fields[2]) {
			names = append(names, fields[0])
		}
	}
	if len(names) > 0 {
		if _, err := c.Ctr(ctx, append([]string{"images", "remove"}, names...)...); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// Images are the names of the images containerd holds for the kubelet.
func (c *Containerd) Images(ctx context.Context) ([]string, error) {
	out, err := c.Ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// Ctr runs ctr against this containerd, in its k8s.io namespace (the kubelet's), and returns
// its output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Cgroup is the cgroup path for a container id run by ctr (ctr run --cgroup): under a parent of
// this containerd's own, which Stop removes (ctr's default, /k8s.io, would outlive it).
func (c *Containerd) Cgroup(id string) string {
	return "/" + c.cgroupParent + "/" + id
}

// Pull pulls image through the registry mirror.
func (c *Containerd) Pull(ctx context.Context, image string) error {
	_, err := c.Ctr(ctx, "images", "pull", "--hosts-dir", c.HostsDir, image)
	return err
}

// Stop ends containerd after removing every container and image it holds, so that no mount,
// cgroup or shim outlives it.
func (c *Containerd) Stop() {
	if c.proc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := c.Ctr(ctx, "tasks", "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = c.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
			_, _ = c.Ctr(ctx, "tasks", "delete", "--force", id)
		}
	}
	if out, err := c.Ctr(ctx, "containers", "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = c.Ctr(ctx, "containers", "delete", id)
		}
	}
	c.proc.Stop(10 * time.Second)
	c.proc = nil
	c.removeLeftovers()
	// containerd removes a container's cgroup with its task, not the parent.
	parents, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.cgroupParent))
	for _, p := range parents {
		_ = os.Remove(p)
	}
	// The snapshots' overlay mounts go with their containers; a bind mount of containerd's own
	// (none in 1.6 with overlayfs) would keep dir from being removed, which the caller sees.
	// Another containerd of the harness may still use it: only what is empty goes.
	if c.madeRunDir {
		_ = os.Remove(filepath.Join(runDir, "s"))    // shims' sockets
		_ = os.Remove(filepath.Join(runDir, "fifo")) // ctr's stdio
		_ = os.Remove(runDir)
	}
}

// Crashed is what is left to do once containerd, its shims and its containers were killed at
// once (a node powered off): wait for containerd to end, and remove runc's state of the
// containers, with their cgroups. Its metadata (the containers it knew, its images) stays, as
// on a machine's disk.
func (c *Containerd) Crashed() {
	if c.proc == nil {
		return
	}
	<-c.proc.Done()
	c.proc = nil
	c.removeLeftovers()
	// A killed shim leaves its socket at the fixed path it listened on, which its bundle's
	// address file names (unix:///run/containerd/s/<hash>).
	addresses, _ := filepath.Glob(filepath.Join(c.dir, "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	for _, a := range addresses {
		if b, err := os.ReadFile(a); err == nil {
			if path, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "unix://"); ok && strings.HasPrefix(path, runDir+"/") {
				_ = os.Remove(path)
			}
		}
	}
}

// removeLeftovers stops what outlives containerd when it could not stop its containers (it was
// killed first): runc's state names each container, which runc deletes with its processes and
// cgroups; then the shims, which serve containerd's socket path.
func (c *Containerd) removeLeftovers() {
	namespaces, _ := os.ReadDir(c.RuncRoot)
	for _, ns := range namespaces {
		root := filepath.Join(c.RuncRoot, ns.Name())
		containers, _ := os.ReadDir(root)
		for _, id := range containers {
			_ = exec.Command("runc", "--root", root, "delete", "--force", id.Name()).Run()
		}
	}
	for _, pid := range c.ShimPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// PID is containerd's process id.
func (c *Containerd) PID() int { return c.proc.Cmd.Process.Pid }

// ShimPIDs are the process ids of the shims serving this containerd's socket: one per pod.
func (c *Containerd) ShimPIDs() []int {
	var pids []int
	eachProcess(func(pid, cmdline string) {
		if !strings.Contains(cmdline, "containerd-shim") || !strings.Contains(cmdline, c.Socket) {
			return
		}
		if n, err := strconv.Atoi(pid); err == nil {
			pids = append(pids, n)
		}
	})
	return pids
}

func (c *Containerd) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "containerd.log"))
	return string(b[max(0, len(b)-2000):])
}
