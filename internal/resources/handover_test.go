package resources_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// The preStop hook runs as the kubelet runs it (/bin/sh -c, Debian's redis-cli) against real
// redis-server processes configured as the pod's (redis.conf, the auth-conf Secret's files, the
// TLS Secret's). The pod's fixed paths and address are the one thing rewritten: the files lie
// under the test's directory and each server listens on a loopback address of its own.
func TestThePreStopHookHoldsAPrimaryUntilItIsAReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  *cachev1.TLSSpec
	}{
		{"plain", nil},
		{"TLS with client certificates", &cachev1.TLSSpec{SecretName: "tls", ClientAuth: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &cachev1.RedisCluster{Spec: cachev1.RedisClusterSpec{Replicas: 2, TLS: tc.tls}}
			var ca *testenv.CA
			if tc.tls != nil {
				var err error
				ca, err = testenv.NewCA("hook-ca")
				require.NoError(t, err)
			}
			n := startPod(t, rc, "node-0", ca)
			r := startPod(t, rc, "node-1", ca)
			ctx := context.Background()
			// Both start fenced, as the pod's do: the operator's first steps.
			require.NoError(t, n.client.SlaveOf(ctx, "no", "one").Err())
			require.NoError(t, r.client.SlaveOf(ctx, n.server.IP, "6379").Err())
			require.Eventually(t, func() bool { return strings.Contains(n.replication(t), "connected_slaves:1") }, 10*time.Second, 50*time.Millisecond)

			took, err := r.runHook(t, 5*time.Second)
			require.NoError(t, err)
			assert.Less(t, took, time.Second, "a replica's hook returns at once")

			held := n.startHook(t)
			time.Sleep(time.Second)
			assert.False(t, held.exited(), "a primary with a replica is held")
			// The operator's switchover: the replica promoted, the old primary repointed.
			require.NoError(t, r.client.SlaveOf(ctx, "no", "one").Err())
			demoted := time.Now()
			require.NoError(t, n.client.SlaveOf(ctx, r.server.IP, "6379").Err())
			require.NoError(t, held.wait(5*time.Second))
			t.Logf("the hook returned %s after the demotion", time.Since(demoted).Round(time.Millisecond))
			assert.Less(t, time.Since(demoted), time.Second)

			// The new primary's replica goes: a primary without replicas has nobody to hand over to.
			n.server.Kill()
			require.Eventually(t, func() bool { return strings.Contains(r.replication(t), "connected_slaves:0") }, 10*time.Second, 50*time.Millisecond)
			took, err = r.runHook(t, 5*time.Second)
			require.NoError(t, err)
			assert.Less(t, took, time.Second, "a lone primary's hook returns at once")

			// A Redis that does not answer holds nothing.
			took, err = n.runHook(t, 5*time.Second)
			require.NoError(t, err)
			assert.Less(t, took, time.Second, "the hook of a node that does not answer returns at once")
		})
	}
}

// Nobody hands the role over (the operator is down): the hook gives up after resources.HandoverWait, so
// that Redis still gets its SIGTERM within the pod's grace period (shortened here to 2 s).
func TestThePreStopHookGivesUpAfterItsWait(t *testing.T) {
	rc := &cachev1.RedisCluster{Spec: cachev1.RedisClusterSpec{Replicas: 2}}
	n := startPod(t, rc, "node-0", nil)
	r := startPod(t, rc, "node-1", nil)
	require.NoError(t, n.client.SlaveOf(context.Background(), "no", "one").Err())
	require.NoError(t, r.client.SlaveOf(context.Background(), n.server.IP, "6379").Err())
	require.Eventually(t, func() bool { return strings.Contains(n.replication(t), "connected_slaves:1") }, 10*time.Second, 50*time.Millisecond)
	assert.Less(t, int(resources.HandoverWait/time.Second)+10, resources.TerminationGracePeriod, "the wait and Redis's shutdown-timeout fit in the grace period")
	n.script = strings.Replace(n.script, "+ 15 ))", "+ 2 ))", 1)
	took, err := n.runHook(t, 10*time.Second)
	require.NoError(t, err)
	assert.InDelta(t, 2, took.Seconds(), 1.1, "held for the wait, then let go")
}

// hookedPod is a redis-server set up as a pod's, with its preStop script.
type hookedPod struct {
	server *redistest.Server
	client *goredis.Client
	script string
}

// startPod starts a redis-server with rc's redis.conf and the files its pod mounts, under a
// directory of the test's; with spec.tls, its certificate is ca's.
func startPod(t *testing.T, rc *cachev1.RedisCluster, name string, ca *testenv.CA) *hookedPod {
	t.Helper()
	dir := t.TempDir()
	auth, tlsFiles := filepath.Join(dir, "auth"), filepath.Join(dir, "tls")
	require.NoError(t, os.MkdirAll(auth, 0o700))
	const password = "hook-password"
	require.NoError(t, os.WriteFile(filepath.Join(auth, resources.AuthConfKey), []byte(resources.AuthConf(password)), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(auth, resources.PasswordKey), []byte(password), 0o600))
	opts := &goredis.Options{Password: password}
	if rc.Spec.TLS != nil {
		require.NoError(t, os.MkdirAll(tlsFiles, 0o700))
		kp, err := ca.Issue("localhost")
		require.NoError(t, err)
		for key, data := range map[string][]byte{resources.TLSCertKey: kp.CertPEM, resources.TLSKeyKey: kp.KeyPEM, resources.TLSCAKey: ca.PEM} {
			require.NoError(t, os.WriteFile(filepath.Join(tlsFiles, key), data, 0o600))
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		opts.TLSConfig = &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{kp.TLSCertificate()}, MinVersion: tls.VersionTLS12}
	}
	paths := strings.NewReplacer(resources.AuthDir, auth, resources.TLSDir, tlsFiles)
	s, err := redistest.StartIn(filepath.Join(dir, "data"), name, paths.Replace(resources.RedisConf(rc)))
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	opts.Addr = s.Addr()
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	script := strings.Replace(paths.Replace(resources.HandoverScript(rc)), "-p 6379", "-h "+s.IP+" -p 6379", 1)
	return &hookedPod{server: s, client: c, script: script}
}

func (p *hookedPod) replication(t *testing.T) string {
	info, err := p.client.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Logf("%s: %v", p.server.Name, err)
	}
	return info
}

// runningHook is the hook as the kubelet runs it, in the background.
type runningHook struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *hookedPod) startHook(t *testing.T) *runningHook {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", p.script)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	h := &runningHook{cmd: cmd, done: make(chan struct{})}
	go func() { h.err = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		if !h.exited() {
			_ = cmd.Process.Kill()
			<-h.done
		}
	})
	return h
}

func (h *runningHook) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

func (h *runningHook) wait(within time.Duration) error {
	select {
	case <-h.done:
		return h.err
	case <-time.After(within):
		return context.DeadlineExceeded
	}
}

// runHook runs the hook to its end and says how long it took.
func (p *hookedPod) runHook(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	err := p.startHook(t).wait(within)
	return time.Since(start), err
}
