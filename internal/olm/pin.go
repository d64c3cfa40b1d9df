package olm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	imagespec "github.com/opencontainers/image-spec/specs-go/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// A disconnected cluster pulls only from a mirror, and a mirror (oc mirror, an
// ImageDigestMirrorSet) serves images by digest: a release that claims
// features.operators.openshift.io/disconnected names every image it runs by digest, in the
// Deployment, in the RELATED_IMAGE_* variables the operator picks its Redis images from, and in
// relatedImages, the list a mirror copies (OpenShift's catalog checks all three).

// disconnectedFeature is the CSV annotation that claims it.
const disconnectedFeature = "features.operators.openshift.io/disconnected"

// relatedImageEnvPrefix starts the variables that name the images an operator runs besides its
// own (operator-sdk's convention): the bundle lists each in relatedImages.
const relatedImageEnvPrefix = "RELATED_IMAGE_"

// ImageDigests reads the images built here (the OCI layouts that make operator-image and
// redis-image write) and returns each one's digest by its name (canonical, see canonicalName).
func ImageDigests(layoutDirs ...string) (map[string]string, error) {
	digests := map[string]string{}
	for _, dir := range layoutDirs {
		index, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			return nil, fmt.Errorf("reading the image layout %s: %w", dir, err)
		}
		manifest, err := index.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("reading the image layout %s: %w", dir, err)
		}
		for _, desc := range manifest.Manifests {
			ref := desc.Annotations[imagespec.AnnotationRefName]
			if ref == "" {
				return nil, fmt.Errorf("the image layout %s holds an image with no name (%s)", dir, imagespec.AnnotationRefName)
			}
			canonical, err := canonicalName(ref)
			if err != nil {
				return nil, err
			}
			digests[canonical] = desc.Digest.String()
		}
	}
	return digests, nil
}

// canonicalName is image's full name, the one redis:7.2 and docker.io/library/redis:7.2 share.
func canonicalName(image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("parsing the image name %q: %w", image, err)
	}
	return ref.Name(), nil
}

// pinned is image by digest (registry/repository@sha256:...), from digests (ImageDigests); an
// image already named by digest stays as it is.
func pinned(image string, digests map[string]string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("parsing the image name %q: %w", image, err)
	}
	if _, ok := ref.(name.Digest); ok {
		return image, nil
	}
	digest, ok := digests[ref.Name()]
	if !ok {
		return "", fmt.Errorf("no digest of %s: build it first (make operator-image redis-image)", image)
	}
	registry := ref.Context().RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io" // the name users read; go-containerregistry's is index.docker.io
	}
	return registry + "/" + ref.Context().RepositoryStr() + "@" + digest, nil
}

// isPinned says whether image names a digest.
func isPinned(image string) bool {
	ref, err := name.ParseReference(image)
	if err != nil {
		return false
	}
	_, ok := ref.(name.Digest)
	return ok
}

// pinImages names every image of the CSV by digest and claims the disconnected feature.
func pinImages(csv *operatorsv1alpha1.ClusterServiceVersion, digests map[string]string) error {
	pin := func(image *string) error {
		p, err := pinned(*image, digests)
		*image = p
		return err
	}
	for i := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		pod := &csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[i].Spec.Template.Spec
		for _, containers := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
			for j := range containers {
				if err := pin(&containers[j].Image); err != nil {
					return err
				}
				for k := range containers[j].Env {
					if strings.HasPrefix(containers[j].Env[k].Name, relatedImageEnvPrefix) {
						if err := pin(&containers[j].Env[k].Value); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	for i := range csv.Spec.RelatedImages {
		if err := pin(&csv.Spec.RelatedImages[i].Image); err != nil {
			return err
		}
	}
	image := csv.Annotations["containerImage"]
	if err := pin(&image); err != nil {
		return err
	}
	csv.Annotations["containerImage"] = image
	csv.Annotations[disconnectedFeature] = "true"
	return nil
}

// disconnectedProblems checks a CSV that claims the disconnected feature as OpenShift's catalog
// does: every image by digest, and every RELATED_IMAGE_* variable's image in relatedImages.
func disconnectedProblems(csv *operatorsv1alpha1.ClusterServiceVersion) []string {
	if csv.Annotations[disconnectedFeature] != "true" {
		return nil
	}
	var problems []string
	related := map[string]bool{}
	for i, r := range csv.Spec.RelatedImages {
		related[r.Image] = true
		if !isPinned(r.Image) {
			problems = append(problems, fmt.Sprintf("spec.relatedImages[%d] %s is not pinned by digest, which %s: \"true\" asks for", i, r.Image, disconnectedFeature))
		}
	}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
			images := map[string]string{"its image": c.Image}
			for _, env := range c.Env {
				if strings.HasPrefix(env.Name, relatedImageEnvPrefix) {
					images[env.Name] = env.Value
				}
			}
			for what, image := range images {
				if !isPinned(image) {
					problems = append(problems, fmt.Sprintf("Deployment %s, container %s: %s %s is not pinned by digest, which %s: \"true\" asks for", d.Name, c.Name, what, image, disconnectedFeature))
				}
				if !related[image] {
					problems = append(problems, fmt.Sprintf("Deployment %s, container %s: %s %s is not in spec.relatedImages, which a mirror copies", d.Name, c.Name, what, image))
				}
			}
		}
	}
	slices.Sort(problems)
	return problems
}
