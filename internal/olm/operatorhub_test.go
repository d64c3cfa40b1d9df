package olm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/internal/olm"
)

// The pull requests of a release to the community catalogs (make operatorhub), checked as their
// pipelines check what can run here: operator-sdk bundle validate as they run it, ci.yaml against
// the pipeline's schema, opm validate on each OpenShift catalog, the template against the
// catalog it renders, and the CSV's fields the community pipeline requires.
func TestTheOperatorHubSubmissionPassesThePipelinesStaticChecks(t *testing.T) {
	root := repoRoot(t)
	out := t.TempDir()
	ocp, err := olm.WriteSubmission(context.Background(), olm.SubmissionOptions{
		Package: "redis-operator", BundleDir: filepath.Join(root, "bundle"),
		Template: filepath.Join(root, "config", "catalog", "template.yaml"), CatalogDir: filepath.Join(root, "catalog"),
		Reviewers: []string{"a-maintainer"}, NewestOpenShift: "v4.21",
		PublishedBundleRepository: "quay.io/community-operator-pipeline-prod/redis-operator", OutDir: out,
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"v4.17", "v4.18", "v4.19", "v4.20", "v4.21"}, ocp, "from the bundle's com.redhat.openshift.versions v4.17")

	for _, repo := range []string{olm.OperatorHubRepo, olm.OpenShiftRepo} {
		operator := filepath.Join(out, repo, "operators", "redis-operator")
		t.Run(repo, func(t *testing.T) {
			bundle := filepath.Join(operator, "0.2.0")
			assert.Empty(t, sdkValidate(t, bundle), "operator-sdk bundle validate, as the pipeline runs it")
			for _, dir := range []string{"manifests", "metadata", "tests/scorecard"} {
				assert.DirExists(t, filepath.Join(bundle, dir))
			}
			b, err := apimanifests.GetBundleFromDir(filepath.Join(bundle, "manifests"))
			require.NoError(t, err)
			assert.Empty(t, requiredFieldProblems(t, b), "the CSV's fields the community pipeline requires")
			ci := readCIConfig(t, filepath.Join(operator, "ci.yaml"))
			assert.NotEmpty(t, ci.Reviewers, "ci.yaml names reviewers")
			if repo == olm.OperatorHubRepo {
				assert.Equal(t, "replaces-mode", ci.UpdateGraph)
				return
			}
			require.NotNil(t, ci.FBC)
			assert.True(t, ci.FBC.Enabled, "OpenShift's catalogs take the file-based catalog workflow")
			require.Len(t, ci.FBC.CatalogMapping, 1)
			mapping := ci.FBC.CatalogMapping[0]
			assert.Equal(t, "olm.template.basic", mapping.Type)
			assert.Equal(t, ocp, mapping.CatalogNames)
			template := filepath.Join(operator, "catalog-templates", mapping.TemplateName)
			for _, name := range mapping.CatalogNames {
				catalog := filepath.Join(out, repo, "catalogs", name)
				opm := exec.Command(filepath.Join(root, "bin", "opm"), "validate", catalog)
				outOpm, err := opm.CombinedOutput()
				assert.NoError(t, err, "opm validate %s: %s", name, outOpm)
				assertTemplateRendersTo(t, template, filepath.Join(catalog, "redis-operator"))
			}
		})
	}
}

// readCIConfig decodes a ci.yaml as the pipeline's schema (operator-pipelines
// operatorcert/schemas/ci-schema.json) allows it: the fields it knows with their types, fbc
// with no other field, updateGraph and each mapping's type among its values, reviewers and
// catalog_names not empty, catalog_names without repeats, and a mapping's three fields present.
func readCIConfig(t *testing.T, path string) olm.CIConfig {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var ci olm.CIConfig
	require.NoError(t, yaml.UnmarshalStrict(raw, &ci), "ci.yaml as the schema allows it")
	assert.GreaterOrEqual(t, len(ci.Reviewers), 1, "reviewers: minItems 1")
	if ci.UpdateGraph != "" {
		assert.Contains(t, []string{"replaces-mode", "semver-mode"}, ci.UpdateGraph)
	}
	if ci.FBC != nil {
		for _, m := range ci.FBC.CatalogMapping {
			assert.NotEmpty(t, m.TemplateName, "template_name is required")
			assert.Contains(t, []string{"olm.template.basic", "olm.semver"}, m.Type)
			assert.NotEmpty(t, m.CatalogNames, "catalog_names: minItems 1")
			assert.Len(t, slices.Compact(slices.Sorted(slices.Values(m.CatalogNames))), len(m.CatalogNames), "catalog_names: uniqueItems")
		}
	}
	return ci
}

