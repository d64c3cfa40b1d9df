package olm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/crdify/pkg/config"
	"sigs.k8s.io/crdify/pkg/runner"
	crdifyproperty "sigs.k8s.io/crdify/pkg/validations/property"
	"sigs.k8s.io/yaml"
)

// upgradeSafetyConfig is OLM v1's: operator-controller v1.11.0's CRD upgrade-safety preflight
// (internal/operator-controller/rukpak/preflights/crdupgradesafety) runs crdify with it before
// it replaces a CRD, and refuses the upgrade on any error. Everything crdify checks is an error
// there (a removed field or stored version, a new required field, an added or changed default,
// a narrowed enum, a raised minimum, a change it cannot classify), except a changed description,
// and an enum that gains values.
func upgradeSafetyConfig() *config.Config {
	return &config.Config{
		Conversion:           config.ConversionPolicyIgnore,
		UnhandledEnforcement: config.EnforcementPolicyError,
		Validations: []config.ValidationConfig{
			{Name: "description", Enforcement: config.EnforcementPolicyNone},
			{Name: "enum", Enforcement: config.EnforcementPolicyError,
				Configuration: map[string]any{"additionPolicy": crdifyproperty.AdditionPolicyAllow}},
		},
	}
}

// CRDRefusal is one reason OLM v1 refuses to replace a CRD.
type CRDRefusal struct {
	// CRD and Version name the CRD and, for a schema change, its version ("v1").
	CRD, Version string
	// Property is the schema path crdify names ("^.spec.config"; empty for the CRD as a whole).
	Property string
	// Check is the crdify validation that refused ("pattern", "enum", "unhandled", ...).
	Check string
	// Detail is crdify's own words.
	Detail string
}

// Key is what names a refusal in a reviewed list: CRD, version, property and check.
func (r CRDRefusal) Key() string {
	return strings.Join([]string{r.CRD, r.Version, r.Property, r.Check}, " ")
}

func (r CRDRefusal) String() string { return r.Key() + ": " + r.Detail }

// CRDUpgradeRefusals is what OLM v1 says of replacing the CRD before with after on a cluster:
// each reason it refuses the upgrade; none means it upgrades.
func CRDUpgradeRefusals(before, after *apiextensionsv1.CustomResourceDefinition) ([]CRDRefusal, error) {
	r, err := runner.New(upgradeSafetyConfig(), runner.DefaultRegistry())
	if err != nil {
		return nil, fmt.Errorf("creating the CRD upgrade-safety runner: %w", err)
	}
	results := r.Run(before, after)
	var refusals []CRDRefusal
	for _, c := range results.CRDValidation {
		for _, e := range c.Errors {
			refusals = append(refusals, CRDRefusal{CRD: after.Name, Check: c.Name, Detail: e})
		}
	}
	for _, v := range slices.Concat(results.SameVersionValidation, results.ServedVersionValidation) {
		for _, p := range v.PropertyComparisons {
			for _, c := range p.ComparisonResults {
				for _, e := range c.Errors {
					refusals = append(refusals, CRDRefusal{CRD: after.Name, Version: v.Version, Property: p.Property, Check: c.Name, Detail: e})
				}
			}
		}
	}
	return refusals, nil
}

// AcceptedCRDRefusals are refusals a release made knowingly: for each upgrade ("0.1.0 -> 0.2.0"),
// the keys (CRDRefusal.Key) of what OLM v1 refuses unless the ClusterExtension opts out of the
// check, and why (config/catalog/crd-upgrade-refusals.yaml).
type AcceptedCRDRefusals []struct {
	From   string   `json:"from"`
	To     string   `json:"to"`
	Why    string   `json:"why"`
	Refuse []string `json:"refused"`
}

// LoadAcceptedCRDRefusals reads the reviewed list at path.
func LoadAcceptedCRDRefusals(path string) (AcceptedCRDRefusals, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var accepted AcceptedCRDRefusals
	if err := yaml.UnmarshalStrict(raw, &accepted); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return accepted, nil
}

func (a AcceptedCRDRefusals) accepts(from, to semver.Version, r CRDRefusal) bool {
	for _, u := range a {
		if u.From == from.String() && u.To == to.String() && slices.Contains(u.Refuse, r.Key()) {
			return true
		}
	}
	return false
}

