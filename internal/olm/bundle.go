// Package olm turns the operator's kustomize output into an OLM bundle, the way
// `operator-sdk generate bundle` does, and the bundle into a file-based catalog entry.
// The output holds no clock and no map-order randomness: generating twice gives the same bytes.
package olm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// BundleOptions are what `make bundle` passes: the release and where its images live.
type BundleOptions struct {
	Package        string   // the OLM package name, e.g. redis-operator
	Version        string   // x.y.z
	Image          string   // the operator image
	Replaces       string   // the CSV this one replaces in the upgrade graph, if any
	SkipRange      string   // olm.skipRange, e.g. ">=0.1.0 <0.2.0", if any
	Channels       []string // channels the bundle is in
	DefaultChannel string
	CreatedAt      string // RFC 3339; fixed per release so that regenerating changes nothing
	Icon           []byte // SVG
	// Digests, when set, are the digests of the images built here by name (ImageDigests): every
	// image of the CSV is then named by digest, and the CSV claims the disconnected feature.
	Digests map[string]string
}

// Bundle is the generated files, by path relative to the repository root.
type Bundle struct {
	Files map[string][]byte
}

const (
	// BundleDir is where the bundle is written.
	BundleDir     = "bundle"
	manifestsDir  = "manifests"
	metadataDir   = "metadata"
	scorecardPath = "tests/scorecard/config.yaml"
	dockerfile    = "bundle.Dockerfile"
	// managerContainer is the Deployment container whose image BundleOptions.Image sets.
	managerContainer = "manager"
)

// manifestParts are the kustomize output, sorted by what the bundle makes of each object.
type manifestParts struct {
	csv       *operatorsv1alpha1.ClusterServiceVersion
	crds      []*unstructured.Unstructured
	samples   []*unstructured.Unstructured
	scorecard *unstructured.Unstructured
	deploys   []appsv1.Deployment
	roles     map[string]*unstructured.Unstructured // kind/name -> role
	bindings  []*unstructured.Unstructured
	others    []*unstructured.Unstructured
	saNames   map[string]bool
}

func sortManifests(objs []*unstructured.Unstructured) (*manifestParts, error) {
	p := &manifestParts{roles: map[string]*unstructured.Unstructured{}, saNames: map[string]bool{}}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		switch {
		case gvk.Kind == "ClusterServiceVersion":
			p.csv = &operatorsv1alpha1.ClusterServiceVersion{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, p.csv); err != nil {
				return nil, fmt.Errorf("decoding the CSV base: %w", err)
			}
		case gvk.Kind == "CustomResourceDefinition":
			p.crds = append(p.crds, obj)
		case gvk.Group == "cache.example.com":
			p.samples = append(p.samples, obj)
		case gvk.Kind == "Configuration" && gvk.Group == "scorecard.operatorframework.io":
			p.scorecard = obj
		case gvk.Kind == "Deployment":
			d := appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
				return nil, fmt.Errorf("decoding Deployment %s: %w", obj.GetName(), err)
			}
			p.deploys = append(p.deploys, d)
		case gvk.Kind == "ServiceAccount":
			p.saNames[obj.GetName()] = true
		case gvk.Kind == "Role" || gvk.Kind == "ClusterRole":
			p.roles[gvk.Kind+"/"+obj.GetName()] = obj
		case gvk.Kind == "RoleBinding" || gvk.Kind == "ClusterRoleBinding":
			p.bindings = append(p.bindings, obj)
		case gvk.Kind == "Namespace":
			// OLM installs into the OperatorGroup's namespace.
		default:
			p.others = append(p.others, obj)
		}
	}
	return p, nil
}

