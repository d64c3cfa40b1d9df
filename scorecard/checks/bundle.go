// Package checks holds redis-operator's own scorecard tests, against a live cluster: what
// operator-sdk's built-in tests (basic-check-spec and the olm-* tests, its scorecard-test image)
// cannot see. Every test returns a v1alpha3.TestStatus, the scorecard test-image contract.
package checks

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// LoadBundle reads a bundle directory (the one holding manifests/ and metadata/).
func LoadBundle(dir string) (*apimanifests.Bundle, error) {
	b, err := apimanifests.GetBundleFromDir(filepath.Join(dir, "manifests"))
	if err != nil {
		return nil, fmt.Errorf("loading the bundle in %s: %w", dir, err)
	}
	return b, nil
}

// Examples decodes the CSV's alm-examples: the custom resources users start from.
func Examples(b *apimanifests.Bundle) ([]unstructured.Unstructured, error) {
	raw := b.CSV.GetAnnotations()["alm-examples"]
	if raw == "" {
		return nil, fmt.Errorf("the CSV %s has no alm-examples", b.CSV.GetName())
	}
	var items []map[string]any
	if err := json.Unmarshal([]byte(raw), &items); err != nil {
		return nil, fmt.Errorf("decoding alm-examples: %w", err)
	}
	out := make([]unstructured.Unstructured, 0, len(items))
	for _, item := range items {
		out = append(out, unstructured.Unstructured{Object: item})
	}
	return out, nil
}

// result collects one test's outcome.
type result struct {
	scapiv1alpha3.TestResult
}

func newResult(name string) *result {
	return &result{scapiv1alpha3.TestResult{
		Name: name, State: scapiv1alpha3.PassState, Errors: []string{}, Suggestions: []string{},
	}}
}

func (r *result) fail(format string, args ...any) {
	r.State = scapiv1alpha3.FailState
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

// broken marks a test that could not run, as opposed to one whose check failed.
func (r *result) broken(err error) {
	r.State = scapiv1alpha3.ErrorState
	r.Errors = append(r.Errors, err.Error())
}

func (r *result) logf(format string, args ...any) {
	r.Log += fmt.Sprintf(format, args...) + "\n"
}

func (r *result) status() scapiv1alpha3.TestStatus {
	return scapiv1alpha3.TestStatus{Results: []scapiv1alpha3.TestResult{r.TestResult}}
}
