package localcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/testenv"
)

// The README's first story on real containers: the operator runs as its CSV's Deployment from
// its image, the sample becomes Ready with Redis's image, and a user reaches Redis with kubectl
// exec, through the real kubelet. Then the cluster stops and leaves no process, namespace or
// mount behind.
func TestTheSampleBecomesReadyOnTheRealNode(t *testing.T) {
	require.NoError(t, node.Required())
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	netnsBefore, err := filepath.Glob("/run/netns/*")
	require.NoError(t, err)

	c, err := localcluster.StartOnRealNode(ctx, root, dir)
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop()
		}
	})

	require.NoError(t, c.Kubectl("apply", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml")))
	if err := c.Kubectl("wait", "--for=condition=Ready", "rediscluster/sessions", "--timeout=180s"); err != nil {
		out, _ := c.KubectlOutput("get", "pods,rediscluster", "-A", "-o", "wide")
		logs, _ := c.KubectlOutput("-n", localcluster.OperatorNamespace, "logs", "deployment/redis-operator-controller-manager", "--tail=30")
		t.Fatalf("%v\n%s\n%s", err, out, logs)
	}
	secret := &corev1.Secret{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "sessions-auth"}, secret))
	primary, err := c.KubectlOutput("get", "rediscluster", "sessions", "-o", "jsonpath={.status.primary}")
	require.NoError(t, err, primary)
	out, err := c.KubectlOutput("exec", primary, "-c", "redis", "--", "env", "REDISCLI_AUTH="+string(secret.Data["password"]),
		"redis-cli", "info", "replication")
	require.NoError(t, err, out)
	assert.Contains(t, out, "role:master", "status.primary is the primary")
	assert.Contains(t, out, "connected_slaves:2", "with its two replicas")

	c.Stop()
	stopped = true
	netnsAfter, err := filepath.Glob("/run/netns/*")
	require.NoError(t, err)
	assert.Equal(t, netnsBefore, netnsAfter)
	assert.Empty(t, processesMentioning(t, dir))
}

// processesMentioning are the processes whose command line names dir.
func processesMentioning(t *testing.T, dir string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var found []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}
