package olm_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/olm"
)

func acceptedRefusals(t *testing.T) olm.AcceptedCRDRefusals {
	t.Helper()
	accepted, err := olm.LoadAcceptedCRDRefusals(filepath.Join(repoRoot(t), "config", "catalog", "crd-upgrade-refusals.yaml"))
	require.NoError(t, err)
	return accepted
}

// OLM v1 upgrades every earlier release's CRDs to the bundle's, with operator-controller
// v1.11.0's own check (crdify, its configuration), refusing only what the reviewed list says.
func TestOLMv1UpgradesEveryReleaseToTheBundle(t *testing.T) {
	root := repoRoot(t)
	problems, err := olm.CRDUpgradeGateProblems(filepath.Join(root, "config", "catalog", "released"), filepath.Join(root, "bundle"), acceptedRefusals(t))
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// A CRD change OLM v1 refuses fails the gate, naming the field: each is a copy of our bundle
// broken in one of the ways OLM v1 guards against.
func TestTheCRDUpgradeGateRefusesAChangeOLMv1Refuses(t *testing.T) {
	crdPath := filepath.Join("manifests", "cache.example.com_redisclusters.yaml")
	for _, tt := range []struct {
		name   string
		break_ func(schema map[string]any)
		want   string
	}{
		{"a field removed", func(schema map[string]any) {
			delete(properties(schema, "spec"), "version")
		}, "existingFieldRemoval: removed field : v1.^.spec.version"},
		{"a new required field", func(schema map[string]any) {
			s := properties(schema, "spec")
			s["tier"] = map[string]any{"type": "string"}
			object(schema, "spec")["required"] = append(object(schema, "spec")["required"].([]any), "tier")
		}, "^.spec required"},
		{"a raised minimum", func(schema map[string]any) {
			properties(schema, "spec")["replicas"].(map[string]any)["minimum"] = 3
		}, "^.spec.replicas minimum"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyBundle(t)
			editYAML(t, filepath.Join(dir, crdPath), func(crd map[string]any) {
				version := spec(crd)["versions"].([]any)[0].(map[string]any)
				tt.break_(version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any))
			})
			problems, err := olm.CRDUpgradeGateProblems(filepath.Join(repoRoot(t), "config", "catalog", "released"), dir, acceptedRefusals(t))
			require.NoError(t, err)
			assert.Contains(t, strings.Join(problems, "\n"), tt.want)
		})
	}
}

// A refusal listed as accepted that OLM v1 no longer makes is a problem too: the list says what
// is true.
func TestAnAcceptedRefusalOLMv1DoesNotMakeFailsTheGate(t *testing.T) {
	accepted := acceptedRefusals(t)
	accepted[0].Refuse = append(accepted[0].Refuse, "redisclusters.cache.example.com v1 ^.spec.version enum")
	root := repoRoot(t)
	problems, err := olm.CRDUpgradeGateProblems(filepath.Join(root, "config", "catalog", "released"), filepath.Join(root, "bundle"), accepted)
	require.NoError(t, err)
	assert.Equal(t, []string{`0.1.0 -> 0.2.0: "redisclusters.cache.example.com v1 ^.spec.version enum" is listed as refused, but OLM v1 does not refuse it`}, problems)
}

func object(schema map[string]any, name string) map[string]any {
	return schema["properties"].(map[string]any)[name].(map[string]any)
}

func properties(schema map[string]any, name string) map[string]any {
	return object(schema, name)["properties"].(map[string]any)
}
