// Command runbundle does on the local cluster (make demo-olm) what `operator-sdk run bundle`,
// `run bundle-upgrade` and `cleanup` do: make run-bundle, run-bundle-upgrade and cleanup-bundle
// call it.
//
//	runbundle run     IMAGE [--namespace NS]              install a bundle image with OLM
//	runbundle upgrade IMAGE [--namespace NS]              upgrade the installed one to it
//	runbundle cleanup [--package NAME] [--namespace NS]   remove what run and upgrade made
//
// IMAGE is a bundle image in the cluster's registry (make bundle-build bundle-push).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

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
	namespace := fs.String("namespace", "default", "the namespace to install into (an OperatorGroup for it alone is created unless it has one)")
	pkg := fs.String("package", "redis-operator", "the package to clean up")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for each step")
	args := os.Args[2:]
	var image string
	if os.Args[1] != "cleanup" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Errorf("usage: runbundle %s IMAGE [--namespace NS]: the bundle image to install", os.Args[1])
		}
		image, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	cluster, err := localcluster.FromKubeconfig(root)
	if err != nil {
		return err
	}
	started := time.Now()
	r := localcluster.BundleRun{
		Cluster: cluster, Namespace: *namespace, Timeout: *timeout,
		Log: func(format string, args ...any) {
			fmt.Printf("INFO[%04d] %s\n", int(time.Since(started).Seconds()), fmt.Sprintf(format, args...))
		},
	}
	switch os.Args[1] {
	case "run":
		return r.Run(ctx, image)
	case "upgrade":
		return r.Upgrade(ctx, image)
	case "cleanup":
		return r.Cleanup(ctx, *pkg)
	}
	return fmt.Errorf("unknown command %q: run, upgrade or cleanup", os.Args[1])
}
