// Package images builds the local cluster's container images without a container engine, the
// way ko builds Go images: layers are tar files written here, assembled with go-containerregistry
// into OCI images, saved as OCI layouts under bin/images and pushed to the harness's registry.
//
//   - Operator: what Dockerfile describes. The static manager at /manager, user 65532:65532, no
//     shell, on a root filesystem that holds only what distroless/static:nonroot holds for it
//     (passwd and group entries, CA certificates for S3 over HTTPS, /tmp, the user's home).
//   - Redis: a Debian root filesystem with Debian's redis-server and redis-tools, made from
//     Debian's packages by debootstrap (hack/redis-rootfs.sh), with the redis user at uid 999, as
//     the official image has it and the StatefulSet runs it.
//   - Pause: the sandbox container the CRI starts first, a static Go program (./pause).
//
// Layers are reproducible: the same inputs give the same digest (times are the epoch, entries
// sorted), so a cached image is rebuilt only when what it holds changed.
package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	imagespec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The operator image's user, as distroless's nonroot and Dockerfile's USER.
const (
	NonRootUID = 65532
	// RedisUID is the redis user of the Redis image, the uid the StatefulSet runs Redis as.
	RedisUID = 999
)

// epoch is every entry's time: layers are reproducible.
var epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer.
type File struct {
	Path     string // absolute, in the image
	Mode     fs.FileMode
	UID, GID int
	Data     []byte // a regular file's content
	Source   string // or the host file it is copied from
	Link     string // a symbolic link's target
}

// Operator is the operator's image around manager, a statically linked build of ./cmd.
func Operator(manager string) (v1.Image, error) {
	return Static(map[string]string{"/manager": manager}, []string{"/manager"})
}

// Static is an image of statically linked binaries (a path in the image for each host file) on
// what distroless/static:nonroot holds for them (passwd and group entries, CA certificates for
// HTTPS, /tmp, the user's home), run as nonroot (65532) with entrypoint: the operator's, and the
// tools' images the local cluster needs (opm, the scorecard tests).
func Static(binaries map[string]string, entrypoint []string) (v1.Image, error) {
	files := []File{
		{Path: "/etc", Mode: fs.ModeDir | 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/home", Mode: fs.ModeDir | 0o755},
		{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: NonRootUID, GID: NonRootUID},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	dirs := map[string]bool{"/": true, "/etc": true, "/home": true, "/tmp": true}
	for _, path := range slices.Sorted(maps.Keys(binaries)) {
		if err := requireStatic(binaries[path]); err != nil {
			return nil, err
		}
		var parents []File
		for dir := filepath.Dir(path); !dirs[dir]; dir = filepath.Dir(dir) {
			dirs[dir] = true
			parents = append([]File{{Path: dir, Mode: fs.ModeDir | 0o755}}, parents...)
		}
		files = append(append(files, parents...), File{Path: path, Mode: 0o755, Source: binaries[path]})
	}
	certs, err := caCertificates()
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: "/etc/ssl", Mode: fs.ModeDir | 0o755}, File{Path: "/etc/ssl/certs", Mode: fs.ModeDir | 0o755},
		File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: certs})
	return imageOf(files, v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		Entrypoint: entrypoint,
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	})
}

// caCertificates is the machine's CA bundle (Debian's ca-certificates), which distroless
// ships too.
func caCertificates() (string, error) {
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(bundle); err != nil {
		return "", fmt.Errorf("the operator image needs the CA certificates at %s (Debian package ca-certificates): %w", bundle, err)
	}
	return bundle, nil
}

// Pause is the sandbox image around pause, a statically linked build of ./pause.
func Pause(pause string) (v1.Image, error) {
	if err := requireStatic(pause); err != nil {
		return nil, err
	}
	return imageOf([]File{{Path: "/pause", Mode: 0o755, Source: pause}}, v1.Config{
		User: "65535:65535", Entrypoint: []string{"/pause"}, WorkingDir: "/",
	})
}

