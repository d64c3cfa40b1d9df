package controllers_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// In cluster mode, spec.tls makes the clients' connections, replication and the cluster bus
// TLS: a ClusterClient with TLS reads and writes every shard, plaintext is refused, and a
// certificate re-issued into the Secret reaches every node of every shard with no pod replaced.
func TestClusterModeServesOnlyTLSAndTakesANewCertificateLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ca := newCA(t, "redis-ca")
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.SecretResync = 500 * time.Millisecond })
	serverName := "sharded." + ns + ".svc" // the Service a cluster client is seeded with
	first, err := ca.Issue(serverName)
	require.NoError(t, err)
	require.NoError(t, k8sClient.Create(ctx, testenv.TLSSecret(ns, "sharded-tls", first, ca.PEM)))
	rc := testenv.RedisCluster(ns, "sharded", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sharded-tls", ClientAuth: true}
	require.NoError(t, k8sClient.Create(ctx, rc))
	node := runLocalNodeWith(t, ns, func(n *testenv.LocalNode) { n.VolumeSync = 200 * time.Millisecond })
	ready := eventuallyReadyWithin(t, rc, 2*waitFor)
	require.Len(t, ready.Status.Nodes, 6)
	password := secretValue(t, ns, "sharded-auth", "password")
	app, err := ca.Issue("app")
	require.NoError(t, err)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool(), ServerName: serverName, Certificates: []tls.Certificate{app.TLSCertificate()}}
	cfg.RootCAs.AddCert(ca.Cert)
	before := podUIDs(t, ns)

	// Then no node takes plaintext, nor TLS without a client certificate, and every node's
	// cluster bus speaks TLS
	for _, n := range ready.Status.Nodes {
		assert.Error(t, redisClient(t, node, n.Name, password).Ping(ctx).Err(), "plaintext to %s", n.Name)
		noCert := cfg.Clone()
		noCert.Certificates = nil
		assert.Error(t, tlsNodeClient(t, node, n.Name, password, noCert).Ping(ctx).Err(), "TLS without a client certificate to %s", n.Name)
		assert.Equal(t, first.Cert.SerialNumber.String(), servedCertificate(t, clusterBusAddr(t, node, n.Name), cfg), "%s's cluster bus", n.Name)
	}

	// And a ClusterClient over TLS writes and reads keys on every shard
	c := tlsClusterClient(t, node, ready, password, cfg)
	writeShardedKeys(t, c, "k:", 300, 0)
	assertKeysOnEveryShard(t, c, 300)

	// When the nodes' certificate is re-issued into the Secret
	second, err := ca.Issue(serverName)
	require.NoError(t, err)
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, key(ns, "sharded-tls"), secret))
	secret.Data = testenv.TLSSecret(ns, "sharded-tls", second, ca.PEM).Data
	require.NoError(t, k8sClient.Update(ctx, secret))

	// Then every node of every shard serves it to clients and on the bus, and said so
	for _, n := range ready.Status.Nodes {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, second.Cert.SerialNumber.String(), servedCertificate(t, node.Server(n.Name).Addr(), cfg))
			assert.Equal(c, second.Cert.SerialNumber.String(), servedCertificate(t, clusterBusAddr(t, node, n.Name), cfg))
		}, waitFor, 100*time.Millisecond, "%s serves the new certificate", n.Name)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 6, countEvents(c, rc, cachev1.EventCertificateReloaded), "one CertificateReloaded Event per node")
	}, waitFor, tick)

	// And the keys read back through a new client, the cluster is Ready, and no pod was replaced
	assertKeysOnEveryShard(t, tlsClusterClient(t, node, ready, password, cfg), 300)
	eventuallyReady(t, rc)
	assert.Equal(t, before, podUIDs(t, ns))
}

// tlsNodeClient is a client of one pod's Redis with this TLS configuration.
func tlsNodeClient(t *testing.T, node *testenv.LocalNode, pod, password string, cfg *tls.Config) *goredis.Client {
	t.Helper()
	server := node.Server(pod)
	require.NotNil(t, server, "pod %s runs no Redis", pod)
	c := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Password: password, TLSConfig: cfg, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tlsClusterClient is clusterClient over TLS: it checks the Service's name on every node, as a
// client seeded with the Service does.
func tlsClusterClient(t *testing.T, node *testenv.LocalNode, rc *cachev1.RedisCluster, password string, cfg *tls.Config) *goredis.ClusterClient {
	t.Helper()
	return clusterClientWith(t, node, rc, goredis.ClusterOptions{Password: password, TLSConfig: cfg})
}

// assertKeysOnEveryShard reads k:0..k:<n-1> back through c and checks that every primary holds
// some of them.
func assertKeysOnEveryShard(t *testing.T, c *goredis.ClusterClient, n int) {
	t.Helper()
	assertKeysRead(t, c, n)
	var primaries atomic.Int32 // (ForEachMaster calls each primary in a goroutine of its own)
	require.NoError(t, c.ForEachMaster(context.Background(), func(ctx context.Context, m *goredis.Client) error {
		size, err := m.DBSize(ctx).Result()
		if err == nil && size > 0 {
			primaries.Add(1)
		}
		return err
	}))
	assert.Equal(t, int32(3), primaries.Load(), "every shard's primary holds keys")
}

// clusterBusAddr is the pod's cluster bus: its Redis port + 10000, as Redis opens it.
func clusterBusAddr(t *testing.T, node *testenv.LocalNode, pod string) string {
	t.Helper()
	server := node.Server(pod)
	require.NotNil(t, server, "pod %s runs no Redis", pod)
	return net.JoinHostPort(server.IP, strconv.Itoa(redistest.Port+10000))
}

// servedCertificate is the serial number of the certificate a TLS handshake with addr is
// served, checked against cfg; the error when the handshake fails.
func servedCertificate(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}
