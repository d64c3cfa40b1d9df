package olm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"sigs.k8s.io/yaml"
)

// A release is submitted to two community catalogs, each a pull request to its repository:
//   - OperatorHub.io's (k8s-operatorhub/community-operators): the bundle under
//     operators/<package>/<version>/ and ci.yaml with the update graph's mode (replaces-mode:
//     each CSV's replaces and skipRange make the graph, as in our channel).
//   - OpenShift's (redhat-openshift-ecosystem/community-operators-prod), in its file-based
//     catalog workflow: the bundle, ci.yaml with fbc enabled and the template-to-catalog mapping,
//     the catalog template (olm.template.basic) naming each release's bundle image as that
//     pipeline publishes it, and the catalogs it renders, catalogs/<OpenShift version>/<package>/
//     catalog.yaml. The pipeline renders with `opm alpha render-template basic`, which pulls
//     each bundle image; ours are not published, so the catalog is ours (catalog/, rendered with
//     opm from the same bundles) with the bundles' images named as the template names them.

// SubmissionOptions say what a submission holds.
type SubmissionOptions struct {
	// Package is the OLM package, the operator's directory in both repositories.
	Package string
	// BundleDir is the release's bundle (bundle/: manifests, metadata, tests/scorecard).
	BundleDir string
	// Template is the catalog template of our catalog (config/catalog/template.yaml).
	Template string
	// CatalogDir is our rendered catalog (catalog/<package>/catalog.yaml).
	CatalogDir string
	// Reviewers are the GitHub users who may approve the package's pull requests.
	Reviewers []string
	// NewestOpenShift is the newest OpenShift catalog of community-operators-prod (v4.21): the
	// release goes to those from its com.redhat.openshift.versions (v4.17: 4.17 and later) to it.
	NewestOpenShift string
	// PublishedBundleRepository is where OpenShift's pipeline publishes the bundle images it
	// builds: <repository>:<version> (quay.io/community-operator-pipeline-prod/<package>).
	PublishedBundleRepository string
	// OutDir is where the two repositories' trees are written.
	OutDir string
}

// The two repositories' directories under SubmissionOptions.OutDir.
const (
	OperatorHubRepo = "community-operators"
	OpenShiftRepo   = "community-operators-prod"
	// templateFile is the catalog template's name in catalog-templates/, as ci.yaml maps it.
	templateFile = "basic.yaml"
)

// CIConfig is a package's ci.yaml, with the fields of the pipeline's schema
// (operator-pipelines operatorcert/schemas/ci-schema.json) that we use.
type CIConfig struct {
	Reviewers   []string   `json:"reviewers"`
	UpdateGraph string     `json:"updateGraph,omitempty"`
	FBC         *FBCConfig `json:"fbc,omitempty"`
}

// FBCConfig is ci.yaml's fbc: the file-based catalog workflow and which template renders which
// catalogs.
type FBCConfig struct {
	Enabled        bool             `json:"enabled"`
	CatalogMapping []CatalogMapping `json:"catalog_mapping,omitempty"`
}

// CatalogMapping maps one catalog template to the catalogs it renders.
type CatalogMapping struct {
	TemplateName string   `json:"template_name"`
	CatalogNames []string `json:"catalog_names"`
	Type         string   `json:"type"`
}

// WriteSubmission writes both repositories' trees for the release in opts.BundleDir, and returns
// the OpenShift catalogs it goes to.
func WriteSubmission(ctx context.Context, opts SubmissionOptions) ([]string, error) {
	ocpVersions, err := opts.openShiftVersions()
	if err != nil {
		return nil, err
	}
	return ocpVersions, opts.write(ctx, ocpVersions)
}

