//go:build e2e

// Package e2e runs the whole story on the local cluster on its real nodes
// (localcluster.StartOnRealNodes: three, each in a zone of its own): a real control plane,
// kubelets running containers from the images of the operator and of Redis, and the operator as
// the CSV's Deployment with the bundle's RBAC. Users' steps go through kubectl; clients connect
// where a user's would, to the Services' ClusterIPs (kube-proxy) from the control plane's
// network, or through kubectl. `make test-e2e` (root).
package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/s3server"
	"github.com/org/redis-operator/test/testenv"
)

const (
	ns      = "default"
	waitFor = 90 * time.Second
	tick    = 200 * time.Millisecond
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	// The suite's own clients are controller-runtime's; what they log goes to the test's output.
	log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	suite := localcluster.Suite{
		Name: "e2e",
		Start: func(ctx context.Context, root, dir string) (*localcluster.Cluster, error) {
			var c *localcluster.Cluster
			var err error
			if kubeconfig := os.Getenv("E2E_KUBECONFIG"); kubeconfig != "" {
				c, err = localcluster.Attach(ctx, root, kubeconfig, os.Getenv("IMG"))
			} else {
				c, err = localcluster.StartOnRealNodes(ctx, root, dir, e2eNodes)
			}
			if err == nil {
				// Users' namespaces enforce the restricted Pod Security Standard: the Redis pods
				// must be admitted there.
				err = c.Kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
			}
			return c, err
		},
		Diagnose: func(c *localcluster.Cluster, _ string) {
			for _, previous := range []string{"--previous", ""} {
				out, _ := c.KubectlOutput("logs", "-n", localcluster.OperatorNamespace, "deployment/redis-operator-controller-manager", previous, "--tail=100")
				fmt.Fprintf(os.Stderr, "--- operator log %s\n%s\n", previous, out)
			}
			out, _ := c.KubectlOutput("get", "pods", "-A", "-o", "wide")
			fmt.Fprintf(os.Stderr, "--- pods\n%s\n", out)
		},
	}
	os.Exit(suite.Run(m, root, func(c *localcluster.Cluster) { cluster = c }))
}

// besideOtherStories runs the test side by side with the other stories that call it, once every
// test that does not has ended (go test runs a package's parallel tests last). A story may call it
// only if it keeps to RedisClusters, Secrets and Services of names of its own in ns, and stops
// nothing the others share: not the API server, etcd, a node, the operator or kube-proxy.
// TestRedisClusterLifecycle stops the API server and etcd, and the failures (make
// test-e2e-failures) take nodes and networks away, so they run alone. Most of a story's time is
// spent waiting on the cluster (make test-e2e kept the machine 60% busy with one story at a
// time, 2026-12-07); the Makefile says how many run at once.
func besideOtherStories(t *testing.T) {
	t.Parallel()
}

func redisCluster(c require.TestingT) *cachev1.RedisCluster {
	rc := &cachev1.RedisCluster{}
	require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sessions"}, rc))
	return rc
}

// whileProgressing waits, as require.EventuallyWithT does, for a change made of steps that
// happen one after another (a rolling upgrade's pods): done says how many of how many steps are
// done, and why not all yet. It fails when no step was done for stall, not after a total time,
// which the machine's load would decide (stories run side by side).
// On a stall it prints the RedisCluster name's Events and pods.
func whileProgressing(t *testing.T, stall time.Duration, name, what string, done func() (steps, of int, why string)) {
	t.Helper()
	best, since := -1, time.Now()
	for {
		steps, of, why := done()
		if steps == of {
			return
		}
		if steps > best {
			best, since = steps, time.Now()
		}
		if time.Since(since) > stall {
			// What the operator said and what its pods are: a stall is read from them.
			events, _ := cluster.KubectlOutput("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+name,
				"--sort-by=.lastTimestamp", "-o", "custom-columns=TIME:.lastTimestamp,COUNT:.count,REASON:.reason,MESSAGE:.message")
			pods, _ := cluster.KubectlOutput("get", "pods", "-n", ns, "-l", resources.LabelInstance+"="+name, "-o", "wide")
			t.Fatalf("%s: %d of %d steps, none more in %s: %s\n%s's Events:\n%s\nits pods:\n%s", what, steps, of, stall, why, name, events, pods)
		}
		time.Sleep(tick)
	}
}

