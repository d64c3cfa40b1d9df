//go:build node

package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/registry"
	"github.com/org/redis-operator/test/testenv"
)

const operatorImage = "example.com/redis-operator:node-test"

// shortDir is a directory for containerd: its socket path must fit a Unix socket's 108 bytes,
// which a test's temporary directory (named after the test) may not.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "node-")
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, os.RemoveAll(dir), "containerd's directory is removed: nothing is mounted in it")
	})
	return dir
}

// staticBuild builds pkg as make images does: statically linked.
func staticBuild(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	require.NoError(t, images.BuildStatic(".", pkg, out))
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The image a user's cluster pulls, run by containerd and runc as the operator's Deployment
// runs it: its own user, a read-only root filesystem, and its entrypoint serving the probes.
// The container shares the machine's network (no CNI here: the API server is on 127.0.0.1).
func TestTheOperatorImageRunsAsNonRootOnAReadOnlyRootAndServesItsProbes(t *testing.T) {
	require.NoError(t, node.Required())
	ctx := context.Background()

	img, err := images.Operator(staticBuild(t, "github.com/org/redis-operator/cmd"))
	require.NoError(t, err)
	_, cfg := testenv.StartFor(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, testenv.WriteKubeconfig(cfg, kubeconfig))
	require.NoError(t, os.Chmod(kubeconfig, 0o644)) // read by the image's user through a bind mount

	c, before := startContainerd(t, map[string]v1.Image{operatorImage: img})
	require.NoError(t, c.Pull(ctx, operatorImage), "pulled through the registry mirror")

	port := freePort(t)
	_, err = c.Ctr(ctx, "run", "--detach", "--net-host", "--read-only", "--runc-root", c.RuncRoot, "--cgroup", c.Cgroup("operator"),
		"--mount", "type=bind,src="+kubeconfig+",dst=/var/run/kubeconfig,options=rbind:ro",
		"--env", "KUBECONFIG=/var/run/kubeconfig",
		operatorImage, "operator",
		"/manager", "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(port), "--metrics-bind-address=0", "--install-monitoring=false")
	require.NoError(t, err)

	for _, probe := range []string{"/healthz", "/readyz"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, probe))
			if !assert.NoError(c, err) {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(c, http.StatusOK, resp.StatusCode, "%s", body)
		}, 60*time.Second, 200*time.Millisecond, "the entrypoint serves %s", probe)
	}

	pid := taskPID(t, c, "operator")
	assert.Equal(t, strconv.Itoa(images.NonRootUID), statusField(t, pid, "Uid")[0], "runs as the image's user")
	assert.Equal(t, strconv.Itoa(images.NonRootUID), statusField(t, pid, "Gid")[0])
	assert.Contains(t, rootMountOptions(t, pid), "ro", "its root filesystem is read-only")

	assertStopsLeavingNothing(t, c, before)
}

// The Redis image the node pulls for spec.version: Debian's Redis, run as the StatefulSet runs
// it (the image's user, a read-only root, its data on a volume at /data).
func TestTheRedisImageServesAsItsUserOnAReadOnlyRootWithItsDataOnAVolume(t *testing.T) {
	require.NoError(t, node.Required())
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	_, img, err := images.Load(filepath.Join(root, "bin", "images", "redis"))
	require.NoError(t, err, "make redis-image")
	const image = "docker.io/library/redis:7.2"

	c, before := startContainerd(t, map[string]v1.Image{image: img})
	require.NoError(t, c.Pull(ctx, image))
	data := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(data, 0o750))
	require.NoError(t, os.Chown(data, images.RedisUID, images.RedisUID)) // as fsGroup leaves a volume
	port := strconv.Itoa(freePort(t))
	_, err = c.Ctr(ctx, "run", "--detach", "--net-host", "--read-only", "--runc-root", c.RuncRoot, "--cgroup", c.Cgroup("redis"),
		"--mount", "type=bind,src="+data+",dst=/data,options=rbind:rw",
		image, "redis", "redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", "/data", "--save", "")
	require.NoError(t, err)

	// The image's own redis-cli, in the container, as kubectl exec would run it.
	require.EventuallyWithT(t, func(col *assert.CollectT) {
		out, err := c.Ctr(ctx, "tasks", "exec", "--exec-id", "ping", "redis", "redis-cli", "-p", port, "ping")
		assert.NoError(col, err)
		assert.Equal(col, "PONG", strings.TrimSpace(out))
	}, 30*time.Second, 200*time.Millisecond)
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + port})
	defer client.Close()
	require.NoError(t, client.Set(ctx, "k", "v", 0).Err())
	require.NoError(t, client.Save(ctx).Err())
	info, err := os.Stat(filepath.Join(data, "dump.rdb"))
	require.NoError(t, err, "the snapshot is on the volume")
	assert.Equal(t, uint32(images.RedisUID), info.Sys().(*syscall.Stat_t).Uid)

	pid := taskPID(t, c, "redis")
	assert.Equal(t, strconv.Itoa(images.RedisUID), statusField(t, pid, "Uid")[0])
	assert.Contains(t, rootMountOptions(t, pid), "ro")
	version, err := client.InfoMap(ctx, "server").Result()
	require.NoError(t, err)
	t.Logf("redis_version %s in the image tagged 7.2", version["Server"]["redis_version"])

	assertStopsLeavingNothing(t, c, before)
}

