package olm_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipelineK8sVersion is the Kubernetes version the deprecated-API check judges against: the
// pipeline passes the one of the newest OpenShift the bundle supports; we pass the newest we test.
const pipelineK8sVersion = "1.37"

// sdkValidate runs `operator-sdk bundle validate` (bin/operator-sdk: make operator-sdk builds
// v1.42.3) on dir as the community operators pipeline runs it (operatorcert's
// run_operator_sdk_bundle_validate: `-o json-alpha1`, the optional validators of
// name=operatorhub, then of suite=operatorframework, with k8s-version), and returns the
// messages it reports. The pipeline fails a bundle on an error and shows each warning to the
// reviewers; it passes when there is none.
func sdkValidate(t *testing.T, dir string) []string {
	t.Helper()
	sdk := filepath.Join(repoRoot(t), "bin", "operator-sdk")
	_, err := os.Stat(sdk)
	require.NoError(t, err, "make operator-sdk builds the CLI")
	var messages []string
	for _, selector := range []string{"name=operatorhub", "suite=operatorframework"} {
		out, err := exec.Command(sdk, "bundle", "validate", "-o", "json-alpha1", dir, "--select-optional", selector,
			"--optional-values=k8s-version="+pipelineK8sVersion).Output()
		var result struct {
			Outputs []struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal(out, &result), "operator-sdk bundle validate --select-optional %s (exit: %v):\n%s", selector, err, out)
		for _, o := range result.Outputs {
			// The operatorhub validator's notice of its own deprecation: every bundle gets it
			// from the pipeline's selection.
			if strings.Contains(o.Message, `The "operatorhub" validator is deprecated`) {
				continue
			}
			messages = append(messages, o.Type+": "+o.Message)
		}
	}
	return messages
}

// The gate OperatorHub's pipeline applies, with the CLI it runs: the bundle passes with no
// warning, and the same bundle with a rule on events in events.k8s.io (how controller-runtime's
// recorder writes Events) fails on the deprecated-API warning.
func TestOperatorSDKValidatesTheBundleAndFailsAnEventsK8sIORule(t *testing.T) {
	bundle := filepath.Join(repoRoot(t), "bundle")
	assert.Empty(t, sdkValidate(t, bundle), "operator-sdk bundle validate, as the pipeline runs it")

	broken := t.TempDir()
	require.NoError(t, os.CopyFS(broken, os.DirFS(bundle)))
	csv := filepath.Join(broken, "manifests", "redis-operator.clusterserviceversion.yaml")
	raw, err := os.ReadFile(csv)
	require.NoError(t, err)
	const permissions = "\n      permissions:\n      - rules:\n"
	require.Contains(t, string(raw), permissions, "the CSV asks for namespaced permissions")
	raw = []byte(strings.Replace(string(raw), permissions, permissions+"        - apiGroups: [events.k8s.io]\n          resources: [events]\n          verbs: [create, patch]\n", 1))
	require.NoError(t, os.WriteFile(csv, raw, 0o644))
	messages := sdkValidate(t, broken)
	require.NotEmpty(t, messages, "a rule on events.k8s.io events passes the gate; OperatorHub's pipeline would flag it")
	assert.Contains(t, messages[0], `Migrate the API(s) for events: (["ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.Permissions[0].Rules[0]"])`, "the warning names the rule")
}
