package checks

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	registrybundle "github.com/operator-framework/operator-registry/pkg/lib/bundle"
	"github.com/sirupsen/logrus"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The names of operator-sdk's built-in tests, which these functions carry out.
const (
	BasicCheckSpec        = "basic-check-spec"
	OLMBundleValidation   = "olm-bundle-validation"
	OLMCRDsHaveValidation = "olm-crds-have-validation"
	OLMCRDsHaveResources  = "olm-crds-have-resources"
	OLMSpecDescriptors    = "olm-spec-descriptors"
	OLMStatusDescriptors  = "olm-status-descriptors"
)

// bundleChecks are the offline checks that work on a loaded bundle, by test name.
var bundleChecks = map[string]func(*apimanifests.Bundle, *result){
	BasicCheckSpec:        checkSpecBlocks,
	OLMCRDsHaveValidation: checkCRDsHaveValidation,
	OLMCRDsHaveResources:  checkCRDsHaveResources,
	OLMSpecDescriptors:    checkSpecDescriptors,
	OLMStatusDescriptors:  checkStatusDescriptors,
}

// Offline lists the tests that need only the bundle, by name: olm-bundle-validation, which
// reads the directory itself, and the bundle checks.
var Offline = func() map[string]func(bundleDir string) scapiv1alpha3.TestStatus {
	tests := map[string]func(string) scapiv1alpha3.TestStatus{OLMBundleValidation: BundleValidation}
	for name, check := range bundleChecks {
		tests[name] = withBundle(name, check)
	}
	return tests
}()

// OfflineNames are the offline tests in a stable order.
func OfflineNames() []string {
	names := make([]string, 0, len(Offline))
	for n := range Offline {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func withBundle(name string, check func(*apimanifests.Bundle, *result)) func(string) scapiv1alpha3.TestStatus {
	return func(dir string) scapiv1alpha3.TestStatus {
		r := newResult(name)
		b, err := LoadBundle(dir)
		if err != nil {
			r.broken(err)
			return r.status()
		}
		check(b, r)
		return r.status()
	}
}

// CheckBundle runs one offline check on an already loaded bundle (tests use it on altered bundles).
func CheckBundle(name string, b *apimanifests.Bundle) scapiv1alpha3.TestStatus {
	r := newResult(name)
	check, ok := bundleChecks[name]
	if !ok {
		r.broken(fmt.Errorf("no offline check %q on a loaded bundle", name))
		return r.status()
	}
	check(b, r)
	return r.status()
}

// checkSpecBlocks: every example custom resource has a non-empty spec.
func checkSpecBlocks(b *apimanifests.Bundle, r *result) {
	examples, err := Examples(b)
	if err != nil {
		r.broken(err)
		return
	}
	for _, ex := range examples {
		spec, ok, _ := unstructured.NestedMap(ex.Object, "spec")
		if !ok || len(spec) == 0 {
			r.fail("%s %s has no spec", ex.GetKind(), ex.GetName())
		}
	}
	r.logf("checked %d examples", len(examples))
}

// BundleValidation: the bundle's format (operator-registry) and content (operator-framework/api's
// default bundle validators), as the scorecard-test image checks them.
func BundleValidation(dir string) scapiv1alpha3.TestStatus {
	r := newResult(OLMBundleValidation)
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	validator := registrybundle.NewImageValidator(nil, logrus.NewEntry(logger))
	if err := validator.ValidateBundleFormat(dir); err != nil {
		r.fail("bundle format: %v", err)
	}
	if err := validator.ValidateBundleContent(filepath.Join(dir, "manifests")); err != nil {
		r.fail("bundle content: %v", err)
	}
	b, err := LoadBundle(dir)
	if err != nil {
		r.broken(err)
		return r.status()
	}
	objs := []any{b, b.CSV}
	for _, crd := range b.V1CRDs {
		objs = append(objs, crd)
	}
	for _, res := range apivalidation.DefaultBundleValidators.Validate(objs...) {
		for _, e := range res.Errors {
			r.fail("%v", e)
		}
		for _, w := range res.Warnings {
			r.Suggestions = append(r.Suggestions, w.Error())
		}
	}
	return r.status()
}

// checkCRDsHaveValidation: every field of every example is in its CRD's OpenAPI schema.
func checkCRDsHaveValidation(b *apimanifests.Bundle, r *result) {
	examples, err := Examples(b)
	if err != nil {
		r.broken(err)
		return
	}
	for _, ex := range examples {
		version := schemaFor(b, ex)
		if version == nil || version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
			r.fail("no CRD schema for %s", ex.GroupVersionKind())
			continue
		}
		props := version.Schema.OpenAPIV3Schema.Properties
		for _, block := range []string{"spec", "status"} {
			fields, _, _ := unstructured.NestedMap(ex.Object, block)
			for key := range fields {
				if _, ok := props[block].Properties[key]; !ok {
					r.fail("%s.%s of %s is not in the CRD's schema", block, key, ex.GetName())
				}
			}
		}
	}
}

// checkCRDsHaveResources: every owned CRD lists the kinds of objects it creates.
func checkCRDsHaveResources(b *apimanifests.Bundle, r *result) {
	for _, owned := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		if len(owned.Resources) == 0 {
			r.fail("owned CRD %s lists no resources", owned.Name)
		}
	}
}