// CRDUpgradeGateProblems checks that OLM v1 upgrades every earlier release to the bundle in
// bundleDir: the CRDs of each release record in releasedDir (config/catalog/released, manifests
// inline) older than the bundle, replaced with the bundle's. A refusal accepted is no problem;
// an accepted one OLM v1 no longer makes is (the list must say what is true).
func CRDUpgradeGateProblems(releasedDir, bundleDir string, accepted AcceptedCRDRefusals) ([]string, error) {
	bundle, err := apimanifests.GetBundleFromDir(bundleDir)
	if err != nil {
		return nil, fmt.Errorf("loading the bundle %s: %w", bundleDir, err)
	}
	head, err := semver.Parse(bundle.CSV.Spec.Version.String())
	if err != nil {
		return nil, err
	}
	current := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range bundle.V1CRDs {
		current[crd.Name] = crd
	}
	releases, err := earlierReleases(releasedDir, head)
	if err != nil {
		return nil, err
	}
	var problems []string
	made := map[string]bool{} // "from to key" of every refusal OLM v1 makes
	for _, r := range releases {
		for _, before := range r.crds {
			after, ok := current[before.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s -> %s: CRD %s is gone from the bundle", r.version, head, before.Name))
				continue
			}
			refusals, err := CRDUpgradeRefusals(before, after)
			if err != nil {
				return nil, err
			}
			for _, refusal := range refusals {
				made[r.version.String()+" "+head.String()+" "+refusal.Key()] = true
				if !accepted.accepts(r.version, head, refusal) {
					problems = append(problems, fmt.Sprintf("%s -> %s: OLM v1 refuses %s", r.version, head, refusal))
				}
			}
		}
	}
	problems = append(problems, accepted.notMade(head, made)...)
	slices.Sort(problems)
	return problems, nil
}

// notMade is each refusal listed for the upgrade to head that OLM v1 does not make.
func (a AcceptedCRDRefusals) notMade(head semver.Version, made map[string]bool) []string {
	var problems []string
	for _, u := range a {
		for _, key := range u.Refuse {
			if u.To == head.String() && !made[u.From+" "+u.To+" "+key] {
				problems = append(problems, fmt.Sprintf("%s -> %s: %q is listed as refused, but OLM v1 does not refuse it", u.From, u.To, key))
			}
		}
	}
	return problems
}

// release is a release record's version and CRDs.
type release struct {
	version semver.Version
	crds    []*apiextensionsv1.CustomResourceDefinition
}

// earlierReleases reads the release records in dir older than head.
func earlierReleases(dir string, head semver.Version) ([]release, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var releases []release
	for _, f := range files {
		record, err := readReleaseRecord(filepath.Join(dir, f.Name()))
		if err != nil {
			return nil, err
		}
		v, err := bundleVersion(record)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		if !v.LT(head) {
			continue
		}
		crds, err := inlineCRDs(record)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		releases = append(releases, release{version: v, crds: crds})
	}
	return releases, nil
}

func readReleaseRecord(path string) (declcfg.Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return declcfg.Bundle{}, err
	}
	defer f.Close()
	cfg, err := declcfg.LoadReader(f)
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(cfg.Bundles) != 1 {
		return declcfg.Bundle{}, fmt.Errorf("%s holds %d bundles, not one", path, len(cfg.Bundles))
	}
	return cfg.Bundles[0], nil
}

func bundleVersion(b declcfg.Bundle) (semver.Version, error) {
	props, err := property.Parse(b.Properties)
	if err != nil {
		return semver.Version{}, err
	}
	if len(props.Packages) == 0 {
		return semver.Version{}, fmt.Errorf("bundle %s has no olm.package property", b.Name)
	}
	return semver.Parse(props.Packages[0].Version)
}

// inlineCRDs are the CRDs among a release record's manifests (olm.bundle.object).
func inlineCRDs(b declcfg.Bundle) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	props, err := property.Parse(b.Properties)
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, obj := range props.BundleObjects {
		var meta runtime.TypeMeta
		if err := yaml.Unmarshal(obj.Data, &meta); err != nil {
			return nil, err
		}
		if meta.Kind != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(obj.Data, crd); err != nil {
			return nil, fmt.Errorf("%s: a CRD: %w", b.Name, err)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("the release record of %s carries no CRD", b.Name)
	}
	return crds, nil
}
