package olm_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/internal/olm"
	"github.com/org/redis-operator/test/testenv"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	return root
}

func loadBundle(t *testing.T) *apimanifests.Bundle {
	t.Helper()
	b, err := apimanifests.GetBundleFromDir(filepath.Join(repoRoot(t), "bundle", "manifests"))
	require.NoError(t, err)
	return b
}

// The validators operator-sdk's `bundle validate --select-optional suite=operatorframework` runs,
// for our minKubeVersion and for the newest Kubernetes: no error and no warning.
func TestBundlePassesTheOperatorFrameworkValidators(t *testing.T) {
	assertPassesTheOperatorFrameworkValidators(t, loadBundle(t))
}

func assertPassesTheOperatorFrameworkValidators(t *testing.T, b *apimanifests.Bundle) {
	t.Helper()
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	for _, k8sVersion := range []string{b.CSV.Spec.MinKubeVersion, "1.37.0"} {
		t.Run("k8s "+k8sVersion, func(t *testing.T) {
			objs := []any{b, b.CSV, map[string]string{"k8s-version": k8sVersion}}
			for _, crd := range b.V1CRDs {
				objs = append(objs, crd)
			}
			var problems []errors.Error
			for _, result := range validators.Validate(objs...) {
				problems = append(problems, result.Errors...)
				problems = append(problems, result.Warnings...)
			}
			assert.Empty(t, problems)
		})
	}
}

func TestCSVInstallsTheOperatorTheWayConfigDescribesIt(t *testing.T) {
	b := loadBundle(t)
	csv := b.CSV
	strategy := csv.Spec.InstallStrategy.StrategySpec

	// The manager Deployment, watching the OperatorGroup's namespaces.
	require.Len(t, strategy.DeploymentSpecs, 1)
	pod := strategy.DeploymentSpecs[0].Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	manager := pod.Containers[0]
	assert.Equal(t, csv.Annotations["containerImage"], manager.Image)
	assert.Contains(t, manager.Env, corev1.EnvVar{Name: "WATCH_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['olm.targetNamespaces']"},
	}})

	// The role that `make manifests` generated from the RBAC markers is a namespaced permission
	// but for its rule on nodes (cluster-scoped): OLM grants the rest in the OperatorGroup's
	// target namespaces (cluster-wide only for AllNamespaces). The cluster permissions are that
	// rule, reading nodes (whether a pod's machine is ready), and the metrics endpoint's: asking
	// the API server who a scraper is and what it may do.
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	role := rbacv1.ClusterRole{}
	require.NoError(t, yaml.Unmarshal(raw, &role))
	var clusterRules []rbacv1.PolicyRule
	for _, p := range strategy.ClusterPermissions {
		assert.Equal(t, pod.ServiceAccountName, p.ServiceAccountName)
		clusterRules = append(clusterRules, p.Rules...)
	}
	assert.ElementsMatch(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, clusterRules)
	var rules []rbacv1.PolicyRule
	for _, p := range strategy.Permissions {
		assert.Equal(t, pod.ServiceAccountName, p.ServiceAccountName)
		rules = append(rules, p.Rules...)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "nodes") {
			assert.Contains(t, clusterRules, r)
			continue
		}
		assert.Contains(t, rules, r)
	}
	// And leader election's Lease.
	assert.Contains(t, fmt.Sprint(rules), "coordination.k8s.io")

	// Every install mode, the upgrade edge, and the images.
	for _, mode := range csv.Spec.InstallModes {
		assert.True(t, mode.Supported, "%s", mode.Type)
	}
	assert.Len(t, csv.Spec.InstallModes, 4)
	assert.Equal(t, "redis-operator.v"+csv.Spec.Version.String(), csv.Name)
	var related []string
	for _, r := range csv.Spec.RelatedImages {
		related = append(related, r.Image)
	}
	assert.Contains(t, related, manager.Image)
	assert.Contains(t, related, "redis:7.2")
	assert.NotEmpty(t, csv.Annotations["alm-examples"])
}

// Generating the bundle twice from the same manifests gives the same bytes: no clock, no map order.
func TestBundleGenerationIsDeterministic(t *testing.T) {
	root := repoRoot(t)
	manifests := kustomizeBuild(t, root)
	opts := olm.BundleOptions{
		Package: "redis-operator", Version: "9.9.9", Image: "example.com/op:v9.9.9", Channels: []string{"alpha"},
		DefaultChannel: "alpha", CreatedAt: "2026-01-01T00:00:00Z", Icon: []byte("<svg/>"),
	}
	first, err := olm.GenerateBundle(bytes.NewReader(manifests), opts)
	require.NoError(t, err)
	second, err := olm.GenerateBundle(bytes.NewReader(manifests), opts)
	require.NoError(t, err)
	assert.Equal(t, first.Files, second.Files)
	assert.Contains(t, string(first.Files["bundle/metadata/annotations.yaml"]), "operators.operatorframework.io.test.config.v1: tests/scorecard/")
}

// kustomizeBuild runs the real `kustomize build config/manifests` that `make bundle` runs.
func kustomizeBuild(t *testing.T, root string) []byte {
	t.Helper()
	kustomize := filepath.Join(root, "bin", "kustomize")
	_, err := os.Stat(kustomize)
	require.NoError(t, err, "run `make kustomize` first")
	out, err := exec.Command(kustomize, "build", filepath.Join(root, "config", "manifests")).Output()
	require.NoError(t, err)
	return out
}
