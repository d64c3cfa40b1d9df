package olm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/internal/olm"
)

// The bundle and the catalog we ship pass OpenShift's community catalog gates.
func TestTheBundleAndTheCatalogPassTheCommunityGates(t *testing.T) {
	problems, err := olm.BundleGateProblems(filepath.Join(repoRoot(t), "bundle"))
	require.NoError(t, err)
	assert.Empty(t, problems)
	assert.Empty(t, olm.CatalogGateProblems(loadCatalog(t)))
}

// Each gate fails on a copy of our bundle broken in the way it guards against, naming the field.
func TestEachCommunityGateRefusesABrokenBundle(t *testing.T) {
	csvPath := filepath.Join("manifests", "redis-operator.clusterserviceversion.yaml")
	annotationsPath := filepath.Join("metadata", "annotations.yaml")
	for _, tt := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"a display name too long", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) {
				spec(csv)["displayName"] = strings.Repeat("Redis ", 10)
			})
		}, "spec.displayName"},
		{"a short description", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) { spec(csv)["description"] = "Redis." })
		}, "spec.description"},
		{"no maintainers", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) { delete(spec(csv), "maintainers") })
		}, "spec.maintainers"},
		{"an icon of another type", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) {
				spec(csv)["icon"].([]any)[0].(map[string]any)["mediatype"] = "text/plain"
			})
		}, "spec.icon[0].mediatype"},
		{"no provider", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) { delete(spec(csv), "provider") })
		}, "spec.provider.name"},
		{"no links", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) { delete(spec(csv), "links") })
		}, "spec.links"},
		{"a features annotation missing", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, csvPath), func(csv map[string]any) {
				delete(csv["metadata"].(map[string]any)["annotations"].(map[string]any), "features.operators.openshift.io/proxy-aware")
			})
		}, "features.operators.openshift.io/proxy-aware"},
		{"no OpenShift versions beside minKubeVersion", func(t *testing.T, dir string) {
			editYAML(t, filepath.Join(dir, annotationsPath), func(doc map[string]any) {
				delete(doc["annotations"].(map[string]any), "com.redhat.openshift.versions")
			})
		}, "com.redhat.openshift.versions"},
		{"a NetworkPolicy", func(t *testing.T, dir string) {
			np := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: allow-metrics\nspec:\n  podSelector: {}\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "manifests", "allow-metrics_networking.k8s.io_v1_networkpolicy.yaml"), []byte(np), 0o600))
		}, "NetworkPolicy allow-metrics"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyBundle(t)
			tt.break_(t, dir)
			problems, err := olm.BundleGateProblems(dir)
			require.NoError(t, err)
			assert.Condition(t, func() bool {
				for _, p := range problems {
					if strings.Contains(p, tt.want) {
						return true
					}
				}
				return false
			}, "a problem naming %s, got %v", tt.want, problems)
		})
	}
}

// A catalog that carries its bundles' manifests, or a bundle in no channel, is refused.
func TestTheCatalogGateRefusesBundleObjectsAndDanglingBundles(t *testing.T) {
	released, err := declcfg.LoadFS(context.Background(), os.DirFS(filepath.Join(repoRoot(t), "config", "catalog", "released")))
	require.NoError(t, err)
	cfg := loadCatalog(t)
	cfg.Bundles = released.Bundles // as rendered, with olm.bundle.object
	cfg.Channels[0].Entries = cfg.Channels[0].Entries[1:]
	problems := strings.Join(olm.CatalogGateProblems(cfg), "\n")
	assert.Contains(t, problems, "olm.bundle.object")
	assert.Contains(t, problems, "is in no channel")
}

// copyBundle copies bundle/ (manifests and metadata) into a directory of the test's.
func copyBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"manifests", "metadata"} {
		src := filepath.Join(repoRoot(t), "bundle", sub)
		entries, err := os.ReadDir(src)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, sub), 0o755))
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join(src, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, sub, e.Name()), raw, 0o600))
		}
	}
	return dir
}

func editYAML(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := map[string]any{}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	edit(doc)
	out, err := yaml.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, out, 0o600))
}

func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }
