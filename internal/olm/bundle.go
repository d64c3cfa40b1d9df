// Package olm finishes the OLM bundle that `operator-sdk generate bundle` writes with what the CLI
// cannot know, turns the bundle into a file-based catalog entry, and writes a release's pull
// requests to the community catalogs. The output holds no clock and no map-order randomness:
// finishing twice gives the same bytes.
package olm

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Release is what `make bundle` knows of the release and `operator-sdk generate bundle` does not
// take: the base CSV under config/manifests holds what every release shares, these what one
// release says.
type Release struct {
	Version   string // x.y.z: the version the CLI was handed
	Image     string // the operator image
	Replaces  string // the CSV this one replaces in the upgrade graph, if any
	SkipRange string // olm.skipRange, e.g. ">=0.1.0 <0.2.0", if any
	// CreatedAt is fixed per release (RFC 3339): the CLI writes the clock's time, which would
	// change the committed bundle at every `make bundle`.
	CreatedAt string
	Icon      []byte // SVG
	// Digests, when set, are the digests of the images built here by name (ImageDigests): every
	// image of the CSV is then named by digest, and the CSV claims the disconnected feature.
	Digests map[string]string
}

const (
	// BundleDir is where the bundle is, under the repository (or a pinned release's) root.
	BundleDir    = "bundle"
	manifestsDir = "manifests"
	metadataDir  = "metadata"
	scorecardDir = "tests/scorecard"
	dockerfile   = "bundle.Dockerfile"
	// operatorImageName is the operator image's name in relatedImages.
	operatorImageName = "redis-operator"
)

// FinishBundle completes the bundle under root (bundle/ and bundle.Dockerfile, as the CLI wrote
// them) with rel. It is idempotent: a finished bundle finished again is unchanged.
func FinishBundle(root string, rel Release) error {
	if rel.Version == "" || rel.Image == "" || rel.CreatedAt == "" {
		return fmt.Errorf("a release needs its version, image and creation time")
	}
	matches, err := filepath.Glob(filepath.Join(root, BundleDir, manifestsDir, "*.clusterserviceversion.yaml"))
	if err != nil || len(matches) != 1 {
		return fmt.Errorf("want one CSV under %s, found %d (run operator-sdk generate bundle first)", filepath.Join(root, BundleDir, manifestsDir), len(matches))
	}
	raw, err := os.ReadFile(matches[0])
	if err != nil {
		return err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(raw, csv); err != nil {
		return fmt.Errorf("decoding %s: %w", matches[0], err)
	}
	if got := csv.Spec.Version.String(); got != rel.Version {
		return fmt.Errorf("the CSV is version %s, the release %s: generate the bundle with --version %s", got, rel.Version, rel.Version)
	}
	stampRelease(csv, rel)
	scopePermissions(&csv.Spec.InstallStrategy.StrategySpec)
	if rel.Digests != nil {
		if err := pinImages(csv, rel.Digests); err != nil {
			return err
		}
	}
	out, err := marshalClean(csv)
	if err != nil {
		return err
	}
	if err := os.WriteFile(matches[0], out, 0o644); err != nil {
		return err
	}
	if csv.Spec.MinKubeVersion == "" {
		return nil
	}
	versions, err := openShiftVersions(csv.Spec.MinKubeVersion)
	if err != nil {
		return err
	}
	return addOpenShiftVersionsLabel(root, versions)
}

// stampRelease writes the release's own fields into the CSV.
func stampRelease(csv *operatorsv1alpha1.ClusterServiceVersion, rel Release) {
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	csv.Annotations["containerImage"] = rel.Image
	csv.Annotations["createdAt"] = rel.CreatedAt
	if rel.SkipRange != "" {
		csv.Annotations["olm.skipRange"] = rel.SkipRange
	}
	csv.Spec.Replaces = rel.Replaces
	if len(rel.Icon) > 0 {
		csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(rel.Icon), MediaType: "image/svg+xml"}}
	}
	// The CLI lists the RELATED_IMAGE_* variables' images; a mirror copies relatedImages, and
	// the operator's own image is one of them.
	if !slices.ContainsFunc(csv.Spec.RelatedImages, func(r operatorsv1alpha1.RelatedImage) bool { return r.Name == operatorImageName }) {
		csv.Spec.RelatedImages = append([]operatorsv1alpha1.RelatedImage{{Name: operatorImageName, Image: rel.Image}}, csv.Spec.RelatedImages...)
	}
}

// scopePermissions moves the rules on namespaced resources from clusterPermissions into
// permissions. The CLI makes every rule of a ClusterRole bound by a ClusterRoleBinding a cluster
// permission; but OLM grants permissions in the OperatorGroup's target namespaces (cluster-wide
// only when it targets every namespace), so an operator installed for one namespace then holds no
// namespaced right outside it. Only the rules on cluster-scoped resources (reading nodes, the
// metrics endpoint's reviews) stay cluster permissions.
func scopePermissions(strategy *operatorsv1alpha1.StrategyDetailsDeployment) {
	var cluster []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, p := range strategy.ClusterPermissions {
		namespaced, clusterRules := splitByScope(p.Rules)
		if len(namespaced) > 0 {
			i := slices.IndexFunc(strategy.Permissions, func(q operatorsv1alpha1.StrategyDeploymentPermissions) bool {
				return q.ServiceAccountName == p.ServiceAccountName
			})
			if i < 0 {
				strategy.Permissions = append(strategy.Permissions, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: p.ServiceAccountName})
				i = len(strategy.Permissions) - 1
			}
			strategy.Permissions[i].Rules = append(strategy.Permissions[i].Rules, namespaced...)
		}
		if len(clusterRules) > 0 {
			cluster = append(cluster, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: p.ServiceAccountName, Rules: clusterRules})
		}
	}
	strategy.ClusterPermissions = cluster
}

