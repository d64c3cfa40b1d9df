// Command validate-sdk runs the bundle validators of operator-framework/api v0.34.0, the
// version the operator-sdk v1.42 CLI is built on, as `operator-sdk bundle validate
// --select-optional suite=operatorframework` runs them: what OperatorHub's pipeline sees. The
// tests run the current api's validators (internal/olm); this pins the CLI's. It prints every
// error and warning and exits 1 on either: OperatorHub's pipeline reads the warnings too.
package main

import (
	"fmt"
	"os"

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
	if failed := report(validate(bundle)); failed {
		os.Exit(1)
	}
	fmt.Println("All validation tests have completed successfully (operator-framework/api v0.34.0)")
}

// validate runs the validators `operator-sdk bundle validate --select-optional
// suite=operatorframework` runs, with the optional values the SDK passes by default: none (the
// deprecated-APIs check then judges against every removal it knows).
func validate(bundle *apimanifests.Bundle) []errors.ManifestResult {
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
	return validators.Validate(objs...)
}

func report(results []errors.ManifestResult) bool {
	failed := false
	for _, r := range results {
		for _, e := range r.Errors {
			failed = true
			fmt.Printf("ERRO %s: %s\n", r.Name, e)
		}
		for _, w := range r.Warnings {
			failed = true
			fmt.Printf("WARN %s: %s\n", r.Name, w)
		}
	}
	return failed
}
