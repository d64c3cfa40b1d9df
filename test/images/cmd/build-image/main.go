// Command build-image builds one of the local cluster's images without a container engine and
// saves it as an OCI image layout (see package images):
//
//	build-image operator -binary bin/images/manager -name example.com/redis-operator:v0.2.0 -out bin/images/operator
//	build-image pause    -binary bin/images/pause   -name registry.k8s.io/pause:3.10  -out bin/images/pause
//	build-image redis    -rootfs bin/images/redis-rootfs -name docker.io/library/redis:7.0 -out bin/images/redis
//	build-image bundle   -root . -name example.com/redis-operator-bundle:v0.2.0 -out bin/images/bundle
//	build-image catalog  -root . -opm bin/opm -health-probe bin/grpc_health_probe -name example.com/redis-operator-catalog:v0.2.0 -out bin/images/catalog
//
// It prints the image's digest.
package main

import (
	"flag"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/org/redis-operator/test/images"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("which image: operator, pause, redis, bundle or catalog")
	}
	kind := args[0]
	flags := flag.NewFlagSet(kind, flag.ContinueOnError)
	binary := flags.String("binary", "", "the static binary of the operator or pause image")
	rootfs := flags.String("rootfs", "", "the Redis image's root filesystem")
	root := flags.String("root", ".", "the project's tree: the build context of bundle.Dockerfile and catalog.Dockerfile")
	opm := flags.String("opm", "bin/opm", "the static opm of the catalog image")
	healthProbe := flags.String("health-probe", "bin/grpc_health_probe", "the static grpc_health_probe of the catalog image")
	name := flags.String("name", "", "the image's name, with its tag")
	out := flags.String("out", "", "the directory the OCI layout is written to")
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	if *name == "" || *out == "" {
		return fmt.Errorf("-name and -out are required")
	}
	var img v1.Image
	var err error
	switch kind {
	case "operator":
		img, err = images.Operator(*binary)
	case "pause":
		img, err = images.Pause(*binary)
	case "redis":
		img, err = images.Redis(*rootfs)
	case "bundle":
		img, err = images.Bundle(*root)
	case "catalog":
		img, err = images.Catalog(*root, *opm, *healthProbe)
	default:
		return fmt.Errorf("no image %q: operator, pause, redis, bundle or catalog", kind)
	}
	if err != nil {
		return err
	}
	if err := images.Save(*out, *name, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", *name, digest)
	return nil
}