// assertTemplateRendersTo checks the basic template against the catalog in dir, as the pipeline
// renders one from the other (`opm alpha render-template basic`, which pulls each bundle image:
// here the rendered bundles are ours, renamed): the same package and channels, and one rendered
// bundle for each bundle image the template names, under that image.
func assertTemplateRendersTo(t *testing.T, template, dir string) {
	t.Helper()
	raw, err := os.ReadFile(template)
	require.NoError(t, err)
	var tmpl struct {
		Schema  string           `json:"schema"`
		Entries []map[string]any `json:"entries"`
	}
	require.NoError(t, yaml.UnmarshalStrict(raw, &tmpl))
	assert.Equal(t, "olm.template.basic", tmpl.Schema)
	catalog, err := declcfg.LoadFS(context.Background(), os.DirFS(dir))
	require.NoError(t, err)
	var images, rendered []string
	channels := 0
	for _, e := range tmpl.Entries {
		switch e["schema"] {
		case "olm.bundle":
			images = append(images, e["image"].(string))
		case "olm.channel":
			channels++
			var want declcfg.Channel
			raw, _ := yaml.Marshal(e)
			require.NoError(t, yaml.Unmarshal(raw, &want))
			i := slices.IndexFunc(catalog.Channels, func(c declcfg.Channel) bool { return c.Name == want.Name })
			require.GreaterOrEqual(t, i, 0, "channel %s is in the catalog", want.Name)
			assert.Equal(t, want.Entries, catalog.Channels[i].Entries, "channel %s's entries", want.Name)
		case "olm.package":
			require.Len(t, catalog.Packages, 1)
			assert.Equal(t, e["name"], catalog.Packages[0].Name)
			assert.Equal(t, e["defaultChannel"], catalog.Packages[0].DefaultChannel)
		}
	}
	assert.Len(t, catalog.Channels, channels)
	for _, b := range catalog.Bundles {
		rendered = append(rendered, b.Image)
	}
	assert.ElementsMatch(t, images, rendered, "a rendered bundle for each bundle image of the template")
	for _, image := range images {
		assert.Regexp(t, `^quay\.io/community-operator-pipeline-prod/redis-operator:\d+\.\d+\.\d+$`, image, "named as the pipeline publishes it")
	}
}

// requiredFieldProblems is the community pipeline's check_required_fields (operator-pipelines
// operatorcert/static_tests/community/bundle.py, from community-operators'
// packaging-required-fields.md): each field present and of the form it asks.
func requiredFieldProblems(t *testing.T, b *apimanifests.Bundle) []string {
	t.Helper()
	csv := b.CSV
	a := csv.Annotations
	var problems []string
	check := func(field string, ok bool) {
		if !ok {
			problems = append(problems, "CSV does not define, or has an invalid value for, "+field)
		}
	}
	match := func(pattern, value string) bool { return regexp.MustCompile(pattern).MatchString(value) }
	check("metadata.annotations.capabilities", slices.Contains([]string{"Basic Install", "Seamless Upgrades", "Full Lifecycle", "Deep Insights", "Auto Pilot"}, a["capabilities"]))
	check("metadata.annotations.categories", a["categories"] != "")
	check("metadata.annotations.containerImage", match(`([^/]+/){1,}[^/:]+:.+`, a["containerImage"]))
	check("metadata.annotations.createdAt", a["createdAt"] != "")
	check("metadata.annotations.repository", match(`^https?://.+`, a["repository"]))
	check("metadata.annotations.support", len(a["support"]) >= 3)
	check("metadata.annotations.description", len(a["description"]) >= 10)
	check("spec.displayName", len(csv.Spec.DisplayName) >= 3 && len(csv.Spec.DisplayName) <= 50)
	check("spec.description", len(csv.Spec.Description) >= 20)
	check("spec.icon", len(csv.Spec.Icon) == 1 && csv.Spec.Icon[0].Data != "" && csv.Spec.Icon[0].MediaType != "")
	check("spec.version", csv.Spec.Version.String() != "0.0.0")
	check("spec.maintainers", len(csv.Spec.Maintainers) > 0 && csv.Spec.Maintainers[0].Name != "" && csv.Spec.Maintainers[0].Email != "")
	check("spec.provider.name", len(csv.Spec.Provider.Name) >= 3)
	check("spec.links", len(csv.Spec.Links) > 0 && csv.Spec.Links[0].URL != "")
	check("spec.keywords", len(csv.Spec.Keywords) > 0)
	return problems
}