// eventuallyRolledOut waits until the StatefulSet name runs image in every one of its replicas
// pods: its template has it, and a status of that template (a status of the template before would
// count the old pods as updated) has every pod at the update revision.
func eventuallyRolledOut(t *testing.T, name, image string, replicas int32) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		sts := &appsv1.StatefulSet{}
		require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sts))
		assert.Equal(c, image, sts.Spec.Template.Spec.Containers[0].Image)
		assert.Equal(c, sts.Generation, sts.Status.ObservedGeneration)
		assert.Equal(c, sts.Status.UpdateRevision, sts.Status.CurrentRevision)
		assert.Equal(c, replicas, sts.Status.UpdatedReplicas)
	}, 3*time.Minute, tick)
}

func eventuallyReady(t *testing.T, replicas int) *cachev1.RedisCluster {
	t.Helper()
	var rc *cachev1.RedisCluster
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rc = redisCluster(c)
		assert.True(c, testenv.Ready(rc), "Ready for generation %d: %+v", rc.Generation, rc.Status.Conditions)
		assert.True(c, meta.IsStatusConditionFalse(rc.Status.Conditions, cachev1.ConditionProgressing), "Progressing")
		assert.Len(c, rc.Status.Nodes, replicas)
	}, waitFor, tick)
	return rc
}

