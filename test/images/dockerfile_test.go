package images_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/testenv"
)

// contentsOf reads an image's regular files: path -> bytes.
func contentsOf(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		if hdr.Typeflag == tar.TypeReg {
			var buf bytes.Buffer
			_, err := io.Copy(&buf, tr)
			require.NoError(t, err)
			out["/"+strings.TrimPrefix(hdr.Name, "./")] = buf.Bytes()
		}
	}
}

// The bundle image holds what bundle.Dockerfile copies, byte for byte, and its labels are the
// bundle's annotations: what OLM's unpack reads.
func TestTheBundleImageIsWhatBundleDockerfileDescribes(t *testing.T) {
	// The builder stages the image's files in a temporary directory: the test's own.
	t.Setenv("TMPDIR", t.TempDir())
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	img, err := images.Bundle(root)
	require.NoError(t, err)

	files := contentsOf(t, img)
	for _, sub := range []string{"manifests", "metadata", filepath.Join("tests", "scorecard")} {
		entries, err := os.ReadDir(filepath.Join(root, "bundle", sub))
		require.NoError(t, err)
		for _, e := range entries {
			want, err := os.ReadFile(filepath.Join(root, "bundle", sub, e.Name()))
			require.NoError(t, err)
			assert.Equal(t, want, files["/"+filepath.ToSlash(filepath.Join(sub, e.Name()))], "/%s/%s", sub, e.Name())
		}
	}
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "bundle", "metadata", "annotations.yaml"))
	require.NoError(t, err)
	var annotations struct {
		Annotations map[string]string `json:"annotations"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &annotations))
	assert.Equal(t, annotations.Annotations, cf.Config.Labels, "the image's labels are the bundle's annotations")
}

// The catalog image serves catalog/ with opm, its cache built in: what a CatalogSource's
// registry pod (OLM v0) and a ClusterCatalog (OLM v1) pull.
func TestTheCatalogImageIsWhatCatalogDockerfileDescribes(t *testing.T) {
	// The builder stages the image's files in a temporary directory: the test's own.
	t.Setenv("TMPDIR", t.TempDir())
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	opm := filepath.Join(root, "bin", "opm")
	if _, err := os.Stat(opm); err != nil {
		t.Skip("bin/opm is not built (make opm): make test builds it")
	}
	img, err := images.Catalog(root, opm, "")
	require.NoError(t, err)

	files := contentsOf(t, img)
	want, err := os.ReadFile(filepath.Join(root, "catalog", "redis-operator", "catalog.yaml"))
	require.NoError(t, err)
	assert.Equal(t, want, files["/configs/redis-operator/catalog.yaml"])
	assert.Contains(t, files, "/bin/opm")
	var cached int
	for p := range files {
		if strings.HasPrefix(p, "/tmp/cache/") {
			cached++
		}
	}
	assert.Positive(t, cached, "opm's cache of /configs is in the image")
	headers := filesOf(t, img)
	require.Contains(t, headers, "/tmp/cache")
	// opm takes a lock in its cache when it serves: the cache belongs to the user it runs as,
	// opm's user, which OLM's registry pods run as.
	assert.Equal(t, images.OPMUID, headers["/tmp/cache/pogreb.v1/db"].Uid, "the cache RUN made is the image user's")
	assert.Equal(t, 0, headers["/configs/redis-operator/catalog.yaml"].Uid, "what ADD copied is root's")
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/bin/opm"}, cf.Config.Entrypoint)
	assert.Equal(t, []string{"serve", "/configs", "--cache-dir=/tmp/cache"}, cf.Config.Cmd)
	assert.Equal(t, "/configs", cf.Config.Labels["operators.operatorframework.io.index.configs.v1"])
}

// What the builder does not know is refused with the line, not built half.
func TestAnInstructionTheBuilderDoesNotKnowIsRefused(t *testing.T) {
	// The builder stages the image's files in a temporary directory: the test's own.
	t.Setenv("TMPDIR", t.TempDir())
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	require.NoError(t, os.WriteFile(df, []byte("FROM scratch\nRUN apt-get install -y redis\n"), 0o600))
	_, err := images.FromDockerfile(df, images.Build{Context: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Dockerfile:2")
}
