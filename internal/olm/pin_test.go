package olm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	imagespec "github.com/opencontainers/image-spec/specs-go/v1"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/olm"
)

// imageLayout writes an image named name as make operator-image and redis-image do (an OCI
// layout, the name in org.opencontainers.image.ref.name) and returns the layout and the digest.
func imageLayout(t *testing.T, name string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	img, err := random.Image(256, 1)
	require.NoError(t, err)
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{imagespec.AnnotationRefName: name})))
	digest, err := img.Digest()
	require.NoError(t, err)
	return dir, digest.String()
}

// A release for disconnected clusters: given the images built here, make bundle-pinned names
// every image of the CSV by digest (the operator's, the Redis image the operator runs without
// spec.image, relatedImages), claims the disconnected feature, and passes the validators and
// OpenShift's gates; the same bundle with one image by tag fails the gate, naming it.
func TestAPinnedBundleNamesEveryImageByDigest(t *testing.T) {
	root := repoRoot(t)
	committed := loadBundle(t).CSV
	operatorLayout, operatorDigest := imageLayout(t, committed.Annotations["containerImage"])
	redisLayout, redisDigest := imageLayout(t, "docker.io/library/redis:7.2")
	digests, err := olm.ImageDigests(operatorLayout, redisLayout)
	require.NoError(t, err)

	// make bundle-pinned: the committed bundle, finished again with the images' digests.
	out := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(out, "bundle"), os.DirFS(filepath.Join(root, "bundle"))))
	dockerfile, err := os.ReadFile(filepath.Join(root, "bundle.Dockerfile"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "bundle.Dockerfile"), dockerfile, 0o644))
	rel := olm.Release{
		Version: committed.Spec.Version.String(), Image: committed.Annotations["containerImage"],
		CreatedAt: committed.Annotations["createdAt"], Digests: digests,
	}
	require.NoError(t, olm.FinishBundle(out, rel))
	bundle, err := apimanifests.GetBundleFromDir(filepath.Join(out, "bundle", "manifests"))
	require.NoError(t, err)

	csv := bundle.CSV
	pinnedOperator, pinnedRedis := "example.com/redis-operator@"+operatorDigest, "docker.io/library/redis@"+redisDigest
	assert.Equal(t, "true", csv.Annotations["features.operators.openshift.io/disconnected"])
	assert.Equal(t, pinnedOperator, csv.Annotations["containerImage"])
	manager := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
	assert.Equal(t, pinnedOperator, manager.Image)
	env := map[string]string{}
	for _, e := range manager.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, pinnedRedis, env["RELATED_IMAGE_REDIS_7_2"], "redis:7.2 is docker.io/library/redis:7.2")
	var related []string
	for _, r := range csv.Spec.RelatedImages {
		related = append(related, r.Name+"="+r.Image)
	}
	assert.ElementsMatch(t, []string{"redis-operator=" + pinnedOperator, "redis-7-2=" + pinnedRedis}, related)

	problems, err := olm.BundleGateProblems(filepath.Join(out, "bundle"))
	require.NoError(t, err)
	assert.Empty(t, problems)
	assertPassesTheOperatorFrameworkValidators(t, bundle)

	// A Redis image named by tag in a bundle that claims disconnected
	csvPath := filepath.Join(out, "bundle", "manifests", "redis-operator.clusterserviceversion.yaml")
	editYAML(t, csvPath, func(doc map[string]any) {
		deployment := spec(doc)["install"].(map[string]any)["spec"].(map[string]any)["deployments"].([]any)[0].(map[string]any)
		container := spec(spec(deployment)["template"].(map[string]any))["containers"].([]any)[0].(map[string]any)
		for _, e := range container["env"].([]any) {
			if e.(map[string]any)["name"] == "RELATED_IMAGE_REDIS_7_2" {
				e.(map[string]any)["value"] = "redis:7.2"
			}
		}
	})
	problems, err = olm.BundleGateProblems(filepath.Join(out, "bundle"))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"Deployment redis-operator-controller-manager, container manager: RELATED_IMAGE_REDIS_7_2 redis:7.2 is not in spec.relatedImages, which a mirror copies",
		"Deployment redis-operator-controller-manager, container manager: RELATED_IMAGE_REDIS_7_2 redis:7.2 is not pinned by digest, which features.operators.openshift.io/disconnected: \"true\" asks for",
	}, problems)

	// An image that was not built here cannot be pinned: the release says which
	delete(digests, "index.docker.io/library/redis:7.2")
	require.ErrorContains(t, olm.FinishBundle(out, rel), "no digest of redis:7.2")
}