// serviceClient connects to the Service's ClusterIP from the node, once it has want ready
// endpoints, with the password an option gives (withPassword), else sessions-auth's.
func serviceClient(t require.TestingT, service string, want int, opts ...func(*goredis.Options)) *goredis.Client {
	_, err := cluster.WaitServiceEndpoints(context.Background(), ns, service, want)
	require.NoError(t, err)
	addr, err := cluster.ServiceAddress(context.Background(), ns, service)
	require.NoError(t, err)
	// kube-proxy routes the ClusterIP once it has seen the endpoints (its next sync, within a
	// second); until then it refuses connections, as a client would see too.
	require.Eventually(t, func() bool {
		conn, err := cluster.Dial(context.Background(), "tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "kube-proxy routes %s's ClusterIP", service)
	o := &goredis.Options{Addr: addr, MaxRetries: -1, Dialer: cluster.Dial,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second}
	for _, f := range opts {
		f(o)
	}
	if o.Password == "" {
		pw, err := cluster.SecretValue(context.Background(), ns, "sessions-auth", "password")
		require.NoError(t, err)
		o.Password = pw
	}
	if cfg := o.TLSConfig; cfg != nil {
		// go-redis adds TLS only to its own dialer.
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := cluster.Dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	return goredis.NewClient(o)
}

// applyJSON applies one object given as JSON with kubectl, as a user would.
func applyJSON(t *testing.T, name, doc string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".json")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	cluster.MustKubectl(t, "apply", "-n", ns, "-f", path)
}

// withPassword is a client option: the password in key "password" of Secret name.
func withPassword(t require.TestingT, name string) func(*goredis.Options) {
	pw, err := cluster.SecretValue(context.Background(), ns, name, "password")
	require.NoError(t, err)
	return func(o *goredis.Options) { o.Password = pw }
}

// killRedis kills the pod's redis-server, as a crash would: on the local node from the
// machine (SIGKILL to its container, which the kubelet restarts); on another cluster, where the
// test cannot reach the node, by deleting the pod at once, as a user would.
func killRedis(t require.TestingT, pod string) {
	if !cluster.Local() {
		out, err := cluster.KubectlOutput("delete", "pod", "-n", ns, pod, "--grace-period=0", "--force")
		require.NoError(t, err, out)
		return
	}
	id, err := cluster.ContainerID(context.Background(), ns, pod, "redis")
	require.NoError(t, err)
	require.NoError(t, cluster.KillContainer(context.Background(), id))
}

// needsLocalNode skips a step that reaches into the local cluster's processes or machine.
func needsLocalNode(t *testing.T, what string) {
	if !cluster.Local() {
		t.Skipf("needs the local cluster: %s", what)
	}
}

func primaryPod(c require.TestingT) string {
	_, err := cluster.WaitServiceEndpoints(context.Background(), ns, "sessions", 1)
	require.NoError(c, err)
	pod, err := cluster.PodBehind(context.Background(), ns, "sessions")
	require.NoError(c, err)
	return pod
}

// The whole story, in order: each step builds on the one before.
func TestRedisClusterLifecycle(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)

	t.Run("the sample becomes Ready and replicates", func(t *testing.T) {
		cluster.MustKubectl(t, "apply", "-n", ns, "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
		cluster.MustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "rediscluster/sessions", "--timeout=120s")
		eventuallyReady(t, 3)

		w := serviceClient(t, "sessions", 1)
		defer w.Close()
		require.NoError(t, w.Set(context.Background(), "greeting", "hello", 0).Err())
		r := serviceClient(t, "sessions-replicas", 2)
		defer r.Close()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			v, err := r.Get(context.Background(), "greeting").Result()
			assert.NoError(c, err)
			assert.Equal(c, "hello", v)
		}, 10*time.Second, tick)

		// The namespace enforces the restricted Pod Security Standard (so the Redis pods passed it)
		out, err := cluster.KubectlOutput("run", "unrestricted-probe", "-n", ns, "--image=busybox", "--dry-run=server")
		require.Error(t, err)
		assert.Contains(t, out, "violates PodSecurity")

		// A pod's log, through the API server and the node's kubelet endpoint
		assert.Contains(t, cluster.MustKubectl(t, "logs", "-n", ns, "sessions-0", "--tail=200"), "Ready to accept connections")

		// An application in the namespace finds the primary by its Service's short name, and
		// each pod by its stable name under the headless Service (the cluster's DNS, through
		// the resolv.conf the kubelet gave the pod); a name that does not exist does not resolve
		svc := &corev1.Service{}
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sessions"}, svc))
		assert.Equal(t, svc.Spec.ClusterIP, strings.Fields(cluster.MustKubectl(t, "exec", "-n", ns, "sessions-0", "-c", "redis", "--", "getent", "hosts", "sessions"))[0])
		pod := &corev1.Pod{}
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sessions-1"}, pod))
		assert.Equal(t, pod.Status.PodIP, strings.Fields(cluster.MustKubectl(t, "exec", "-n", ns, "sessions-0", "-c", "redis", "--",
			"getent", "hosts", "sessions-1.sessions-headless."+ns+".svc.cluster.local"))[0])
		_, err = cluster.KubectlOutput("exec", "-n", ns, "sessions-0", "-c", "redis", "--", "getent", "hosts", "no-such-service")
		assert.Error(t, err, "a Service that does not exist does not resolve")
	})

	t.Run("scaling to 5 gives one primary and four replicas", func(t *testing.T) {
		cluster.MustKubectl(t, "patch", "-n", ns, "rediscluster/sessions", "--type=merge", "-p", `{"spec":{"replicas":5}}`)
		rc := eventuallyReady(t, 5)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "sessions"}, sts))
		assert.Equal(t, int32(5), *sts.Spec.Replicas)
		assert.Equal(t, int32(5), sts.Status.ReadyReplicas)
		replicas := 0
		for _, n := range rc.Status.Nodes {
			if n.Role == cachev1.RoleReplica && n.State == cachev1.NodeServing {
				replicas++
			}
		}
		assert.Equal(t, 4, replicas)
		_, err := cluster.WaitServiceEndpoints(context.Background(), ns, "sessions-replicas", 4)
		require.NoError(t, err)
	})

	t.Run("killing the primary's Redis fails over and writes continue through the Service with none a replica acknowledged lost", primaryKilledWhileWriting)

	t.Run("the operator's ServiceAccount may do what it needs and no more", func(t *testing.T) {
		as := "--as=system:serviceaccount:" + localcluster.OperatorNamespace + ":" + cluster.ServiceAccount
		for _, verb := range []string{"patch", "create", "get", "list", "watch"} {
			assert.Equal(t, "yes", strings.TrimSpace(cluster.MustKubectl(t, "auth", "can-i", verb, "statefulsets", as)), verb)
		}
		// Server-side apply patches; the operator never sends a whole object back with update.
		out, _ := cluster.KubectlOutput("auth", "can-i", "update", "statefulsets", as)
		assert.Equal(t, "no", strings.TrimSpace(out))
		out, _ = cluster.KubectlOutput("auth", "can-i", "list", "secrets", as)
		assert.Equal(t, "no", strings.TrimSpace(out), "the operator never lists Secrets")
	})

	t.Run("a version change replaces replicas first, then switches over", func(t *testing.T) {
		cluster.MustKubectl(t, "patch", "-n", ns, "rediscluster/sessions", "--type=merge", "-p", `{"spec":{"version":"7.0"}}`)
		eventuallyRolledOut(t, "sessions", "redis:7.0", 5)
		eventuallyReady(t, 5)
		out := cluster.MustKubectl(t, "get", "events", "-n", ns, "--field-selector", "involvedObject.name=sessions", "--sort-by=.metadata.creationTimestamp", "-o", "json")
		var events struct {
			Items []corev1.Event `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &events))
		var order, notes []string
		for _, e := range events.Items {
			if e.Reason == cachev1.EventReplacingPod || e.Reason == cachev1.EventSwitchedOver {
				order = append(order, e.Reason)
				notes = append(notes, e.Message)
			}
		}
		require.GreaterOrEqual(t, len(order), 6, "%v", order)
		switched := -1
		for i, r := range order {
			if r == cachev1.EventSwitchedOver {
				switched = i
				break
			}
		}
		assert.Equal(t, 4, switched, "four replicas replaced before the switchover: %v", notes)
		assert.Len(t, order, 6, "five pods replaced, one switchover: %v", notes)
	})

	t.Run("killing the operator during a failover converges to one primary", operatorKilledMidFailover)

	t.Run("the operator recovers from a kube-apiserver restart by itself", func(t *testing.T) {
		if cluster.Local() {
			require.NoError(t, cluster.RestartAPIServer(context.Background()))
		}
		cluster.MustKubectl(t, "patch", "-n", ns, "rediscluster/sessions", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
		eventuallyReady(t, 3)
		r := serviceClient(t, "sessions", 1)
		defer r.Close()
		v, err := r.Get(context.Background(), "greeting").Result()
		require.NoError(t, err)
		assert.Equal(t, "hello", v, "data survived failovers, upgrade and scale-in")
	})

	t.Run("with etcd stopped for 30s a killed primary is replaced, and status and labels catch up", primaryDiesWhileEtcdIsStopped)

	t.Run("a directive Redis refuses is reported and a fixed spec recovers", func(t *testing.T) {
		write := func(config string) string {
			spec := `{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"typo"},` +
				`"spec":{"replicas":2,"config":` + config + `}}`
			path := filepath.Join(t.TempDir(), "typo.json")
			require.NoError(t, os.WriteFile(path, []byte(spec), 0o600))
			return path
		}
		// A value outside the directive's grammar, or one Redis refuses, is refused by the API
		// server, naming it
		out, err := cluster.KubectlOutput("apply", "-n", ns, "-f", write(`{"maxmemory-policy":"sometimes"}`))
		require.Error(t, err)
		assert.Contains(t, out, "spec.config.maxmemory-policy is one of")
		out, err = cluster.KubectlOutput("apply", "-n", ns, "-f", write(`{"proto-max-bulk-len":"1kb"}`))
		require.Error(t, err)
		assert.Contains(t, out, "spec.config.proto-max-bulk-len is a size in bytes from 1048576")
		// What the API cannot know: the image is older than spec.version says. The default
		// version is 7.2, whose set-max-listpack-entries the API takes; the image built here
		// runs redis-server 7.0.15 whatever its tag, which does not know the directive.
		cluster.MustKubectl(t, "apply", "-n", ns, "-f", write(`{"set-max-listpack-entries":"64"}`))

		// Then the RedisCluster says what Redis said, and the pods wait out the kubelet's back-off
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rc := &cachev1.RedisCluster{}
			require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "typo"}, rc))
			degraded := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDegraded)
			require.NotNil(c, degraded)
			assert.Equal(c, cachev1.ReasonRedisFailedToStart, degraded.Reason)
			assert.Contains(c, degraded.Message, "set-max-listpack-entries")
			assert.True(c, meta.IsStatusConditionFalse(rc.Status.Conditions, cachev1.ConditionReady))
		}, waitFor, tick)
		assert.Contains(t, cluster.MustKubectl(t, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance=typo"), "CrashLoopBackOff")
		assert.Contains(t, cluster.MustKubectl(t, "describe", "rediscluster", "-n", ns, "typo"), cachev1.EventRedisFailedToStart)

		// When the user fixes the spec, the failing pods are replaced and it becomes Ready
		cluster.MustKubectl(t, "patch", "-n", ns, "rediscluster/typo", "--type=merge", "-p", `{"spec":{"config":{"set-max-listpack-entries":null}}}`)
		cluster.MustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "rediscluster/typo", "--timeout=90s")
		cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/typo", "--wait")
	})

	t.Run("docs/tls.md's example, run as written, gives a cluster that serves TLS only", func(t *testing.T) {
		dir := t.TempDir()
		cluster.RunDocsExample(t, "tls-example", dir, "NS="+ns)

		// A client trusting the example's CA and checking the primary Service's name writes
		// through it; plaintext is refused
		caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
		require.NoError(t, err)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(caPEM))
		secure := serviceClient(t, "cache", 1, withPassword(t, "cache-auth"), func(o *goredis.Options) {
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: "cache." + ns + ".svc"}
		})
		defer secure.Close()
		require.NoError(t, secure.Set(context.Background(), "over", "tls", 0).Err())
		plain := serviceClient(t, "cache", 1, withPassword(t, "cache-auth"))
		defer plain.Close()
		assert.Error(t, plain.Ping(context.Background()).Err(), "plaintext is refused")

		cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/cache", "--wait")
	})

	t.Run("docs/users-and-passwords.md's example, run as written, gives an application user its rights only", func(t *testing.T) {
		cluster.RunDocsExample(t, "users-example", t.TempDir(), "NS="+ns)

		app := serviceClient(t, "sessions", 1, withPassword(t, "app-password"), func(o *goredis.Options) { o.Username = "app" })
		defer app.Close()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, app.Set(context.Background(), "app:greeting", "hello", 0).Err())
		}, waitFor, tick)
		assert.ErrorContains(t, app.Set(context.Background(), "other:greeting", "hello", 0).Err(), "NOPERM")
	})

	t.Run("with storage every pod deleted at once comes back with every acknowledged write from the volumes the kubelet mounted", everyPodDeletedWithStorage)

	t.Run("docs/backups.md's example as written backs sessions up to S3 and restores it into a new cluster", func(t *testing.T) {
		needsLocalNode(t, "the S3 server runs on this machine")
		// Given a key in sessions and an S3 server (the Versity S3 Gateway) with a bucket
		w := serviceClient(t, "sessions", 1)
		defer w.Close()
		require.NoError(t, w.Set(context.Background(), "backed-up", "yes", 0).Err())
		require.Equal(t, int64(2), w.Do(context.Background(), "WAIT", 2, 5000).Val())
		store := s3server.Start(t)
		store.CreateBucket(t, "redis-backups")
		// The operator's pod and the restore's init container reach it at the node's address.
		endpoint, err := cluster.ReachableFromPods(strings.TrimPrefix(store.Endpoint, "http://"))
		require.NoError(t, err)

		out := cluster.RunDocsExample(t, "backup-example", t.TempDir(), fmt.Sprintf("NS=%s S3_ENDPOINT=http://%s BUCKET=redis-backups AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s",
			ns, endpoint, s3server.AccessKeyID, s3server.SecretAccessKey))
		assert.Contains(t, out, "Restored from RedisBackup sessions-now")

		// Then the restored cluster's primary Service serves the key
		r := serviceClient(t, "sessions-restored", 1, withPassword(t, "sessions-restored-auth"))
		defer r.Close()
		v, err := r.Get(context.Background(), "backed-up").Result()
		require.NoError(t, err)
		assert.Equal(t, "yes", v)
		cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/sessions-restored", "redisbackup/sessions-now", "--wait")
	})

	t.Run("docs/cluster-mode.md's example, run as written, forms 3 shards that a cluster client writes through, which grow to 4 and back with the keys", func(t *testing.T) {
		clusterExampleServesAClusterClient(t, root, ns)
	})

	t.Run("docs/metrics-and-alerts.md's metrics example, run as written, scrapes the operator as a bound ServiceAccount", func(t *testing.T) {
		out := cluster.RunDocsExample(t, "metrics-example", root, "OPERATOR_NS="+localcluster.OperatorNamespace)
		assert.Contains(t, out, `redis_operator_node_up{namespace="default",pod="sessions-0",rediscluster="sessions"} 1`)
	})

	t.Run("docs/metrics-and-alerts.md's alerts example, run as written, applies the ServiceMonitor and PrometheusRule", func(t *testing.T) {
		out := cluster.RunDocsExample(t, "alerts-example", root, "make prometheus-crds")
		assert.Contains(t, out, "servicemonitor.monitoring.coreos.com/redis-operator-controller-manager-metrics-monitor")
		assert.Contains(t, out, "prometheusrule.monitoring.coreos.com/redis-operator-rules")
	})

	t.Run("deleting the RedisCluster garbage-collects everything", func(t *testing.T) {
		cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/sessions", "--wait=true")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, kind := range []string{"statefulsets", "services", "configmaps", "pods", "poddisruptionbudgets"} {
				out, err := cluster.KubectlOutput("get", kind, "-n", ns, "-l", "app.kubernetes.io/instance=sessions", "-o", "name")
				assert.NoError(c, err)
				assert.Empty(c, strings.TrimSpace(out), kind)
			}
		}, waitFor, tick)
	})
}

// writeThroughService writes through the primary Service's ClusterIP, a new connection each
// time (kube-proxy picks the endpoint when a connection opens), until stopped, and keeps the
// keys a replica acknowledged (WAIT 1).
func writeThroughService() *redistest.Writer {
	pw, _ := cluster.SecretValue(context.Background(), ns, "sessions-auth", "password")
	var addr string
	return redistest.StartWriter(redistest.WriterOptions{
		Client: func(ctx context.Context) (goredis.UniversalClient, error) {
			if addr == "" {
				a, err := cluster.ServiceAddress(ctx, ns, "sessions")
				if err != nil {
					return nil, err
				}
				addr = a
			}
			return goredis.NewClient(&goredis.Options{Addr: addr, Password: pw, MaxRetries: -1, Dialer: cluster.Dial,
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}), nil
		},
		CloseEach: true, Wait: 200 * time.Millisecond, Prefix: "w",
	})
}

// primaryKilledWhileWriting: a client writes through the primary Service while the primary's Redis
// is killed; writes resume on the new primary, and none a replica acknowledged is lost.
func primaryKilledWhileWriting(t *testing.T) {
	old := primaryPod(t)
	w := writeThroughService()
	defer w.Stop()
	require.Eventually(t, func() bool { return w.Acked() > 50 }, 20*time.Second, tick)

	killRedis(t, old)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, old, primaryPod(c))
	}, waitFor, tick)
	before := w.Acked()
	require.Eventually(t, func() bool { return w.Acked() > before+20 }, 30*time.Second, tick, "writes resume")
	w.Stop()
	keys, _, failed := w.Result()
	rc := eventuallyReady(t, 5)
	assert.Equal(t, primaryPod(t), rc.Status.Primary, "the Service points at the recorded primary")
	r := serviceClient(t, "sessions", 1)
	defer r.Close()
	lost := redistest.Missing(context.Background(), r, keys)
	assert.Empty(t, lost, "writes a replica acknowledged (WAIT 1), then lost")
	t.Logf("writes acknowledged by a replica: %d, lost: %d, failed while failing over: %d", len(keys), len(lost), len(failed))
}

// operatorKilledMidFailover: the operator's container is killed just after the primary's Redis;
// restarted by the kubelet, it leads again at once and the cluster converges to one primary.
func operatorKilledMidFailover(t *testing.T) {
	needsLocalNode(t, "the operator's container is killed from the machine")
	old := primaryPod(t)
	restarts, err := cluster.OperatorRestarts(context.Background())
	require.NoError(t, err)
	killRedis(t, old)
	time.Sleep(300 * time.Millisecond)
	// The operator's container is killed; the kubelet restarts it in the same pod, where it
	// finds the lease its own (held under the pod's name) and leads again at once, instead of
	// waiting out its dead self's lease (60s)
	require.NoError(t, cluster.KillOperator(context.Background()))
	killed := time.Now()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, old, redisCluster(c).Status.Primary, "a new primary")
	}, waitFor, tick)
	// The restarted operator holds the lease again, well before the dead one's would run out
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		lease := &coordinationv1.Lease{}
		require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: localcluster.OperatorNamespace, Name: "redis-operator.cache.example.com"}, lease))
		pod, err := cluster.OperatorPod(context.Background())
		require.NoError(c, err)
		assert.Equal(c, pod, ptr.Deref(lease.Spec.HolderIdentity, ""), "held under the operator pod's name")
		assert.True(c, lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(killed), "renewed since the kill")
	}, operator.DefaultLeaseDuration/2, tick)
	t.Logf("the restarted operator led again %.1fs after it was killed", time.Since(killed).Seconds())
	rc := eventuallyReady(t, 5)
	primaries := 0
	for _, n := range rc.Status.Nodes {
		if n.Role == cachev1.RolePrimary {
			primaries++
		}
	}
	assert.Equal(t, 1, primaries)
	assert.Equal(t, rc.Status.Primary, primaryPod(t))
	now, err := cluster.OperatorRestarts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, restarts+1, now, "the kubelet restarted the operator once")
}

// everyPodDeletedWithStorage: a RedisCluster with storage whose pods are all force-deleted at once
// comes back with the write its replica acknowledged, from local volumes the kubelet mounted.
func everyPodDeletedWithStorage(t *testing.T) {
	applyJSON(t, "durable", `{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"durable"},`+
		`"spec":{"replicas":2,"storage":{"size":"64Mi"}}}`)
	cluster.MustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "rediscluster/durable", "--timeout=180s")
	w := serviceClient(t, "durable", 1, withPassword(t, "durable-auth"))
	require.NoError(t, w.Set(context.Background(), "kept", "on disk", 0).Err())
	require.Equal(t, int64(1), w.Do(context.Background(), "WAIT", 1, 5000).Val(), "the replica acknowledged")
	w.Close()

	cluster.MustKubectl(t, "delete", "pods", "-n", ns, "-l", "app.kubernetes.io/instance=durable", "--grace-period=0", "--force")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := serviceClient(c, "durable", 1, withPassword(c, "durable-auth"))
		defer r.Close()
		v, err := r.Get(context.Background(), "kept").Result()
		assert.NoError(c, err)
		assert.Equal(c, "on disk", v)
	}, 3*time.Minute, time.Second)

	cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/durable", "--wait")
	if !cluster.Local() {
		return // the cluster's own provisioner made the volumes
	}
	// The claims are bound to local volumes local-path-provisioner made, each on its pod's node,
	// which the kubelet mounted with the pods' fsGroup
	pvs := &corev1.PersistentVolumeList{}
	require.NoError(t, cluster.Client.List(context.Background(), pvs))
	bound := 0
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns && strings.Contains(ref.Name, "-durable-") {
			assert.NotNil(t, pv.Spec.Local, pv.Name)
			assert.Equal(t, "rancher.io/local-path", pv.Annotations["pv.kubernetes.io/provisioned-by"], pv.Name)
			assert.NotNil(t, pv.Spec.NodeAffinity, pv.Name)
			bound++
		}
	}
	assert.Equal(t, 2, bound, "a local volume for each pod's claim")
}

// primaryDiesWhileEtcdIsStopped: the failover must not wait on the API server.
func primaryDiesWhileEtcdIsStopped(t *testing.T) {
	needsLocalNode(t, "etcd is stopped")
	rc := eventuallyReady(t, 3)
	old := rc.Status.Primary
	// What the test needs of the API, read while it answers
	pw, err := cluster.SecretValue(context.Background(), ns, "sessions-auth", "password")
	require.NoError(t, err)
	addrs := map[string]string{}
	for _, n := range rc.Status.Nodes {
		pod := &corev1.Pod{}
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n.Name}, pod))
		addrs[n.Name] = net.JoinHostPort(pod.Status.PodIP, "6379")
	}
	redisID, err := cluster.ContainerID(context.Background(), ns, old, "redis")
	require.NoError(t, err)
	restarts, err := cluster.OperatorRestarts(context.Background())
	require.NoError(t, err)

	// When etcd stops (frozen: the API server can neither read nor write) and then the
	// primary's Redis dies
	require.NoError(t, cluster.PauseEtcd())
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = cluster.ResumeEtcd()
		}
	}()
	require.NoError(t, cluster.KillContainer(context.Background(), redisID))
	killed := time.Now()

	// Then another node becomes the primary and takes writes, with etcd still stopped
	var promoted string
	require.Eventually(t, func() bool {
		for name, addr := range addrs {
			if name == old {
				continue
			}
			c := goredis.NewClient(&goredis.Options{Addr: addr, Password: pw, MaxRetries: -1, Protocol: 2, DisableIdentity: true, Dialer: cluster.Dial,
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
			err := c.Set(context.Background(), "while-etcd-was-away", "yes", 0).Err()
			_ = c.Close()
			if err == nil {
				promoted = name
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "a writable primary while etcd is stopped")
	t.Logf("%s took writes %.2fs after the primary's Redis died, etcd stopped", promoted, time.Since(killed).Seconds())
	time.Sleep(time.Until(paused.Add(30 * time.Second)))
	require.NoError(t, cluster.ResumeEtcd())
	resumed = true

	// And once etcd is back, the status and the labels say so, and the operator never exited
	back := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, promoted, redisCluster(c).Status.Primary)
		assert.Equal(c, promoted, primaryPod(c))
	}, waitFor, tick)
	t.Logf("status and labels named %s %.2fs after etcd was back", promoted, time.Since(back).Seconds())
	eventuallyReady(t, 3)
	r := serviceClient(t, "sessions", 1)
	defer r.Close()
	v, err := r.Get(context.Background(), "while-etcd-was-away").Result()
	require.NoError(t, err)
	assert.Equal(t, "yes", v)
	now, err := cluster.OperatorRestarts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, restarts, now, "the operator did not exit while etcd was stopped")
}

// clusterExampleServesAClusterClient runs docs/cluster-mode.md's example, then writes and
// reads keys through its Service with a cluster client, which follows MOVED to the pods; then
// that page's scale-out to 4 shards and back to 3, reading the keys back after each.
func clusterExampleServesAClusterClient(t *testing.T, root, ns string) {
	out := cluster.RunDocsExample(t, "cluster-example", t.TempDir(), "NS="+ns)
	for i := range 3 {
		assert.Contains(t, out, fmt.Sprintf("orders-shard%d: primary orders-shard%d-", i, i))
	}
	_, err := cluster.WaitServiceEndpoints(context.Background(), ns, "orders", 6)
	require.NoError(t, err)
	addr, err := cluster.ServiceAddress(context.Background(), ns, "orders")
	require.NoError(t, err)
	pw, err := cluster.SecretValue(context.Background(), ns, "orders-auth", "password")
	require.NoError(t, err)
	// Seeded with the Service's ClusterIP, it follows MOVED to the pods' addresses.
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}, Password: pw, Dialer: cluster.Dial, DialTimeout: time.Second})
	defer cc.Close()
	for i := range 200 {
		require.NoError(t, cc.Set(context.Background(), fmt.Sprintf("order:%d", i), i, 0).Err())
	}
	readBack := func(when string) {
		t.Helper()
		for i := range 200 {
			v, err := cc.Get(context.Background(), fmt.Sprintf("order:%d", i)).Result()
			require.NoError(t, err, "%s: order:%d", when, i)
			assert.Equal(t, fmt.Sprint(i), v, "%s: order:%d", when, i)
		}
	}
	readBack("formed")

	// docs/cluster-mode.md's scale-out: a fourth shard gets its even share of the slots, keys and all
	out = cluster.RunDocsExample(t, "cluster-scale-example", t.TempDir(), "NS="+ns)
	assert.Contains(t, out, "orders-shard3: [", "the new shard serves slots:\n%s", out)
	cc.ReloadState(context.Background())
	readBack("after the scale-out to 4 shards")

	// And back to 3: the fourth shard is drained, its StatefulSet deleted
	cluster.MustKubectl(t, "patch", "-n", ns, "rediscluster/orders", "--type", "merge", "-p", `{"spec":{"cluster":{"shards":3}}}`)
	cluster.MustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "rediscluster/orders", "--timeout=300s")
	out = cluster.MustKubectl(t, "get", "-n", ns, "statefulsets", "-o", "name")
	assert.NotContains(t, out, "orders-shard3")
	// The client last heard of the slots when the fourth shard served some: it learns of the
	// scale-in when it reloads the map (a client with traffic would follow MOVED while the slots
	// moved); until then it dials the removed pods' addresses.
	cc.ReloadState(context.Background())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cc.Get(context.Background(), "order:0").Err())
	}, 30*time.Second, time.Second, "the client finds the three shards")
	readBack("after the scale-in to 3 shards")
	cluster.MustKubectl(t, "delete", "-n", ns, "rediscluster/orders", "--wait")
}
