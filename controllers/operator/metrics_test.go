package operator_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

// The metrics endpoint, as the operator's Deployment serves it: HTTPS, to callers the API
// server authenticates and allows to get /metrics, with config/rbac's metrics-reader role.
func TestMetricsAreServedOverHTTPSToCallersAllowedToGetThem(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(ctx, c, "metrics")
	require.NoError(t, err)

	// Given Prometheus's ServiceAccount bound to the metrics-reader role, and another one not
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "metrics_reader_role.yaml"))
	require.NoError(t, err)
	reader := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.UnmarshalStrict(raw, reader))
	require.NoError(t, c.Create(ctx, reader))
	token := func(name string) string {
		require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
		tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	prometheus, nosy := token("prometheus"), token("nosy")
	require.NoError(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}},
	}))

	// When the operator serves its metrics with the defaults
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: addr, ProbeAddr: "0", SkipNameValidation: true})
	require.NoError(t, err)
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })

	// The certificate is self-signed: Prometheus scrapes it with insecureSkipVerify.
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test checks who may read, not the certificate
	scrape := func(c *assert.CollectT, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(c, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := https.Do(req)
		require.NoError(c, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(c, err)
		return resp.StatusCode, string(body)
	}

	// Then Prometheus reads them, the operator's own among them
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := scrape(c, prometheus)
		require.Equal(c, http.StatusOK, code, body)
		assert.Contains(c, body, "redis_operator_redis_connections_opened_total")
	}, 30*time.Second, 100*time.Millisecond)
	// and nobody else does
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, _ := scrape(c, nosy)
		assert.Equal(c, http.StatusForbidden, code, "a caller without the role")
		code, _ = scrape(c, "")
		assert.Equal(c, http.StatusUnauthorized, code, "a caller without a token")
	}, 10*time.Second, 100*time.Millisecond)
	// and not over plain HTTP
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the HTTPS port")
	assert.NotContains(t, string(body), "redis_operator")
}
