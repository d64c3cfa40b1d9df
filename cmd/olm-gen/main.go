// Command olm-gen finishes the OLM bundle that `operator-sdk generate bundle` writes (the
// release's own fields, the permissions' scope, images by digest), and writes the file-based
// catalog and a release's community catalog pull requests. `make bundle`, `make catalog` and
// `make operatorhub` run it.
//
//	olm-gen bundle --version 0.2.0 --image ... --created-at ...   > finishes bundle/ and bundle.Dockerfile
//	olm-gen catalog --template config/catalog/template.yaml --opm bin/opm > writes catalog/
//	olm-gen operatorhub --out bin/operatorhub --reviewers alice,bob  > writes both community catalogs' pull requests
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/org/redis-operator/internal/olm"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: olm-gen bundle|catalog|operatorhub [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "bundle":
		err = bundle(os.Args[2:])
	case "catalog":
		err = catalog(os.Args[2:])
	case "operatorhub":
		err = operatorhub(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want bundle, catalog or operatorhub", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "olm-gen:", err)
		os.Exit(1)
	}
}

func bundle(args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ExitOnError)
	rel := olm.Release{}
	var icon, root, pinFrom string
	fs.StringVar(&rel.Version, "version", "", "the release's version (x.y.z), the one operator-sdk generate bundle was given")
	fs.StringVar(&rel.Image, "image", "", "operator image")
	fs.StringVar(&rel.Replaces, "replaces", "", "CSV name this version replaces")
	fs.StringVar(&rel.SkipRange, "skip-range", "", "olm.skipRange")
	fs.StringVar(&rel.CreatedAt, "created-at", "", "the release's creation time, RFC 3339")
	fs.StringVar(&icon, "icon", "config/manifests/icon.svg", "SVG icon")
	fs.StringVar(&root, "root", ".", "where bundle/ and bundle.Dockerfile are")
	fs.StringVar(&pinFrom, "pin-images", "", "comma-separated OCI layouts of the images built here: name every image by their digests (a disconnected release)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if rel.Icon, err = os.ReadFile(icon); err != nil {
		return fmt.Errorf("reading the icon: %w", err)
	}
	if pinFrom != "" {
		if rel.Digests, err = olm.ImageDigests(strings.Split(pinFrom, ",")...); err != nil {
			return err
		}
	}
	return olm.FinishBundle(root, rel)
}

func catalog(args []string) error {
	fs := flag.NewFlagSet("catalog", flag.ExitOnError)
	opts := olm.CatalogOptions{}
	var icon string
	fs.StringVar(&opts.Template, "template", "config/catalog/template.yaml", "catalog template (olm.template.basic)")
	fs.StringVar(&opts.BundleDir, "bundle", "bundle", "the current bundle directory")
	fs.StringVar(&opts.BundleImage, "bundle-image", "", "the image the current bundle is published as")
	fs.StringVar(&opts.ReleasedDir, "released", "config/catalog/released", "rendered bundles of every release")
	fs.StringVar(&opts.Opm, "opm", "bin/opm", "the opm binary")
	fs.StringVar(&opts.OutDir, "out", "catalog", "the file-based catalog directory to write")
	fs.StringVar(&icon, "icon", "config/manifests/icon.svg", "the package's SVG icon")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if opts.BundleImage == "" {
		return fmt.Errorf("--bundle-image is required")
	}
	var err error
	if opts.Icon, err = os.ReadFile(icon); err != nil {
		return fmt.Errorf("reading the icon: %w", err)
	}
	return olm.GenerateCatalog(context.Background(), opts)
}

func operatorhub(args []string) error {
	fs := flag.NewFlagSet("operatorhub", flag.ExitOnError)
	opts := olm.SubmissionOptions{}
	var reviewers string
	fs.StringVar(&opts.Package, "package", "redis-operator", "OLM package name")
	fs.StringVar(&opts.BundleDir, "bundle", "bundle", "the release's bundle directory")
	fs.StringVar(&opts.Template, "template", "config/catalog/template.yaml", "our catalog template")
	fs.StringVar(&opts.CatalogDir, "catalog", "catalog", "our rendered catalog")
	fs.StringVar(&reviewers, "reviewers", "", "comma-separated GitHub users who approve the package's pull requests")
	fs.StringVar(&opts.NewestOpenShift, "openshift-newest", "v4.21", "the newest OpenShift catalog of community-operators-prod")
	fs.StringVar(&opts.PublishedBundleRepository, "published-bundles", "quay.io/community-operator-pipeline-prod/redis-operator",
		"where OpenShift's community pipeline publishes the bundle images it builds")
	fs.StringVar(&opts.OutDir, "out", "bin/operatorhub", "where the two repositories' trees are written")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if reviewers == "" {
		return fmt.Errorf("--reviewers is required: ci.yaml names at least one")
	}
	opts.Reviewers = strings.Split(reviewers, ",")
	ocp, err := olm.WriteSubmission(context.Background(), opts)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s under %s (OpenShift catalogs %s)\n", olm.OperatorHubRepo, olm.OpenShiftRepo, opts.OutDir, strings.Join(ocp, ", "))
	return nil
}