// Redis is the Redis image of the Debian root filesystem rootfs (made by hack/redis-rootfs.sh).
func Redis(rootfs string) (v1.Image, error) {
	for _, want := range []string{"usr/bin/redis-server", "usr/bin/redis-cli"} {
		if _, err := os.Stat(filepath.Join(rootfs, want)); err != nil {
			return nil, fmt.Errorf("%s is not a Redis root filesystem (no /%s): run make images", rootfs, want)
		}
	}
	files, err := treeOf(rootfs)
	if err != nil {
		return nil, err
	}
	return imageOf(files, v1.Config{
		User:         fmt.Sprintf("%d:%d", RedisUID, RedisUID),
		Cmd:          []string{"redis-server"},
		WorkingDir:   "/data",
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		ExposedPorts: map[string]struct{}{"6379/tcp": {}},
	})
}

// treeOf lists the entries of a root filesystem: directories, regular files and links, with
// their owners and modes. Devices, sockets and pipes are left out (the runtime gives /dev),
// and so are the contents of /dev, /proc, /sys and /run.
func treeOf(root string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		inImage := "/" + filepath.ToSlash(rel)
		for _, virtual := range []string{"/dev/", "/proc/", "/sys/", "/run/"} {
			if strings.HasPrefix(inImage+"/", virtual) && inImage+"/" != virtual {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner", path)
		}
		f := File{Path: inImage, Mode: info.Mode(), UID: int(st.Uid), GID: int(st.Gid)}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(path); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			f.Source = path
		case info.IsDir():
		default:
			return nil
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

// imageOf is a one-layer linux/amd64 image of files with config.
func imageOf(files []File, config v1.Config) (v1.Image, error) {
	return appendLayer(mutate.MediaType(empty.Image, types.OCIManifestSchema1), files, config)
}

// appendLayer is base with files as one more layer, as a linux/amd64 image with config.
func appendLayer(base v1.Image, files []File, config v1.Config) (v1.Image, error) {
	data, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = config
	return mutate.ConfigFile(img, cf)
}

// tarOf writes files as a tar stream, parents before children.
func tarOf(files []File) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/") {
			return nil, fmt.Errorf("image path %q is not absolute", f.Path)
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID,
			ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if f.Mode&fs.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if f.Mode&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		var body []byte
		switch {
		case f.Mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case f.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f.Link
		default:
			hdr.Typeflag = tar.TypeReg
			body = f.Data
			if f.Source != "" {
				var err error
				if body, err = os.ReadFile(f.Source); err != nil {
					return nil, err
				}
			}
			hdr.Size = int64(len(body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BuildStatic builds the Go package pkg (a path or ./relative to dir) into out, statically
// linked and stripped, as make images does: the binary its image needs. ldflags are added to
// the linker's (-X main.version=...).
func BuildStatic(dir, pkg, out string, ldflags ...string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+strings.Join(append([]string{"-s", "-w"}, ldflags...), " "), "-o", out, pkg)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, b)
	}
	return nil
}

// requireStatic refuses a binary that needs a dynamic loader: the operator and pause images
// hold no libc.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0 (its image has no libc)", path)
		}
	}
	return nil
}

// Save writes img to dir as an OCI image layout of one image, named name (its
// org.opencontainers.image.ref.name annotation). What dir held is replaced.
func Save(dir, name string, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing image layout %s: %w", dir, err)
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{imagespec.AnnotationRefName: name}))
}

// Load reads the image Save wrote to dir, and its name.
func Load(dir string) (string, v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", nil, fmt.Errorf("no image at %s (make images builds them): %w", dir, err)
	}
	index, err := p.ImageIndex()
	if err != nil {
		return "", nil, err
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return "", nil, err
	}
	if len(manifest.Manifests) != 1 {
		return "", nil, fmt.Errorf("%s holds %d images, not one", dir, len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	img, err := p.Image(desc.Digest)
	if err != nil {
		return "", nil, err
	}
	return desc.Annotations[imagespec.AnnotationRefName], img, nil
}
