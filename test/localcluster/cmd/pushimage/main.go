// Command pushimage pushes an image built without a container engine (an OCI layout under
// bin/images) to the registry of the local cluster in KUBECONFIG (make demo-olm), under its
// name: make docker-push, bundle-push and catalog-push call it when no engine answers.
//
//	pushimage --dir bin/images/bundle --name example.com/redis-operator-bundle:v0.2.0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/registry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pushimage:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "the image's OCI layout (make bundle-build writes bin/images/bundle)")
	name := flag.String("name", "", "the image's name, as the manifests and the catalog give it")
	flag.Parse()
	if *dir == "" || *name == "" {
		return errors.New("usage: pushimage --dir DIR --name NAME")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	_, img, err := images.Load(*dir)
	if err != nil {
		return fmt.Errorf("%w (build it first: make bundle-build, catalog-build or docker-build)", err)
	}
	cluster, err := localcluster.FromKubeconfig("")
	if err != nil {
		return err
	}
	host, err := localcluster.LocalRegistry(ctx, cluster.Client)
	if err != nil {
		return err
	}
	ref, err := registry.ReferenceIn(host, *name)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("pushing %s: %w", *name, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s (%s) to the local cluster's registry %s\n", *name, digest, host)
	return nil
}
