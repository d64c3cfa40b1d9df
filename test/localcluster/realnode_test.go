//go:build node

package localcluster_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/testenv"
)

// The README's first story, as a user runs it: make demo starts the cluster on the real node
// (the operator as its CSV's Deployment from its image, the sample Ready with Redis's image);
// with the KUBECONFIG it prints, kubectl exec runs redis-cli in the primary and kubectl
// port-forward reaches the primary Service from this machine, both through the real kubelet;
// Ctrl-C, sent to the terminal's whole process group, ends it and leaves the machine as it was.
func TestTheDemoRunsOnTheRealNodeAndCtrlCLeavesNothingBehind(t *testing.T) {
	require.NoError(t, node.Required())
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	before := node.Snapshot()

	demo := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", demo, "./test/localcluster/cmd/localcluster")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(demo)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	var printed strings.Builder
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			printed.WriteString(s.Text() + "\n")
			if m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(s.Text()); m != nil {
				ready <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	var kubeconfig string
	select {
	case kubeconfig = <-ready:
	case err := <-exited:
		t.Fatalf("the demo ended: %v\n%s", err, printed.String())
	case <-time.After(5 * time.Minute):
		t.Fatalf("the demo was not ready within 5 minutes:\n%s", printed.String())
	}
	assert.Contains(t, printed.String(), `GET greeting on `)
	assert.Contains(t, printed.String(), `(sessions-replicas): "hello from the primary"`)

	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	password, err := kubectl("get", "secret", "sessions-auth", "-o", "jsonpath={.data.password}")
	require.NoError(t, err, password)
	password = decodeBase64(t, password)
	primary, err := kubectl("get", "rediscluster", "sessions", "-o", "jsonpath={.status.primary}")
	require.NoError(t, err, primary)
	out2, err := kubectl("exec", primary, "-c", "redis", "--", "env", "REDISCLI_AUTH="+password, "redis-cli", "info", "replication")
	require.NoError(t, err, out2)
	assert.Contains(t, out2, "role:master", "status.primary is the primary")
	assert.Contains(t, out2, "connected_slaves:2", "with its two replicas")

	port := freePort(t)
	forward := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "port-forward", "svc/sessions", fmt.Sprintf("%d:6379", port))
	fstdout, err := forward.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, forward.Start())
	t.Cleanup(func() { _ = forward.Process.Kill(); _ = forward.Wait() })
	line, err := bufio.NewReader(fstdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "Forwarding from 127.0.0.1")
	rdb := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: password})
	defer rdb.Close()
	assert.Equal(t, "hello from the primary", rdb.Get(ctx, "greeting").Val(), "through kubectl port-forward")
	require.NoError(t, forward.Process.Kill())

	// Ctrl-C.
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, printed.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo did not end within 2 minutes of Ctrl-C:\n%s", printed.String())
	}
	assert.Equal(t, before, node.Snapshot(), "the machine after Ctrl-C")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func decodeBase64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return string(b)
}
