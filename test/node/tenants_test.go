//go:build node

package node_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/org/redis-operator/test/node"
)

// maxKeys is a sysctl every kubelet sets (kernel.keys.root_maxkeys): the helper changes it as a
// kubelet would.
const maxKeys = "/proc/sys/kernel/keys/root_maxkeys"

// Two local clusters may share the machine. While another cluster's test process runs, the
// machine's snapshot leaves out what is its (so each suite judges only its own cluster); once that
// process is killed (go test's -timeout panics, and no cleanup runs), what it left is still left
// out, the next cluster to start removes it, and the sysctls go back once the last cluster is out.
// The other cluster is this test binary run again (TestHelperAClusterKilled), with a network, a
// node's namespace, a mount in its directory and a sysctl changed, killed with SIGKILL.
func TestAClusterBesideIsLeftOutAndWhatAKilledOneLeftIsRemoved(t *testing.T) {
	before := node.Snapshot()
	dir := shortDir(t)
	name := "tenant-" + strconv.Itoa(os.Getpid()%100000)

	helper := exec.Command(os.Args[0], "-test.run=^TestHelperAClusterKilled$", "-test.v")
	helper.Env = append(os.Environ(), "HELPER_CLUSTER_DIR="+dir, "HELPER_CLUSTER_NAME="+name)
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if strings.Contains(lines.Text(), "cluster up") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		require.True(t, ok, "the helper exited before its cluster was up")
	case <-time.After(30 * time.Second):
		t.Fatal("the helper's cluster was not up within 30s")
	}

	changed, err := os.ReadFile(maxKeys)
	require.NoError(t, err)
	require.NotEqual(t, before.Sysctls["kernel/keys/root_maxkeys"], strings.TrimSpace(string(changed)), "the helper changed the sysctl")
	assert.Equal(t, before, node.Snapshot(), "the machine with a cluster running beside: its sysctl as before it")

	require.NoError(t, helper.Process.Kill())
	_ = helper.Wait()
	assert.FileExists(t, "/run/netns/"+name+"-1", "the killed cluster's node namespace is left")
	assert.NotEmpty(t, node.MountPointsUnder(dir), "the killed cluster's mount is left")
	assert.Equal(t, before, node.Snapshot(), "the machine, leaving out what the killed cluster left (the next cluster removes it)")

	// The next cluster to start removes what the killed one left.
	next, err := node.CreateNetwork(name + "n")
	require.NoError(t, err)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the killed cluster's directory is removed: %v", err)
	assert.Empty(t, node.MountPointsUnder(dir))
	assert.NoFileExists(t, "/run/netns/"+name+"-1")
	next.Delete()
	node.Restore(before)

	assert.Equal(t, before, node.Snapshot(), "the machine once the last cluster is out")
	now, err := os.ReadFile(maxKeys)
	require.NoError(t, err)
	// With a cluster running beside, its kubelets rely on the sysctls: the last
	// cluster out puts them back, and the record that says so is still there.
	if others, _ := filepath.Glob("/run/redis-operator-nodes/*"); len(others) > 0 {
		t.Logf("a cluster runs beside (%v): the last one out puts the sysctl back", others)
		return
	}
	assert.Equal(t, before.Sysctls["kernel/keys/root_maxkeys"], strings.TrimSpace(string(now)), "the sysctl the killed cluster changed is put back")
}

// TestHelperAClusterKilled is the cluster TestAClusterBesideIsLeftOutAndWhatAKilledOneLeftIsRemoved
// kills: it runs only as that test's child.
func TestHelperAClusterKilled(t *testing.T) {
	dir, name := os.Getenv("HELPER_CLUSTER_DIR"), os.Getenv("HELPER_CLUSTER_NAME")
	if dir == "" {
		t.Skip("the child process of TestAClusterBesideIsLeftOutAndWhatAKilledOneLeftIsRemoved")
	}
	nw, err := node.CreateNetwork(name)
	require.NoError(t, err)
	require.NoError(t, nw.Holds(dir))
	_, err = node.CreateNetns(name + "-1")
	require.NoError(t, err)
	mount := filepath.Join(dir, "volume")
	require.NoError(t, os.MkdirAll(mount, 0o755))
	require.NoError(t, unix.Mount("tmpfs", mount, "tmpfs", 0, ""))
	b, err := os.ReadFile(maxKeys)
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(maxKeys, []byte(strconv.Itoa(n+1)), 0o644))
	os.Stdout.WriteString("cluster up\n")
	time.Sleep(2 * time.Minute)
}
