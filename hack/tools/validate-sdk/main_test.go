package main

import (
	"path/filepath"
	"strings"
	"testing"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/operators/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The gate OperatorHub's pipeline applies: the bundle passes with no warning, and the same
// bundle with a rule on events in events.k8s.io (how controller-runtime's recorder writes
// Events) fails on the deprecated-API warning.
func TestTheBundlePassesAndAnEventsK8sIORuleFails(t *testing.T) {
	bundle, err := apimanifests.GetBundleFromDir(filepath.Join("..", "..", "..", "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	if report(validate(bundle)) {
		t.Fatal("the bundle fails the v0.34.0 validators (printed above)")
	}

	csv := bundle.CSV.DeepCopy()
	perms := csv.Spec.InstallStrategy.StrategySpec.Permissions
	if len(perms) == 0 {
		t.Fatal("the CSV asks for no namespaced permissions")
	}
	perms[0].Rules = append(perms[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})
	// The deprecated-API check reads the CSV from the bundle's objects, the others from its CSV.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(csv)
	if err != nil {
		t.Fatal(err)
	}
	broken := *bundle
	broken.CSV = csv
	broken.Objects = nil
	for _, o := range bundle.Objects {
		if o.GetKind() == v1alpha1.ClusterServiceVersionKind {
			o = &unstructured.Unstructured{Object: u}
			o.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
			o.SetKind(v1alpha1.ClusterServiceVersionKind)
		}
		broken.Objects = append(broken.Objects, o)
	}
	results := validate(&broken)
	var warned bool
	for _, r := range results {
		for _, w := range r.Warnings {
			warned = warned || strings.Contains(w.Error(), "events")
		}
	}
	if !warned || !report(results) {
		t.Fatal("a rule on events.k8s.io events passes the gate; OperatorHub's pipeline would flag it")
	}
}
