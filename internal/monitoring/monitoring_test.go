package monitoring_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/monitoring"
	"github.com/org/redis-operator/test/testenv"
)

// The installer against a real API server, first without the Prometheus Operator's CRDs, then
// with the CRDs its API types generate (make prometheus-crds): the objects must pass their
// real schemas. It runs as the operator's ServiceAccount with config/rbac's monitoring role
// only, so that the role is proven to be enough.
func TestTheMonitoringObjectsAreInstalledOnceTheirCRDsExist(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	ns, err := testenv.CreateNamespace(ctx, admin, "operator")
	require.NoError(t, err)
	root, err := testenv.RepoRoot()
	require.NoError(t, err)

	// Given the operator's metrics Service and ServiceAccount, bound to the monitoring role
	service := &corev1.Service{}
	readYAML(t, filepath.Join(root, "config", "manager", "metrics_service.yaml"), service)
	service.Namespace, service.Name = ns, "redis-operator-controller-manager-metrics-service"
	require.NoError(t, admin.Create(ctx, service))
	role := &rbacv1.Role{}
	readYAML(t, filepath.Join(root, "config", "rbac", "monitoring_role.yaml"), role)
	role.Namespace = ns
	require.NoError(t, admin.Create(ctx, role))
	require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "controller-manager", Namespace: ns}}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "monitoring", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "controller-manager", Namespace: ns}},
	}))
	asOperator := rest.CopyConfig(cfg)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":controller-manager"}
	c, err := client.New(asOperator, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(asOperator)
	require.NoError(t, err)
	installer := &monitoring.Installer{Client: c, Reader: c, Discovery: disc, Namespace: ns,
		Service: service.Name, Interval: 200 * time.Millisecond, Log: testr.New(t)}

	// When the installer runs on a cluster without the Prometheus Operator: nothing to do
	require.NoError(t, installer.Install(ctx))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- installer.Start(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	// and then the CRDs are installed
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(root, "bin", "prometheus-crds")}, ErrorIfPathMissing: true,
	})
	require.NoError(t, err, "make prometheus-crds")

	// Then both objects appear within its interval, owned by the Service, as the real CRDs'
	// schemas accept them
	monitor, rule := object("ServiceMonitor", ns, "redis-operator-controller-manager-metrics-monitor"),
		object("PrometheusRule", ns, "redis-operator-rules")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, admin.Get(ctx, client.ObjectKeyFromObject(monitor), monitor))
		require.NoError(c, admin.Get(ctx, client.ObjectKeyFromObject(rule), rule))
	}, 20*time.Second, 100*time.Millisecond)
	for _, o := range []*unstructured.Unstructured{monitor, rule} {
		owner := metav1.GetControllerOf(o)
		require.NotNil(t, owner, o.GetKind())
		assert.Equal(t, service.UID, owner.UID, "%s is owned by the metrics Service: it goes with the operator", o.GetKind())
	}
	// the ServiceMonitor selects the metrics Service, on its port
	selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	assert.NotEmpty(t, selector)
	for k, v := range selector {
		assert.Equal(t, v, service.Labels[k], "selector label %s", k)
	}
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	assert.Equal(t, service.Spec.Ports[0].Name, endpoints[0].(map[string]any)["port"])
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	require.Len(t, groups, 1)
	rules, _ := groups[0].(map[string]any)["rules"].([]any)
	assert.Len(t, rules, 12, "the alerts")

	// And installing again changes nothing
	version := rule.GetResourceVersion()
	require.NoError(t, installer.Install(ctx))
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(rule), rule))
	assert.Equal(t, version, rule.GetResourceVersion())
}

func TestTheManifestsInConfigAreTheOnesTheOperatorInstalls(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	for file, embedded := range map[string][]byte{"monitor.yaml": monitoring.ServiceMonitor(), "rules.yaml": monitoring.PrometheusRule()} {
		raw, err := os.ReadFile(filepath.Join(root, "config", "prometheus", file))
		require.NoError(t, err)
		assert.Equal(t, string(embedded), string(raw), "config/prometheus/%s: run make manifests", file)
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, into))
}

func object(kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(monitoring.GroupVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}
