package images

import (
	"fmt"
	"io/fs"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BusyboxBinary is where Debian's busybox-static puts its static busybox: the shell and tools
// of the images below, as Docker Hub's busybox and distroless/static:debug hold them.
const BusyboxBinary = "/bin/busybox"

// BusyboxImage is the name of the busybox image built here. operator-sdk's pods run it where the
// SDK's defaults name images with a shell that are not built here: run bundle's decompression
// init container (--decompression-image; ubi9 by default) and the scorecard's untar init
// container (--untar-image; scorecard-untar by default): sh, gzip, cat and tar are all they use.
const BusyboxImage = "docker.io/library/busybox:1.35"

// UBIStandInImage is operator-sdk's default image for the registry pod's init container
// (fbcutil.DefaultInitImage, ubi9, which cannot be had here), under which the busybox image is
// published too: run bundle-upgrade (v1.42.3) has no flag for it and always runs that image.
const UBIStandInImage = "registry.access.redhat.com/ubi9/ubi:9.8"

// busyboxApplets are the commands the images below run of busybox, each a link to it.
var busyboxApplets = []string{"sh", "cat", "gzip", "tar", "ls", "mkdir", "rm", "cp"}

// busyboxFiles lays busybox out in dir with a link per applet.
func busyboxFiles(dir string) ([]File, error) {
	if err := requireStatic(BusyboxBinary); err != nil {
		return nil, fmt.Errorf("%w (Debian package busybox-static)", err)
	}
	files := []File{{Path: dir, Mode: fs.ModeDir | 0o755}, {Path: filepath.Join(dir, "busybox"), Mode: 0o755, Source: BusyboxBinary}}
	for _, applet := range busyboxApplets {
		files = append(files, File{Path: filepath.Join(dir, applet), Mode: fs.ModeSymlink | 0o777, Link: "busybox"})
	}
	return files, nil
}

// Busybox is the busybox image: busybox in /bin, a link to it per applet, run as nonroot
// (65532), as the SDK's scorecard-untar image runs as a user of its own: operator-sdk scorecard
// --pod-security=restricted runs its init container with runAsNonRoot.
func Busybox() (v1.Image, error) {
	files, err := busyboxFiles("/bin")
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777})
	return imageOf(files, v1.Config{Cmd: []string{"sh"}, WorkingDir: "/", Env: []string{"PATH=/bin"},
		User: fmt.Sprintf("%d:%d", NonRootUID, NonRootUID)})
}

// withBusybox adds busybox under /busybox to img, on its PATH, as distroless/static:debug has it
// (the base of the published opm images: operator-sdk run bundle's registry pod runs
// `sh -c "opm serve ..."` in the opm image).
func withBusybox(img v1.Image) (v1.Image, error) {
	files, err := busyboxFiles("/busybox")
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	config := *cf.Config.DeepCopy()
	for i, env := range config.Env {
		if len(env) > 5 && env[:5] == "PATH=" {
			config.Env[i] = env + ":/busybox"
		}
	}
	return appendLayer(img, files, config)
}

// EmptyIndex is an index image that holds no package: opm's image (OPM) with an empty /configs,
// labelled as a file-based catalog. operator-sdk run bundle needs one for --index-image: it adds
// the bundle to the index image's catalog, and it takes only its default index image
// (quay.io/operator-framework/opm:latest, pulled from quay.io) as an empty catalog without the label.
func EmptyIndex(opmImage v1.Image) (v1.Image, error) {
	cf, err := opmImage.ConfigFile()
	if err != nil {
		return nil, err
	}
	config := *cf.Config.DeepCopy()
	if config.Labels == nil {
		config.Labels = map[string]string{}
	}
	config.Labels["operators.operatorframework.io.index.configs.v1"] = "/configs"
	return appendLayer(opmImage, []File{{Path: "/configs", Mode: fs.ModeDir | 0o755, UID: OPMUID, GID: OPMUID}}, config)
}
