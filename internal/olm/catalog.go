package olm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"sigs.k8s.io/yaml"
)

// CatalogOptions say where the catalog's parts are.
type CatalogOptions struct {
	// Template is the catalog template (schema olm.template.basic): package, channels with their
	// upgrade edges, and the bundle images.
	Template string
	// BundleDir is the current bundle, rendered with the real `opm render`.
	BundleDir string
	// BundleImage is the image the current bundle is published as.
	BundleImage string
	// ReleasedDir keeps the rendered bundles of earlier releases, one file each. Rendering the
	// current bundle also records it there, so it stays in the catalog after the next release.
	ReleasedDir string
	// Opm is the opm binary.
	Opm string
	// OutDir is the file-based catalog to write.
	OutDir string
	// Icon is the package's SVG icon.
	Icon []byte
}

type basicTemplate struct {
	Schema  string            `json:"schema"`
	Entries []json.RawMessage `json:"entries"`
}

// GenerateCatalog renders the file-based catalog from the template.
func GenerateCatalog(ctx context.Context, opts CatalogOptions) error {
	tmpl, err := loadTemplate(opts.Template)
	if err != nil {
		return err
	}
	current, err := renderBundle(ctx, opts.Opm, opts.BundleDir)
	if err != nil {
		return err
	}
	current.Image = opts.BundleImage
	for i := range current.RelatedImages {
		if current.RelatedImages[i].Name == "" {
			current.RelatedImages[i].Image = opts.BundleImage
		}
	}
	if err := writeReleased(opts.ReleasedDir, current); err != nil {
		return err
	}
	released, err := loadReleased(opts.ReleasedDir)
	if err != nil {
		return err
	}

	out := declcfg.DeclarativeConfig{Packages: tmpl.Packages, Channels: tmpl.Channels}
	for i := range out.Packages {
		if err := fillPackage(&out.Packages[i], opts.Icon, opts.BundleDir); err != nil {
			return err
		}
	}
	for _, b := range tmpl.Bundles {
		rendered, ok := released[b.Image]
		if !ok {
			return fmt.Errorf("the template lists bundle %s, but no rendered bundle has that image: "+
				"render it with `make bundle catalog` at that release (BUNDLE_IMG=%s)", b.Image, b.Image)
		}
		out.Bundles = append(out.Bundles, rendered)
	}
	sort.Slice(out.Bundles, func(i, j int) bool { return out.Bundles[i].Name < out.Bundles[j].Name })

	catalog, err := migrateToCSVMetadata(ctx, opts.Opm, out)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(opts.OutDir); err != nil {
		return err
	}
	dir := filepath.Join(opts.OutDir, current.Package)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "catalog.yaml"), catalog, 0o644)
}

// migrateToCSVMetadata is the catalog as the real `opm render --migrate-level
// bundle-object-to-csv-metadata` writes it: each bundle's manifests (olm.bundle.object) give way
// to its CSV's metadata (olm.csv.metadata), and OLM unpacks the manifests from the bundle image.
// OpenShift's catalogs refuse olm.bundle.object from 4.17 on.
func migrateToCSVMetadata(ctx context.Context, opm string, cfg declcfg.DeclarativeConfig) ([]byte, error) {
	dir, err := os.MkdirTemp("", "catalog-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(cfg, &buf); err != nil {
		return nil, fmt.Errorf("encoding the catalog: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "catalog.yaml"), buf.Bytes(), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, opm, "render", dir, "--migrate-level", "bundle-object-to-csv-metadata", "--output", "yaml")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("opm render --migrate-level bundle-object-to-csv-metadata: %w: %s", err, stderr.String())
	}
	return out, nil
}

func loadTemplate(path string) (*declcfg.DeclarativeConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the catalog template: %w", err)
	}
	var tmpl basicTemplate
	if err := yaml.UnmarshalStrict(raw, &tmpl); err != nil {
		return nil, fmt.Errorf("decoding the catalog template %s: %w", path, err)
	}
	if tmpl.Schema != "olm.template.basic" {
		return nil, fmt.Errorf("catalog template %s: schema %q, want olm.template.basic", path, tmpl.Schema)
	}
	var stream bytes.Buffer
	for _, e := range tmpl.Entries {
		stream.Write(e)
		stream.WriteByte('\n')
	}
	cfg, err := declcfg.LoadReader(&stream)
	if err != nil {
		return nil, fmt.Errorf("decoding the entries of %s: %w", path, err)
	}
	return cfg, nil
}

// renderBundle runs the real `opm render` on a bundle directory.
func renderBundle(ctx context.Context, opm, dir string) (declcfg.Bundle, error) {
	cmd := exec.CommandContext(ctx, opm, "render", dir, "--output", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("opm render %s: %w: %s", dir, err, stderr.String())
	}
	cfg, err := declcfg.LoadReader(bytes.NewReader(out))
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("decoding what opm render wrote: %w", err)
	}
	if len(cfg.Bundles) != 1 {
		return declcfg.Bundle{}, fmt.Errorf("opm render %s gave %d bundles, want 1", dir, len(cfg.Bundles))
	}
	return cfg.Bundles[0], nil
}

func writeReleased(dir string, b declcfg.Bundle) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{b}}, &buf); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, b.Name+".yaml"), buf.Bytes(), 0o644)
}

// loadReleased reads every rendered bundle, by image.
func loadReleased(dir string) (map[string]declcfg.Bundle, error) {
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("reading released bundles in %s: %w", dir, err)
	}
	byImage := map[string]declcfg.Bundle{}
	for _, b := range cfg.Bundles {
		byImage[b.Image] = b
	}
	return byImage, nil
}

// fillPackage gives the package the icon and the current CSV's description, so that both are
// written in one place each (config/manifests) and not again in the template.
func fillPackage(pkg *declcfg.Package, icon []byte, bundleDir string) error {
	if len(icon) > 0 {
		pkg.Icon = &declcfg.Icon{Data: icon, MediaType: "image/svg+xml"}
	}
	b, err := apimanifests.GetBundleFromDir(filepath.Join(bundleDir, manifestsDir))
	if err != nil {
		return fmt.Errorf("reading the bundle in %s: %w", bundleDir, err)
	}
	pkg.Description = b.CSV.Spec.Description
	return nil
}