// GenerateBundle builds the bundle from the multi-document output of `kustomize build config/manifests`.
func GenerateBundle(manifests io.Reader, opts BundleOptions) (*Bundle, error) {
	objs, err := decodeAll(manifests)
	if err != nil {
		return nil, err
	}
	parts, err := sortManifests(objs)
	if err != nil {
		return nil, err
	}
	csv, crds, samples, scorecard, deploys := parts.csv, parts.crds, parts.samples, parts.scorecard, parts.deploys
	roles, bindings, others, saNames := parts.roles, parts.bindings, parts.others, parts.saNames
	if csv == nil {
		return nil, errors.New("no ClusterServiceVersion base in the manifests")
	}
	if len(deploys) == 0 {
		return nil, errors.New("no Deployment in the manifests")
	}

	// Bound roles become the CSV's permissions; roles bound to nobody ship as manifests.
	perms, clusterPerms, bound, err := permissionsFromBindings(roles, bindings, saNames)
	if err != nil {
		return nil, err
	}
	for _, key := range sortedKeys(roles) {
		if !bound[key] {
			others = append(others, roles[key])
		}
	}

	if err := fillCSV(csv, opts, deploys, perms, clusterPerms, samples); err != nil {
		return nil, err
	}

	b := &Bundle{Files: map[string][]byte{}}
	csvYAML, err := marshalClean(csv)
	if err != nil {
		return nil, err
	}
	b.Files[filepath.Join(BundleDir, manifestsDir, opts.Package+".clusterserviceversion.yaml")] = csvYAML
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		if err := b.addObject(filepath.Join(BundleDir, manifestsDir, group+"_"+plural+".yaml"), crd); err != nil {
			return nil, err
		}
	}
	for _, obj := range others {
		// OLM creates a bundle's objects in the namespace it installs the operator into; a
		// namespace in the manifest is refused by the bundle validation.
		obj.SetNamespace("")
		gvk := obj.GroupVersionKind()
		group := gvk.Group
		if group == "" {
			group = "core"
		}
		name := fmt.Sprintf("%s_%s_%s_%s.yaml", obj.GetName(), group, gvk.Version, strings.ToLower(gvk.Kind))
		if err := b.addObject(filepath.Join(BundleDir, manifestsDir, name), obj); err != nil {
			return nil, err
		}
	}
	if scorecard != nil {
		if err := b.addObject(filepath.Join(BundleDir, scorecardPath), scorecard); err != nil {
			return nil, err
		}
	}
	labels := bundleLabels(opts, scorecard != nil)
	if csv.Spec.MinKubeVersion != "" {
		versions, err := openShiftVersions(csv.Spec.MinKubeVersion)
		if err != nil {
			return nil, err
		}
		labels = append(labels, [2]string{openShiftVersionsLabel, versions})
	}
	b.Files[filepath.Join(BundleDir, metadataDir, "annotations.yaml")] = annotationsYAML(labels)
	b.Files[dockerfile] = bundleDockerfile(labels, scorecard != nil)
	return b, nil
}

func fillCSV(csv *operatorsv1alpha1.ClusterServiceVersion, opts BundleOptions, deploys []appsv1.Deployment,
	perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions, samples []*unstructured.Unstructured) error {
	version, err := parseVersion(opts.Version)
	if err != nil {
		return err
	}
	csv.Name = opts.Package + ".v" + opts.Version
	csv.Namespace = ""
	csv.Spec.Version = version
	csv.Spec.Replaces = opts.Replaces
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	csv.Annotations["containerImage"] = opts.Image
	csv.Annotations["createdAt"] = opts.CreatedAt
	if opts.SkipRange != "" {
		csv.Annotations["olm.skipRange"] = opts.SkipRange
	}
	examples, err := almExamples(samples)
	if err != nil {
		return err
	}
	csv.Annotations["alm-examples"] = examples
	if len(opts.Icon) > 0 {
		csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(opts.Icon), MediaType: "image/svg+xml"}}
	}

	var specs []operatorsv1alpha1.StrategyDeploymentSpec
	for _, d := range deploys {
		for i, c := range d.Spec.Template.Spec.Containers {
			if c.Name == managerContainer {
				d.Spec.Template.Spec.Containers[i].Image = opts.Image
			}
		}
		specs = append(specs, operatorsv1alpha1.StrategyDeploymentSpec{Name: d.Name, Label: d.Labels, Spec: d.Spec})
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
			DeploymentSpecs:    specs,
			Permissions:        perms,
			ClusterPermissions: clusterPerms,
		},
	}

	var containers []corev1.Container
	for _, d := range deploys {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	csv.Spec.RelatedImages = relatedImages(opts.Image, containers)
	if opts.Digests != nil {
		return pinImages(csv, opts.Digests)
	}
	return nil
}