func (opts SubmissionOptions) write(ctx context.Context, ocpVersions []string) error {
	b, err := apimanifests.GetBundleFromDir(filepath.Join(opts.BundleDir, manifestsDir))
	if err != nil {
		return fmt.Errorf("reading the bundle in %s: %w", opts.BundleDir, err)
	}
	version := b.CSV.Spec.Version.String()
	if err := os.RemoveAll(opts.OutDir); err != nil {
		return err
	}
	for _, repo := range []string{OperatorHubRepo, OpenShiftRepo} {
		dst := filepath.Join(opts.OutDir, repo, "operators", opts.Package, version)
		for _, part := range []string{manifestsDir, metadataDir, scorecardDir} {
			if err := os.CopyFS(filepath.Join(dst, part), os.DirFS(filepath.Join(opts.BundleDir, part))); err != nil {
				return err
			}
		}
	}
	if err := writeYAML(filepath.Join(opts.OutDir, OperatorHubRepo, "operators", opts.Package, "ci.yaml"),
		CIConfig{Reviewers: opts.Reviewers, UpdateGraph: "replaces-mode"}); err != nil {
		return err
	}
	operatorDir := filepath.Join(opts.OutDir, OpenShiftRepo, "operators", opts.Package)
	if err := writeYAML(filepath.Join(operatorDir, "ci.yaml"), CIConfig{Reviewers: opts.Reviewers, FBC: &FBCConfig{
		Enabled: true, CatalogMapping: []CatalogMapping{{TemplateName: templateFile, CatalogNames: ocpVersions, Type: "olm.template.basic"}},
	}}); err != nil {
		return err
	}

	// The template and the catalog, their bundle images renamed as the pipeline publishes them.
	catalog, err := declcfg.LoadFS(ctx, os.DirFS(opts.CatalogDir))
	if err != nil {
		return fmt.Errorf("reading the catalog in %s: %w", opts.CatalogDir, err)
	}
	published := map[string]string{}
	for i, bundle := range catalog.Bundles {
		v, err := bundleVersion(bundle)
		if err != nil {
			return err
		}
		image := opts.PublishedBundleRepository + ":" + v.String()
		published[bundle.Image] = image
		catalog.Bundles[i].Image = image
		for j, related := range bundle.RelatedImages {
			if related.Name == "" { // the bundle image itself, as opm render lists it
				catalog.Bundles[i].RelatedImages[j].Image = image
			}
		}
	}
	if err := writeTemplate(filepath.Join(operatorDir, "catalog-templates", templateFile), opts.Template, published); err != nil {
		return err
	}
	var rendered bytes.Buffer
	if err := declcfg.WriteYAML(*catalog, &rendered); err != nil {
		return err
	}
	for _, ocp := range ocpVersions {
		dir := filepath.Join(opts.OutDir, OpenShiftRepo, "catalogs", ocp, opts.Package)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "catalog.yaml"), rendered.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeTemplate writes the catalog template at path with each bundle image renamed by published;
// an image it does not know fails: the template and the catalog disagree.
func writeTemplate(dst, path string, published map[string]string) error {
	tmpl, err := loadTemplate(path)
	if err != nil {
		return err
	}
	entries := []any{}
	for _, p := range tmpl.Packages {
		entries = append(entries, map[string]any{"schema": p.Schema, "name": p.Name, "defaultChannel": p.DefaultChannel})
	}
	for _, c := range tmpl.Channels {
		entries = append(entries, c)
	}
	for _, b := range tmpl.Bundles {
		image, ok := published[b.Image]
		if !ok {
			return fmt.Errorf("the catalog template names bundle image %s, which the catalog has not", b.Image)
		}
		entries = append(entries, map[string]any{"schema": b.Schema, "image": image})
	}
	return writeYAML(dst, map[string]any{"schema": "olm.template.basic", "entries": entries})
}

func writeYAML(path string, v any) error {
	raw, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), raw...), 0o644)
}

// openShiftVersions are the OpenShift catalogs from the bundle's com.redhat.openshift.versions
// ("v4.17": 4.17 and later, as the pipeline reads it) up to opts.NewestOpenShift.
func (opts SubmissionOptions) openShiftVersions() ([]string, error) {
	labels, err := readAnnotations(filepath.Join(opts.BundleDir, metadataDir, "annotations.yaml"))
	if err != nil {
		return nil, err
	}
	annotation := labels[openShiftVersionsLabel]
	var fromMinor, toMinor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(annotation, "v"), "4.%d", &fromMinor); err != nil {
		return nil, fmt.Errorf("%s %q: want v4.<minor>", openShiftVersionsLabel, annotation)
	}
	if _, err := fmt.Sscanf(strings.TrimPrefix(opts.NewestOpenShift, "v"), "4.%d", &toMinor); err != nil {
		return nil, fmt.Errorf("newest OpenShift %q: want v4.<minor>", opts.NewestOpenShift)
	}
	var out []string
	for m := fromMinor; m <= toMinor; m++ {
		out = append(out, fmt.Sprintf("v4.%d", m))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no OpenShift version from %s to %s", annotation, opts.NewestOpenShift)
	}
	return out, nil
}
