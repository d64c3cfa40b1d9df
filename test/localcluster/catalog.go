package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/org/redis-operator/test/images"
)

// OPMImage is the image of the catalog server's pod: bin/opm, static (make opm), in an image
// built here (test/images.OPM).
const OPMImage = images.OPMImage

// EmptyIndexImage is an index image of opm's that holds no package (images.EmptyIndex): make
// run-bundle's --index-image.
const EmptyIndexImage = "example.com/empty-index:v1.73.0"

// RestrictedPodSecurity and RestrictedContainerSecurity are what the restricted Pod Security
// Standard asks of the pods the harness creates, so that they run in users' namespaces.
func RestrictedPodSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1001),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

func RestrictedContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

// LoadCatalog reads a file-based catalog: a directory, or one rendered file.
func LoadCatalog(ctx context.Context, path string) (*declcfg.DeclarativeConfig, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return declcfg.LoadFS(ctx, os.DirFS(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return declcfg.LoadReader(f)
}

// CatalogOf is catalog/ as published (bundle images and their CSV's metadata, no manifests),
// with only the bundles keep takes (nil: all); the channel entries of the others go too.
func CatalogOf(ctx context.Context, root string, keep func(bundle string) bool) (*declcfg.DeclarativeConfig, error) {
	fbc, err := LoadCatalog(ctx, filepath.Join(root, "catalog"))
	if err != nil {
		return nil, err
	}
	out := &declcfg.DeclarativeConfig{Packages: fbc.Packages}
	kept := map[string]bool{}
	for _, b := range fbc.Bundles {
		if keep == nil || keep(b.Name) {
			kept[b.Name] = true
			out.Bundles = append(out.Bundles, b)
		}
	}
	for _, ch := range fbc.Channels {
		var entries []declcfg.ChannelEntry
		for _, e := range ch.Entries {
			if kept[e.Name] {
				if !kept[e.Replaces] {
					e.Replaces = ""
				}
				entries = append(entries, e)
			}
		}
		ch.Entries = entries
		out.Channels = append(out.Channels, ch)
	}
	return out, nil
}

// PublishCatalog does what a release does for OLM: it publishes the bundle image of each of
// fbc's bundles (PublishBundles), then builds the catalog image of fbc (root's
// catalog.Dockerfile) and pushes it to the cluster's registry under the name image. OLM then
// pulls them: the registry pod of a CatalogSource with spec.image, and a bundle unpack Job for
// each bundle it installs.
func (c *Cluster) PublishCatalog(ctx context.Context, image string, fbc *declcfg.DeclarativeConfig) error {
	if err := c.PublishBundles(ctx, fbc); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "publish-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	catalogDir := filepath.Join(dir, "catalog", fbc.Packages[0].Name)
	if err := os.MkdirAll(catalogDir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*fbc, &buf); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(catalogDir, "catalog.yaml"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	img, err := images.CatalogOf(c.Root, dir, filepath.Join(c.Root, "bin", "opm"), filepath.Join(c.Root, "bin", "grpc_health_probe"))
	if err != nil {
		return fmt.Errorf("the catalog image: %w", err)
	}
	_, err = c.real.registry.Push(ctx, image, img)
	return err
}

// PublishBundles builds the bundle image of each of fbc's bundles (root's bundle.Dockerfile
// over bundle/ for the current release, over the release record's manifests for an earlier one)
// and pushes it to the cluster's registry under the bundle's image name.
func (c *Cluster) PublishBundles(ctx context.Context, fbc *declcfg.DeclarativeConfig) error {
	if c.real == nil {
		return errors.New("images are published to the real node's registry: start the cluster on the real node")
	}
	dir, err := os.MkdirTemp("", "publish-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	current, err := apimanifests.GetBundleFromDir(filepath.Join(c.Root, "bundle", "manifests"))
	if err != nil {
		return err
	}
	released, err := LoadCatalog(ctx, filepath.Join(c.Root, "config", "catalog", "released"))
	if err != nil {
		return err
	}
	for _, b := range fbc.Bundles {
		var img v1.Image
		if b.Name == current.CSV.Name {
			img, err = images.Bundle(c.Root)
		} else {
			img, err = c.releasedBundleImage(filepath.Join(dir, b.Name), b.Name, released)
		}
		if err != nil {
			return fmt.Errorf("the bundle image of %s: %w", b.Name, err)
		}
		if _, err := c.real.registry.Push(ctx, b.Image, img); err != nil {
			return err
		}
	}
	return nil
}

// releasedBundleImage is the bundle image of an earlier release, name, laid out in dir from its
// release record: its manifests (olm.bundle.object), and bundle/'s metadata and scorecard
// configuration (package and channels have not changed since).
func (c *Cluster) releasedBundleImage(dir, name string, released *declcfg.DeclarativeConfig) (v1.Image, error) {
	var record *declcfg.Bundle
	for i := range released.Bundles {
		if released.Bundles[i].Name == name {
			record = &released.Bundles[i]
		}
	}
	if record == nil {
		return nil, fmt.Errorf("no release record of %s in config/catalog/released", name)
	}
	manifests := filepath.Join(dir, "bundle", "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return nil, err
	}
	props, err := property.Parse(record.Properties)
	if err != nil {
		return nil, fmt.Errorf("the release record of %s: %w", name, err)
	}
	for i, obj := range props.BundleObjects {
		if err := os.WriteFile(filepath.Join(manifests, fmt.Sprintf("object-%02d.yaml", i+1)), obj.Data, 0o644); err != nil {
			return nil, err
		}
	}
	if len(props.BundleObjects) == 0 {
		return nil, fmt.Errorf("the release record of %s carries no manifests", name)
	}
	for _, sub := range []string{"metadata", filepath.Join("tests", "scorecard")} {
		if err := copyDir(filepath.Join(c.Root, "bundle", sub), filepath.Join(dir, "bundle", sub)); err != nil {
			return nil, err
		}
	}
	return images.BundleOf(c.Root, dir)
}

func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// CatalogImage is the name the local cluster publishes catalog/ under: the Makefile's
// CATALOG_IMG repository, at the tag a CatalogSource follows (each release pushes it anew).
const CatalogImage = "example.com/redis-operator-catalog:latest"

// ServeCatalogImage points the CatalogSource name in namespace at image (a grpc CatalogSource
// with spec.image): OLM runs the registry pod itself, and polls the image every poll for a new
// one under the same name (0: never). Serving another image replaces the pod.
func (c *Cluster) ServeCatalogImage(ctx context.Context, namespace, name, image string, poll time.Duration) error {
	cs := &operatorsv1alpha1.CatalogSource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, c.Client, cs, func() error {
		cs.Spec.SourceType = operatorsv1alpha1.SourceTypeGrpc
		cs.Spec.Image = image
		cs.Spec.Address = ""
		cs.Spec.DisplayName = name
		// Restricted: the pod OLM makes passes the restricted Pod Security Standard.
		cs.Spec.GrpcPodConfig = &operatorsv1alpha1.GrpcPodConfig{SecurityContextConfig: operatorsv1alpha1.Restricted}
		cs.Spec.UpdateStrategy = nil
		if poll > 0 {
			cs.Spec.UpdateStrategy = &operatorsv1alpha1.UpdateStrategy{RegistryPoll: &operatorsv1alpha1.RegistryPoll{RawInterval: poll.String()}}
		}
		return nil
	})
	return err
}
