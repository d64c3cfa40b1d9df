package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/org/redis-operator/test/procfs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAPanickingTestLeavesNoControlPlaneRunning runs this test binary again as a child that
// starts kube-apiserver and etcd (Start), prints their process IDs and panics, so that its
// env.Stop never runs; the control plane must be gone after it.
func TestAPanickingTestLeavesNoControlPlaneRunning(t *testing.T) {
	if os.Getenv("TESTENV_PANIC_CHILD") == "1" {
		env, _, err := Start()
		require.NoError(t, err)
		for _, pid := range procfs.Children(os.Getpid()) {
			os.Stdout.WriteString("child-pid " + strconv.Itoa(pid) + "\n")
		}
		for _, dir := range []string{env.dir, env.WebhookInstallOptions.LocalServingCertDir} {
			os.Stdout.WriteString("child-dir " + dir + "\n")
		}
		panic("a test that panics with the control plane running")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed: the control plane outlives a panicking test")
	}

	cmd := exec.Command(os.Args[0], "-test.run", "^TestAPanickingTestLeavesNoControlPlaneRunning$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTENV_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the child panics")
	require.Contains(t, string(out), "a test that panics with the control plane running")
	var pids []int
	var dirs []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "child-pid "); ok {
			pid, err := strconv.Atoi(rest)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
		if dir, ok := strings.CutPrefix(sc.Text(), "child-dir "); ok && strings.HasPrefix(dir, os.TempDir()+"/") {
			dirs = append(dirs, dir)
		}
	}
	require.Len(t, pids, 2, "the child ran kube-apiserver and etcd:\n%s", out)
	require.Len(t, dirs, 2, "the child's directories (its processes', envtest's serving certificates):\n%s", out)
	// Whatever the outcome, nothing of the child's stays: its processes (had they outlived it)
	// and envtest's directories (certificates, etcd's data), which a panic leaves behind
	t.Cleanup(func() {
		for _, pid := range pids {
			if procfs.Alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, dir := range dirs {
			_ = os.RemoveAll(dir)
		}
	})

	// Then each is gone: killed by the kernel when its parent died
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, pid := range pids {
			assert.False(c, procfs.Alive(pid), "process %d outlived the test that started it", pid)
		}
	}, 10*time.Second, 50*time.Millisecond)
}
