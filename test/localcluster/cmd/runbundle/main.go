// Command runbundle does on the local cluster (make demo-olm) what `operator-sdk run bundle`,
// `run bundle-upgrade` and `cleanup` do, without images: make run-bundle, run-bundle-upgrade and
// cleanup-bundle call it.
//
//	runbundle run     --bundle DIR|FILE [--namespace NS]   install a bundle with OLM
//	runbundle upgrade --bundle DIR|FILE [--namespace NS]   upgrade the installed one to it
//	runbundle cleanup [--package NAME] [--namespace NS]    remove what run and upgrade made
//
// DIR is a bundle directory (rendered with opm render); FILE is a rendered bundle, such as a
// release record in config/catalog/released.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FATA", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 2 {
		return errors.New("usage: runbundle run|upgrade|cleanup [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	bundlePath := fs.String("bundle", "bundle", "a bundle directory, or a rendered bundle file")
	namespace := fs.String("namespace", "default", "the namespace to install into (an OperatorGroup for it alone is created unless it has one)")
	pkg := fs.String("package", "redis-operator", "the package to clean up")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for each step")
	if err := fs.Parse(os.Args[2:]); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no cluster: start one with make demo-olm and export the KUBECONFIG it prints: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: localcluster.Scheme()})
	if err != nil {
		return err
	}
	started := time.Now()
	r := localcluster.BundleRun{
		Cluster: &localcluster.Cluster{Client: c, Root: root}, Namespace: *namespace, Timeout: *timeout,
		Log: func(format string, args ...any) {
			fmt.Printf("INFO[%04d] %s\n", int(time.Since(started).Seconds()), fmt.Sprintf(format, args...))
		},
	}
	switch os.Args[1] {
	case "run", "upgrade":
		bundle, err := loadBundle(ctx, filepath.Join(root, "bin", "opm"), *bundlePath)
		if err != nil {
			return err
		}
		if os.Args[1] == "run" {
			return r.Run(ctx, bundle)
		}
		return r.Upgrade(ctx, bundle)
	case "cleanup":
		return r.Cleanup(ctx, *pkg)
	}
	return fmt.Errorf("unknown command %q: run, upgrade or cleanup", os.Args[1])
}

// loadBundle renders a bundle directory, or reads a rendered bundle file.
func loadBundle(ctx context.Context, opm, path string) (declcfg.Bundle, error) {
	info, err := os.Stat(path)
	if err != nil {
		return declcfg.Bundle{}, err
	}
	if info.IsDir() {
		return localcluster.RenderBundle(ctx, opm, path)
	}
	fbc, err := localcluster.LoadCatalog(ctx, path)
	if err != nil {
		return declcfg.Bundle{}, err
	}
	if len(fbc.Bundles) != 1 {
		return declcfg.Bundle{}, fmt.Errorf("%s holds %d bundles, not one", path, len(fbc.Bundles))
	}
	return fbc.Bundles[0], nil
}
