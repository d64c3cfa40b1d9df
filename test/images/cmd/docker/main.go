// Command docker stands in for the docker CLI where operator-sdk's multiarch validator calls it
// (`operator-sdk bundle validate --select-optional name=multiarch` runs `docker pull IMAGE` and
// `docker manifest inspect IMAGE` for each image of the CSV, to learn the platforms each
// supports). No container engine runs here; the images are built here instead, as OCI layouts
// under $IMAGES_DIR (make operator-image redis-image), and this answers those two commands from
// them: pull succeeds for an image built here, and manifest inspect prints the platforms of its
// configuration as a manifest list does. Anything else, or an image not built here, fails, so
// the validator warns as it would of an image it cannot inspect.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/org/redis-operator/test/images"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "docker (the images built here):", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "pull":
		_, err := builtHere(args[1])
		return err
	case len(args) == 3 && args[0] == "manifest" && args[1] == "inspect":
		img, err := builtHere(args[2])
		if err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		type platform struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		}
		type manifest struct {
			Platform platform `json:"platform"`
		}
		list := struct {
			Manifests []manifest `json:"manifests"`
		}{Manifests: []manifest{{Platform: platform{OS: cf.OS, Architecture: cf.Architecture}}}}
		return json.NewEncoder(os.Stdout).Encode(list)
	default:
		return fmt.Errorf("only `pull IMAGE` and `manifest inspect IMAGE` are answered, not %q", args)
	}
}

// builtHere is the image named image among the OCI layouts under $IMAGES_DIR.
func builtHere(image string) (v1.Image, error) {
	want, err := name.ParseReference(image)
	if err != nil {
		return nil, err
	}
	dir := os.Getenv("IMAGES_DIR")
	if dir == "" {
		return nil, errors.New("IMAGES_DIR names no directory of images")
	}
	layouts, err := filepath.Glob(filepath.Join(dir, "*", "index.json"))
	if err != nil {
		return nil, err
	}
	for _, index := range layouts {
		named, img, err := images.Load(filepath.Dir(index))
		if err != nil {
			continue
		}
		if ref, err := name.ParseReference(named); err == nil && ref.Name() == want.Name() {
			return img, nil
		}
	}
	return nil, fmt.Errorf("%s is not among the images built here (%s)", image, dir)
}