// machineBefore is what the machine held before containerd started.
type machineBefore struct {
	dir            string // containerd's own
	defaultCgroups []string
	runDirExisted  bool
	runDirEntries  []string // shims' sockets and fifos another containerd on the machine holds
}

// assertStopsLeavingNothing stops containerd and checks that no mount, cgroup, runc state or
// fixed-path directory of its containers is left behind.
func assertStopsLeavingNothing(t *testing.T, c *node.Containerd, before machineBefore) {
	t.Helper()
	c.Stop()
	assert.Empty(t, node.MountPointsUnder(before.dir))
	assert.Equal(t, before.defaultCgroups, cgroupsNamed(t, "k8s.io"))
	if !before.runDirExisted && len(newEntries(nil, runDirEntries(t))) == 0 {
		assert.NoDirExists(t, "/run/containerd")
	}
	assert.Empty(t, cgroupsNamed(t, strings.Split(c.Cgroup("x"), "/")[1]), "the containers' cgroups and their parent")
	containers, err := filepath.Glob(filepath.Join(c.RuncRoot, "*", "*"))
	require.NoError(t, err)
	assert.Empty(t, containers, "runc's state of the containers (under their namespace's directory)")
	assert.Empty(t, c.ShimPIDs(), "the shims of this containerd")
	assert.Empty(t, newEntries(before.runDirEntries, runDirEntries(t)), "the shims' sockets and ctr's fifos")
}

// runDirEntries lists the fixed-path sockets and fifos of every containerd on the machine: a
// containerd killed with its machine's restart leaves its own there, which are not ours to judge.
func runDirEntries(t *testing.T) []string {
	t.Helper()
	entries, err := filepath.Glob("/run/containerd/*/*")
	require.NoError(t, err)
	return entries
}

// newEntries are the entries of after not in before that no process serves: a shim of a cluster
// running beside answers on its socket, one this test's containerd left does not.
func newEntries(before, after []string) []string {
	var added []string
	for _, e := range after {
		if slices.Contains(before, e) {
			continue
		}
		if conn, err := net.DialTimeout("unix", e, time.Second); err == nil {
			conn.Close()
			continue
		}
		added = append(added, e)
	}
	return added
}

// startContainerd starts a registry holding images and a containerd pulling through it, both
// stopped when the test ends, and returns containerd and what the machine held before it.
func startContainerd(t *testing.T, images map[string]v1.Image) (*node.Containerd, machineBefore) {
	t.Helper()
	_, err := os.Stat("/run/containerd")
	before := machineBefore{defaultCgroups: cgroupsNamed(t, "k8s.io"), runDirExisted: err == nil, runDirEntries: runDirEntries(t)}
	reg, err := registry.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Stop()) })
	mirrored, err := reg.PushAll(context.Background(), images)
	require.NoError(t, err)
	before.dir = shortDir(t)
	c, err := node.StartContainerd(node.ContainerdConfig{Dir: before.dir, RegistryHost: reg.Host, Mirrored: mirrored})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	return c, before
}

func taskPID(t *testing.T, c *node.Containerd, id string) int {
	t.Helper()
	out, err := c.Ctr(context.Background(), "tasks", "list")
	require.NoError(t, err)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			return pid
		}
	}
	t.Fatalf("no task %s: %s", id, out)
	return 0
}

// statusField is a field of /proc/<pid>/status.
func statusField(t *testing.T, pid int, field string) []string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return nil
}

// rootMountOptions are the mount options of the process's root, from its mountinfo.
func rootMountOptions(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
			return strings.Split(f[5], ",")
		}
	}
	t.Fatalf("no root mount for %d", pid)
	return nil
}

// cgroupsNamed are the cgroup directories called name at the top of each hierarchy.
func cgroupsNamed(t *testing.T, name string) []string {
	t.Helper()
	m, err := filepath.Glob("/sys/fs/cgroup/*/" + name)
	require.NoError(t, err)
	return m
}