// checkSpecDescriptors: every spec field of every owned CRD's schema has a specDescriptor.
// Stricter than operator-sdk's check, which looks only at the fields the examples set.
func checkSpecDescriptors(b *apimanifests.Bundle, r *result) {
	checkDescriptors(b, r, "spec", func(d operatorsv1alpha1.CRDDescription) []string {
		var paths []string
		for _, s := range d.SpecDescriptors {
			paths = append(paths, s.Path)
		}
		return paths
	})
}

// checkStatusDescriptors: every status field of every owned CRD's schema has a statusDescriptor.
func checkStatusDescriptors(b *apimanifests.Bundle, r *result) {
	checkDescriptors(b, r, "status", func(d operatorsv1alpha1.CRDDescription) []string {
		var paths []string
		for _, s := range d.StatusDescriptors {
			paths = append(paths, s.Path)
		}
		return paths
	})
}

func checkDescriptors(b *apimanifests.Bundle, r *result, block string, paths func(operatorsv1alpha1.CRDDescription) []string) {
	for _, owned := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		crd := crdNamed(b, owned.Name)
		if crd == nil {
			r.fail("owned CRD %s is not in the bundle", owned.Name)
			continue
		}
		described := map[string]bool{}
		for _, p := range paths(owned) {
			described[p] = true
		}
		for _, v := range crd.Spec.Versions {
			if v.Name != owned.Version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			fields := v.Schema.OpenAPIV3Schema.Properties[block].Properties
			for _, field := range sortedFields(fields) {
				if !described[field] {
					r.fail("%s.%s of %s has no %s descriptor", block, field, owned.Kind, block)
				}
			}
			for p := range described {
				if _, ok := fields[firstSegment(p)]; !ok {
					r.fail("%s descriptor %q of %s names no field of its schema", block, p, owned.Kind)
				}
			}
		}
	}
}

func schemaFor(b *apimanifests.Bundle, ex unstructured.Unstructured) *apiextv1.CustomResourceDefinitionVersion {
	gvk := ex.GroupVersionKind()
	for _, crd := range b.V1CRDs {
		if crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind {
			continue
		}
		for i, v := range crd.Spec.Versions {
			if v.Name == gvk.Version {
				return &crd.Spec.Versions[i]
			}
		}
	}
	return nil
}

func crdNamed(b *apimanifests.Bundle, name string) *apiextv1.CustomResourceDefinition {
	for _, crd := range b.V1CRDs {
		if crd.Name == name {
			return crd
		}
	}
	return nil
}

func sortedFields(m map[string]apiextv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func firstSegment(path string) string {
	for i, c := range path {
		if c == '.' || c == '[' {
			return path[:i]
		}
	}
	return path
}
