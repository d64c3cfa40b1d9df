package olm_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
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

// What `make bundle` has the CLI write, finished with the committed release's own fields, is the
// committed bundle byte for byte; finishing it again changes nothing. The CLI alone makes every
// rule of the manager's ClusterRole a cluster permission and stamps the clock's time: what
// FinishBundle is for.
func TestFinishingTheCLIsBundleGivesTheCommittedOne(t *testing.T) {
	root := repoRoot(t)
	committed := loadBundle(t).CSV
	icon, err := base64.StdEncoding.DecodeString(committed.Spec.Icon[0].Data)
	require.NoError(t, err)
	rel := olm.Release{
		Version: committed.Spec.Version.String(), Image: committed.Annotations["containerImage"],
		Replaces: committed.Spec.Replaces, SkipRange: committed.Annotations["olm.skipRange"],
		CreatedAt: committed.Annotations["createdAt"], Icon: icon,
	}

	out := cliBundle(t, root, rel.Version)
	raw, err := apimanifests.GetBundleFromDir(filepath.Join(out, "bundle", "manifests"))
	require.NoError(t, err)
	var clusterRules []string
	for _, p := range raw.CSV.Spec.InstallStrategy.StrategySpec.ClusterPermissions {
		for _, r := range p.Rules {
			clusterRules = append(clusterRules, r.Resources...)
		}
	}
	assert.Contains(t, clusterRules, "statefulsets", "the CLI's own output: namespaced rules as cluster permissions")
	assert.NotEqual(t, rel.CreatedAt, raw.CSV.Annotations["createdAt"])

	require.NoError(t, olm.FinishBundle(out, rel))
	assertSameFiles(t, root, out)
	require.NoError(t, olm.FinishBundle(out, rel))
	assertSameFiles(t, root, out)

	rel.Version = "9.9.9"
	require.ErrorContains(t, olm.FinishBundle(out, rel), "generate the bundle with --version 9.9.9")
}

// cliBundle writes, under a new directory, what `make bundle` has operator-sdk write: the real
// `kustomize build config/manifests` piped into the real `operator-sdk generate bundle`.
func cliBundle(t *testing.T, root, version string) string {
	t.Helper()
	for _, tool := range []string{"kustomize", "operator-sdk"} {
		_, err := os.Stat(filepath.Join(root, "bin", tool))
		require.NoError(t, err, "run `make %s` first", tool)
	}
	out := t.TempDir()
	project, err := os.ReadFile(filepath.Join(root, "PROJECT")) // the package's name and layout
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "PROJECT"), project, 0o644))
	manifests, err := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, "config", "manifests")).Output()
	require.NoError(t, err)
	generate := exec.Command(filepath.Join(root, "bin", "operator-sdk"), "generate", "bundle", "-q", "--overwrite",
		"--version", version, "--channels", "stable", "--default-channel", "stable")
	generate.Dir = out // the CLI writes bundle.Dockerfile where it runs
	generate.Stdin = bytes.NewReader(manifests)
	msg, err := generate.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	return out
}

// assertSameFiles checks that got holds bundle/ and bundle.Dockerfile as want does.
func assertSameFiles(t *testing.T, want, got string) {
	t.Helper()
	files := func(root string) map[string]string {
		m := map[string]string{}
		raw, err := os.ReadFile(filepath.Join(root, "bundle.Dockerfile"))
		require.NoError(t, err)
		m["bundle.Dockerfile"] = string(raw)
		require.NoError(t, filepath.WalkDir(filepath.Join(root, "bundle"), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			raw, err := os.ReadFile(path)
			rel, _ := filepath.Rel(root, path)
			m[rel] = string(raw)
			return err
		}))
		return m
	}
	assert.Equal(t, files(want), files(got))
}