// clusterScoped are the resources, by API group, that live outside namespaces and that an
// operator might be granted.
var clusterScoped = map[string][]string{
	"":                             {"nodes", "namespaces", "persistentvolumes", "componentstatuses"},
	"apiextensions.k8s.io":         {"customresourcedefinitions"},
	"apiregistration.k8s.io":       {"apiservices"},
	"rbac.authorization.k8s.io":    {"clusterroles", "clusterrolebindings"},
	"storage.k8s.io":               {"storageclasses", "csidrivers", "csinodes", "volumeattachments"},
	"admissionregistration.k8s.io": {"*"},
	"certificates.k8s.io":          {"certificatesigningrequests"},
	"authentication.k8s.io":        {"tokenreviews"},
	"authorization.k8s.io":         {"subjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"},
	"scheduling.k8s.io":            {"priorityclasses"},
	"node.k8s.io":                  {"runtimeclasses"},
}

// splitByScope parts rules into those on namespaced resources and those on cluster-scoped ones
// (or on every resource, or on URLs), a rule naming both split in two with the same verbs.
func splitByScope(rules []rbacv1.PolicyRule) (namespaced, cluster []rbacv1.PolicyRule) {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || slices.Contains(r.APIGroups, "*") {
			cluster = append(cluster, r)
			continue
		}
		var ns, cs []string
		for _, res := range r.Resources {
			if clusterScopedIn(r.APIGroups, res) {
				cs = append(cs, res)
			} else {
				ns = append(ns, res)
			}
		}
		if len(ns) > 0 {
			n := *r.DeepCopy()
			n.Resources = ns
			namespaced = append(namespaced, n)
		}
		if len(cs) > 0 {
			c := *r.DeepCopy()
			c.Resources = cs
			cluster = append(cluster, c)
		}
	}
	return namespaced, cluster
}

// clusterScopedIn is true when res is cluster-scoped in any of groups (or is every resource).
func clusterScopedIn(groups []string, res string) bool {
	if res == "*" {
		return true
	}
	for _, g := range groups {
		for _, cs := range clusterScoped[g] {
			if cs == "*" || cs == strings.SplitN(res, "/", 2)[0] {
				return true
			}
		}
	}
	return false
}

// openShiftVersionsLabel says which OpenShift releases the bundle is for: OpenShift's community
// catalog asks for it whenever the CSV sets minKubeVersion, and the CLI does not write it.
const openShiftVersionsLabel = "com.redhat.openshift.versions"

// openShiftVersions is the OpenShift releases a bundle with this minKubeVersion runs on, in the
// label's form ("v4.17": 4.17 and later). OpenShift 4.N ships Kubernetes 1.(N+13): 4.17 has 1.30.
func openShiftVersions(minKubeVersion string) (string, error) {
	v, err := semver.ParseTolerant(minKubeVersion)
	if err != nil {
		return "", fmt.Errorf("minKubeVersion %q: %w", minKubeVersion, err)
	}
	if v.Major != 1 || v.Minor < 14 {
		return "", fmt.Errorf("minKubeVersion %q: no OpenShift 4 release ships it", minKubeVersion)
	}
	return fmt.Sprintf("v4.%d", v.Minor-13), nil
}

// addOpenShiftVersionsLabel adds the label to the bundle's annotations and to its image's labels
// (the two must agree), after the CLI's own, keeping the CLI's layout.
func addOpenShiftVersionsLabel(root, versions string) error {
	edits := []struct {
		path, line string
		after      func(string) bool
	}{
		{filepath.Join(root, BundleDir, metadataDir, "annotations.yaml"), "  " + openShiftVersionsLabel + ": " + versions,
			func(l string) bool { return strings.HasPrefix(l, "  ") && strings.Contains(l, ": ") }},
		{filepath.Join(root, dockerfile), "LABEL " + openShiftVersionsLabel + "=" + versions,
			func(l string) bool { return strings.HasPrefix(l, "LABEL ") }},
	}
	for _, e := range edits {
		raw, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(raw), "\n")
		lines = slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, openShiftVersionsLabel) })
		last := -1
		for i, l := range lines {
			if e.after(l) {
				last = i
			}
		}
		if last < 0 {
			return fmt.Errorf("%s has no label to add %s after", e.path, openShiftVersionsLabel)
		}
		lines = slices.Insert(lines, last+1, e.line)
		if err := os.WriteFile(e.path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// marshalClean encodes a typed object without the empty fields its Go type always carries.
func marshalClean(obj any) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	deployments, _, _ := unstructured.NestedSlice(u, "spec", "install", "spec", "deployments")
	for _, d := range deployments {
		m := d.(map[string]any)
		unstructured.RemoveNestedField(m, "spec", "template", "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(m, "spec", "strategy")
	}
	if deployments != nil {
		if err := unstructured.SetNestedSlice(u, deployments, "spec", "install", "spec", "deployments"); err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(u)
}