// permissionsFromBindings turns the roles bound to the operator's service accounts into the
// CSV's permissions (namespaced) and clusterPermissions.
func permissionsFromBindings(roles map[string]*unstructured.Unstructured, bindings []*unstructured.Unstructured,
	serviceAccounts map[string]bool) (perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions, bound map[string]bool, err error) {
	bound = map[string]bool{}
	for _, obj := range bindings {
		binding := rbacv1.RoleBinding{} // the same shape as a ClusterRoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &binding); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		key := binding.RoleRef.Kind + "/" + binding.RoleRef.Name
		role, ok := roles[key]
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s %s refers to %s, which is not in the manifests", obj.GetKind(), obj.GetName(), key)
		}
		var decoded rbacv1.ClusterRole // the same rules as a Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &decoded); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding %s: %w", key, err)
		}
		rules := decoded.Rules
		for _, subject := range binding.Subjects {
			if subject.Kind != rbacv1.ServiceAccountKind || !serviceAccounts[subject.Name] {
				continue
			}
			bound[key] = true
			// Rules on namespaced resources are permissions even when bound cluster-wide: OLM
			// grants them in the OperatorGroup's target namespaces, and cluster-wide (as
			// ClusterRoles) only when it targets every namespace. So an operator installed for one
			// namespace holds no namespaced right outside it; only the rules on cluster-scoped
			// resources (reading nodes) are cluster permissions.
			namespaced, cluster := rules, []rbacv1.PolicyRule(nil)
			if obj.GetKind() == "ClusterRoleBinding" {
				namespaced, cluster = splitByScope(rules)
			}
			if len(namespaced) > 0 {
				perms = append(perms, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: subject.Name, Rules: namespaced})
			}
			if len(cluster) > 0 {
				clusterPerms = append(clusterPerms, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: subject.Name, Rules: cluster})
			}
		}
	}
	return perms, clusterPerms, bound, nil
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

// almExamples is the samples as the JSON array OLM shows users as templates.
func almExamples(samples []*unstructured.Unstructured) (string, error) {
	sort.Slice(samples, func(i, j int) bool { return samples[i].GetName() < samples[j].GetName() })
	var items []map[string]any
	for _, s := range samples {
		obj := s.DeepCopy()
		// kustomize's bookkeeping labels mean nothing to a user copying the example.
		unstructured.RemoveNestedField(obj.Object, "metadata", "labels")
		items = append(items, obj.Object)
	}
	raw, err := json.MarshalIndent(items, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding alm-examples: %w", err)
	}
	return string(raw), nil
}

func bundleLabels(opts BundleOptions, withScorecard bool) [][2]string {
	labels := [][2]string{
		{"operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"},
		{"operators.operatorframework.io.bundle.manifests.v1", manifestsDir + "/"},
		{"operators.operatorframework.io.bundle.metadata.v1", metadataDir + "/"},
		{"operators.operatorframework.io.bundle.package.v1", opts.Package},
		{"operators.operatorframework.io.bundle.channels.v1", strings.Join(opts.Channels, ",")},
		{"operators.operatorframework.io.bundle.channel.default.v1", opts.DefaultChannel},
		{"operators.operatorframework.io.metrics.builder", "redis-operator-olm-gen"},
		{"operators.operatorframework.io.metrics.mediatype.v1", "metrics+v1"},
		{"operators.operatorframework.io.metrics.project_layout", "go.kubebuilder.io/v4"},
	}
	if withScorecard {
		labels = append(labels,
			[2]string{"operators.operatorframework.io.test.mediatype.v1", "scorecard+v1"},
			[2]string{"operators.operatorframework.io.test.config.v1", "tests/scorecard/"})
	}
	return labels
}

// openShiftVersionsLabel says which OpenShift releases the bundle is for: OpenShift's community
// catalog asks for it whenever the CSV sets minKubeVersion.
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

func annotationsYAML(labels [][2]string) []byte {
	var buf bytes.Buffer
	buf.WriteString("annotations:\n")
	for _, l := range labels {
		fmt.Fprintf(&buf, "  %s: %s\n", l[0], l[1])
	}
	return buf.Bytes()
}

func bundleDockerfile(labels [][2]string, withScorecard bool) []byte {
	var buf bytes.Buffer
	buf.WriteString("# Generated by `make bundle`. The bundle image: manifests, metadata and scorecard tests.\nFROM scratch\n\n")
	for _, l := range labels {
		fmt.Fprintf(&buf, "LABEL %s=%s\n", l[0], l[1])
	}
	buf.WriteString("\nCOPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\n")
	if withScorecard {
		buf.WriteString("COPY bundle/tests/scorecard /tests/scorecard/\n")
	}
	return buf.Bytes()
}

// Write replaces the bundle directory and bundle.Dockerfile under root with b's files.
func (b *Bundle) Write(root string) error {
	if err := os.RemoveAll(filepath.Join(root, BundleDir)); err != nil {
		return fmt.Errorf("removing the old bundle: %w", err)
	}
	for _, path := range sortedKeys(b.Files) {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, b.Files[path], 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

func (b *Bundle) addObject(path string, obj *unstructured.Unstructured) error {
	raw, err := yaml.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	b.Files[path] = raw
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

func decodeAll(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func parseVersion(v string) (version.OperatorVersion, error) {
	parsed, err := semver.Parse(v)
	if err != nil {
		return version.OperatorVersion{}, fmt.Errorf("VERSION %q is not semver (x.y.z): %w", v, err)
	}
	return version.OperatorVersion{Version: parsed}, nil
}
