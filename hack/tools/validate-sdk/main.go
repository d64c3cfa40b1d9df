// Command validate-sdk runs the bundle validators of operator-framework/api v0.34.0, the
// version the operator-sdk v1.42 CLI is built on, as `operator-sdk bundle validate
// --select-optional suite=operatorframework` runs them: what OperatorHub's pipeline sees. The
// tests run the current api's validators (internal/olm); this pins the CLI's. It prints every
// error and warning and exits 1 on either, except the warnings docs/olm.md explains.
package main

import (
	"fmt"
	"os"
	"strings"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

func main() {
	dir := "bundle"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	bundle, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading the bundle:", err)
		os.Exit(2)
	}
	objs := []any{bundle, bundle.CSV}
	for _, crd := range bundle.V1CRDs {
		objs = append(objs, crd)
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	// The optional values the SDK passes by default: none; the deprecated-APIs check then
	// judges against every removal it knows.
	results := validators.Validate(objs...)
	failed := report(results)
	if failed {
		os.Exit(1)
	}
	fmt.Println("All validation tests have completed successfully (operator-framework/api v0.34.0)")
}

// explained are the warnings docs/olm.md explains, by a piece of their text: the
// events rule is for events.k8s.io/v1, which the operator's Event recorder writes; v0.34's
// deprecated-API check knows only that events.k8s.io/v1beta1 was removed in 1.25 and cannot
// tell a rule's version. operator-framework/api v0.45 does not warn.
var explained = []string{"Migrate the API(s) for events:"}

func report(results []errors.ManifestResult) bool {
	failed := false
	for _, r := range results {
		for _, e := range r.Errors {
			failed = true
			fmt.Printf("ERRO %s: %s\n", r.Name, e)
		}
		for _, w := range r.Warnings {
			if isExplained(w.Error()) {
				fmt.Printf("WARN (explained in docs/olm.md: the events.k8s.io/v1 rule) %s: %s\n", r.Name, w)
				continue
			}
			failed = true
			fmt.Printf("WARN %s: %s\n", r.Name, w)
		}
	}
	return failed
}

func isExplained(warning string) bool {
	for _, e := range explained {
		if strings.Contains(warning, e) {
			return true
		}
	}
	return false
}
