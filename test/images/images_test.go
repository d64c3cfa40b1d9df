package images_test

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/registry"
)

// staticBuild builds pkg as make images does: statically linked.
func staticBuild(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	require.NoError(t, images.BuildStatic(".", pkg, out))
	return out
}

// filesOf reads an image's filesystem: path -> header.
func filesOf(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		files["/"+strings.TrimSuffix(hdr.Name, "/")] = hdr
	}
}

// dockerfile is what Dockerfile's final stage says of the image's user and entrypoint.
func dockerfile(t *testing.T) (user, entrypoint string) {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "USER "); ok {
			user = v
		}
		if v, ok := strings.CutPrefix(s.Text(), "ENTRYPOINT "); ok {
			entrypoint = v
		}
	}
	return user, entrypoint
}

func TestTheOperatorImageIsWhatTheDockerfileDescribes(t *testing.T) {
	manager := staticBuild(t, "github.com/org/redis-operator/cmd")
	img, err := images.Operator(manager)
	require.NoError(t, err)

	cf, err := img.ConfigFile()
	require.NoError(t, err)
	user, entrypoint := dockerfile(t)
	assert.Equal(t, user, cf.Config.User)
	assert.Equal(t, entrypoint, `["`+strings.Join(cf.Config.Entrypoint, `", "`)+`"]`)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, "amd64", cf.Architecture)

	files := filesOf(t, img)
	require.Contains(t, files, "/manager")
	assert.Equal(t, int64(0o755), files["/manager"].Mode)
	info, err := os.Stat(manager)
	require.NoError(t, err)
	assert.Equal(t, info.Size(), files["/manager"].Size)
	for path := range files {
		assert.NotRegexp(t, `(^|/)(sh|bash|dash|busybox)$`, path, "the image has no shell")
	}
	assert.Contains(t, files, "/etc/ssl/certs/ca-certificates.crt", "backups reach S3 over HTTPS")
	assert.Equal(t, images.NonRootUID, files["/home/nonroot"].Uid)
	assert.Equal(t, int64(0o1777), files["/tmp"].Mode)

	// The same binary gives the same image: a cached image is not rebuilt for nothing.
	again, err := images.Operator(manager)
	require.NoError(t, err)
	want, err := img.Digest()
	require.NoError(t, err)
	got, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestADynamicallyLinkedBinaryIsRefused(t *testing.T) {
	// Debian's redis-server links libc: the operator image has none.
	_, err := images.Operator("/usr/bin/redis-server")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dynamically linked: build it with CGO_ENABLED=0")
}

func TestAnImageSavedLoadsAndIsPulledFromTheRegistryUnderItsRealName(t *testing.T) {
	ctx := context.Background()
	img, err := images.Pause(staticBuild(t, "github.com/org/redis-operator/test/images/pause"))
	require.NoError(t, err)
	digest, err := img.Digest()
	require.NoError(t, err)

	dir := filepath.Join(t.TempDir(), "pause")
	const name = "registry.k8s.io/pause:3.10"
	require.NoError(t, images.Save(dir, name, img))
	loadedName, loaded, err := images.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, name, loadedName)
	loadedDigest, err := loaded.Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, loadedDigest)

	reg, err := registry.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Stop()) })
	pushed, err := reg.Push(ctx, loadedName, loaded)
	require.NoError(t, err)
	assert.Equal(t, digest, pushed)
	pulled, err := reg.Pull(ctx, name)
	require.NoError(t, err)
	pulledDigest, err := pulled.Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, pulledDigest)

	// A Docker Hub name is kept as containerd names it (docker.io), under /v2/<registry>/: the
	// path containerd asks a mirror for with override_path.
	_, err = reg.Push(ctx, "redis:7.2", loaded)
	require.NoError(t, err)
	for _, path := range []string{"/v2/registry.k8s.io/pause/manifests/3.10", "/v2/docker.io/library/redis/manifests/7.2"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+reg.Host+path, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Equal(t, digest.String(), resp.Header.Get("Docker-Content-Digest"), path)
	}
}

func TestTheRedisImageKeepsItsRootFilesystemsOwnersAndLeavesOutWhatTheRuntimeGives(t *testing.T) {
	// A root filesystem as hack/redis-rootfs.sh leaves it, in small: the binaries, a link, a
	// directory of the redis user, and what the runtime provides (devices, /proc, /run).
	root := t.TempDir()
	for _, dir := range []string{"usr/bin", "data", "dev", "proc/1", "run/lock", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/redis-server"), []byte("#!server"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/redis-cli"), []byte("#!cli"), 0o755))
	require.NoError(t, os.Symlink("redis-server", filepath.Join(root, "usr/bin/redis-check-rdb")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/1/status"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "run/lock/x"), nil, 0o644))
	require.NoError(t, exec.Command("mkfifo", filepath.Join(root, "dev/fifo")).Run())
	require.NoError(t, os.Chown(filepath.Join(root, "data"), images.RedisUID, images.RedisUID))

	img, err := images.Redis(root)
	require.NoError(t, err)
	files := filesOf(t, img)
	assert.Equal(t, images.RedisUID, files["/data"].Uid)
	assert.Equal(t, images.RedisUID, files["/data"].Gid)
	assert.Equal(t, "redis-server", files["/usr/bin/redis-check-rdb"].Linkname)
	assert.Equal(t, int64(0o755), files["/usr/bin/redis-server"].Mode)
	for _, kept := range []string{"/dev", "/proc", "/run"} {
		assert.Contains(t, files, kept)
	}
	for _, left := range []string{"/dev/fifo", "/proc/1", "/proc/1/status", "/run/lock"} {
		assert.NotContains(t, files, left)
	}
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "999:999", cf.Config.User)

	_, err = images.Redis(t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not a Redis root filesystem")
}
