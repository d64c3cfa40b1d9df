//go:build faults

// Package faults holds the fault suite that runs on its own (`make test-faults`): the operator
// crashed right after each of its writes (crashpoints_test.go), and specs generated from the
// CRD's schema (this file). The suite's other faults (hung, killed and cut-off nodes, full
// restarts, a stopped etcd, a broken Redis config) run with `make test` and `make test-e2e`.
package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

const (
	quietAfter  = 20 * time.Second
	quietWindow = 20 * time.Second
)

var (
	seed  = flag.Uint64("faults.seed", 1, "seed of the generated specs")
	count = flag.Int("faults.count", 150, "how many specs to try")
)

// TestGeneratedSpecsAreRefusedWithTheFieldOrConverge creates RedisClusters from generated specs
// against a real API server with the operator running. Each one is either refused with a
// message naming the field, or accepted and then reported on: Ready and Degraded conditions
// for its generation, and when the spec could not be carried out (observedGeneration behind),
// Degraded True with the reason. The operator never panics and does not
// hot-loop. No pods run here: what is checked is the API, the builders and the status.
func TestGeneratedSpecsAreRefusedWithTheFieldOrConverge(t *testing.T) {
	log.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	gen, err := newSpecGenerator(root, *seed)
	require.NoError(t, err)
	env, cfg, err := testenv.Start()
	require.NoError(t, err)
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)
	ctx := context.Background()
	ns, err := testenv.CreateNamespace(ctx, c, "fuzz")
	require.NoError(t, err)
	mgr, err := operator.NewManager(cfg, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0"})
	require.NoError(t, err)
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	specs := map[string]map[string]any{}
	var refused, accepted []string
	for i := range *count {
		name := fmt.Sprintf("fuzz-%d", i)
		spec := gen.next()
		specs[name] = spec
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": cachev1.GroupVersion.String(), "kind": "RedisCluster",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     spec,
		}}
		err := c.Create(ctx, obj)
		switch {
		case err == nil:
			accepted = append(accepted, name)
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			refused = append(refused, name)
			assert.Contains(t, err.Error(), "spec", "%s: the refusal names the field; spec %s", name, show(spec))
		default:
			t.Fatalf("%s: neither accepted nor refused as invalid: %v; spec %s", name, err, show(spec))
		}
	}
	fmt.Printf("\ngenerated specs (seed %d): %d tried, %d refused by the API server, %d accepted\n",
		*seed, *count, len(refused), len(accepted))

	// Every accepted RedisCluster is reported on
	for _, name := range accepted {
		require.EventuallyWithT(t, func(col *assert.CollectT) {
			rc := &cachev1.RedisCluster{}
			require.NoError(col, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rc))
			ready := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionReady)
			degraded := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDegraded)
			require.NotNil(col, ready)
			require.NotNil(col, degraded)
			assert.Equal(col, rc.Generation, ready.ObservedGeneration, "Ready describes this spec")
			assert.Equal(col, rc.Generation, degraded.ObservedGeneration, "Degraded describes this spec")
			assert.NotEmpty(col, ready.Reason)
			assert.NotEmpty(col, degraded.Message)
			if rc.Status.ObservedGeneration != rc.Generation {
				// The spec could not be carried out: Degraded says why, and the reason is an
				// object the spec names that is not there yet, never the spec itself (issue
				// 22: what the API accepts converges).
				assert.Equal(col, metav1.ConditionTrue, degraded.Status, "not carried out, and not Degraded")
				checkedInThePod := degraded.Reason == cachev1.ReasonApplyFailed && checkedOnlyInThePod.MatchString(degraded.Message)
				// A user whose password Secret is missing is reported as UserRejected (see the
				// docs/users-and-passwords.md), and waits on that Secret like SecretNotFound.
				userWaitsOnSecret := degraded.Reason == cachev1.ReasonUserRejected && onlyUserSecretsMissing(degraded.Message)
				if !checkedInThePod && !userWaitsOnSecret {
					assert.Contains(col, waitsOnAnotherObject, degraded.Reason, "accepted, then stuck: %s", degraded.Message)
				}
			}
		}, 2*time.Minute, 200*time.Millisecond, "%s: reported on; spec %s", name, show(specs[name]))
	}

	// and, with nothing changing, the operator does not reconcile them over and over. With no
	// pods there is nothing to check: a steady RedisCluster is not reconciled at all, and one
	// whose spec cannot be carried out (an invalid toleration, a missing Secret) is retried
	// with a growing back-off. Measured once the first retries, which come fast, are past.
	time.Sleep(quietAfter)
	before := metric("controller_runtime_reconcile_total")
	time.Sleep(quietWindow)
	perMinute := (metric("controller_runtime_reconcile_total") - before) * float64(time.Minute/quietWindow) / float64(max(len(accepted), 1))
	fmt.Printf("reconciles per accepted RedisCluster per minute, %s after they were reported, when nothing changes: %.2f\n", quietAfter, perMinute)
	// A hot loop (a reconcile that wakes the next one, a write the API server keeps undoing)
	// reconciles many times a second; the back-off, by now, once in 10 to 40 seconds.
	assert.Less(t, perMinute, 10.0, "a RedisCluster reconciled over and over")
	assert.Zero(t, metric("controller_runtime_reconcile_panics_total"), "panics in Reconcile")
}

// waitsOnAnotherObject are the Degraded reasons of a valid spec whose objects (a Secret) do not
// exist: the RedisCluster converges once they do. A restore whose RedisBackup does not exist
// is not among them: it waits (Progressing, BackupNotReady) and carries the spec out meanwhile.
var waitsOnAnotherObject = []string{cachev1.ReasonSecretNotFound, cachev1.ReasonTLSSecretInvalid}

// checkedOnlyInThePod are the pod fields whose grammar (label keys and values, affinity terms)
// the API server checks when the operator applies the StatefulSet, not at admission: a CEL rule
// over these Kubernetes types, whose strings have no length bound, costs more than a CRD may.
// Degraded (ApplyFailed) then names the field at once.
var checkedOnlyInThePod = regexp.MustCompile(`spec\.template\.spec\.(nodeSelector|tolerations|affinity|topologySpreadConstraints)`)

// onlyUserSecretsMissing says whether every problem in a UserRejected message is a user whose
// password Secret or key does not exist.
func onlyUserSecretsMissing(message string) bool {
	for _, line := range strings.Split(message, "\n") {
		if !userSecretMissing.MatchString(line) {
			return false
		}
	}
	return true
}

var userSecretMissing = regexp.MustCompile(`^user \S+: password Secret \S+ (not found|has no key "[^"]*")$`)

func show(spec map[string]any) string {
	raw, _ := json.Marshal(spec)
	s := string(raw)
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// metric sums a controller-runtime counter over its labels.
func metric(name string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var total float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
