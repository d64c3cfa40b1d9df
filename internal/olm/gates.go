package olm

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"sigs.k8s.io/yaml"
)

// The community catalogs' own gates, beyond the operator-framework validators: what
// OpenShift's community-operators-prod pipeline refuses (read from its checks). Each returns
// the problems it finds, in words that name the field; none is a pass.

// requiredFeatures are the features.operators.openshift.io annotations OpenShift's catalog asks
// every CSV to set, each "true" or "false".
var requiredFeatures = []string{"disconnected", "fips-compliant", "proxy-aware", "tls-profiles",
	"token-auth-aws", "token-auth-azure", "token-auth-gcp"}

// iconMediaTypes are the icon types OperatorHub shows.
var iconMediaTypes = []string{"image/svg+xml", "image/png", "image/jpeg", "image/gif"}

// BundleGateProblems checks the bundle directory (manifests/, metadata/) as OpenShift's
// community catalog does: the CSV's required fields, the features annotations, the OpenShift
// versions label when minKubeVersion is set, and no NetworkPolicy.
func BundleGateProblems(dir string) ([]string, error) {
	bundle, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the bundle %s: %w", dir, err)
	}
	csv := bundle.CSV
	if csv == nil {
		return []string{"the bundle has no ClusterServiceVersion"}, nil
	}
	problems := csvFieldProblems(csv)
	for _, f := range requiredFeatures {
		key := "features.operators.openshift.io/" + f
		if v := csv.Annotations[key]; v != "true" && v != "false" {
			problems = append(problems, fmt.Sprintf("metadata.annotations[%s] is %q: \"true\" or \"false\"", key, v))
		}
	}
	problems = append(problems, disconnectedProblems(csv)...)
	if csv.Spec.MinKubeVersion != "" {
		labels, err := readAnnotations(filepath.Join(dir, metadataDir, "annotations.yaml"))
		if err != nil {
			return nil, err
		}
		if labels[openShiftVersionsLabel] == "" {
			problems = append(problems, fmt.Sprintf("metadata/annotations.yaml has no %s, which minKubeVersion %s asks for",
				openShiftVersionsLabel, csv.Spec.MinKubeVersion))
		}
	}
	for _, obj := range bundle.Objects {
		if obj.GetKind() == "NetworkPolicy" {
			problems = append(problems, fmt.Sprintf("the bundle ships NetworkPolicy %s: OpenShift's catalog refuses it", obj.GetName()))
		}
	}
	return problems, nil
}

// csvFieldProblems checks the CSV fields OperatorHub shows and OpenShift's catalog requires.
func csvFieldProblems(csv *operatorsv1alpha1.ClusterServiceVersion) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if n := len(csv.Spec.DisplayName); n < 3 || n > 50 {
		add("spec.displayName has %d characters: 3 to 50", n)
	}
	if n := len(csv.Spec.Description); n < 20 {
		add("spec.description has %d characters: at least 20", n)
	}
	if csv.Annotations["description"] == "" {
		add("metadata.annotations.description (the short description) is empty")
	}
	if len(csv.Spec.Icon) == 0 {
		add("spec.icon is empty")
	}
	for i, icon := range csv.Spec.Icon {
		if _, err := base64.StdEncoding.DecodeString(icon.Data); err != nil || icon.Data == "" {
			add("spec.icon[%d].base64data is not base64 data", i)
		}
		if !slices.Contains(iconMediaTypes, icon.MediaType) {
			add("spec.icon[%d].mediatype %q: one of %v", i, icon.MediaType, iconMediaTypes)
		}
	}
	if _, err := semver.Parse(csv.Spec.Version.String()); err != nil || csv.Spec.Version.String() == "0.0.0" {
		add("spec.version %q is not a release's semantic version", csv.Spec.Version.String())
	}
	if len(csv.Spec.Maintainers) == 0 {
		add("spec.maintainers is empty")
	}
	for i, m := range csv.Spec.Maintainers {
		if m.Name == "" || m.Email == "" {
			add("spec.maintainers[%d] needs a name and an email", i)
		}
	}
	if csv.Spec.Provider.Name == "" {
		add("spec.provider.name is empty")
	}
	if len(csv.Spec.Links) == 0 {
		add("spec.links is empty")
	}
	for i, l := range csv.Spec.Links {
		if l.Name == "" || l.URL == "" {
			add("spec.links[%d] needs a name and a url", i)
		}
	}
	return problems
}

func readAnnotations(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var doc struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return doc.Annotations, nil
}

// CatalogGateProblems checks a file-based catalog as the community catalogs do: every bundle
// has an image and no olm.bundle.object (OpenShift refuses it from 4.17 on: the manifests come
// from the bundle image), and every bundle is an entry of a channel (no dangling bundle).
func CatalogGateProblems(cfg *declcfg.DeclarativeConfig) []string {
	var problems []string
	inChannel := map[string]bool{}
	for _, ch := range cfg.Channels {
		for _, e := range ch.Entries {
			inChannel[e.Name] = true
		}
	}
	for _, b := range cfg.Bundles {
		if b.Image == "" {
			problems = append(problems, fmt.Sprintf("bundle %s has no image", b.Name))
		}
		for _, p := range b.Properties {
			if p.Type == "olm.bundle.object" {
				problems = append(problems, fmt.Sprintf("bundle %s carries its manifests (olm.bundle.object): render with --migrate-level bundle-object-to-csv-metadata", b.Name))
				break
			}
		}
		if !inChannel[b.Name] {
			problems = append(problems, fmt.Sprintf("bundle %s is in no channel", b.Name))
		}
	}
	return problems
}
