package checks_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/scorecard/checks"
	"github.com/org/redis-operator/test/testenv"
)

// The bundle that `make bundle` wrote and that ships.
var bundleDir = filepath.Join("..", "..", "bundle")

// The cluster tests run against a real kube-apiserver with the operator running. envtest has no
// StatefulSet controller and no kubelet: testenv.LocalNode runs the pods as real redis-server
// processes.
func TestClusterTestsPassWithTheOperatorRunning(t *testing.T) {
	_, cfg := testenv.StartFor(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(t, err)

	t.Run("without the operator, the sample never becomes Ready", func(t *testing.T) {
		ns, err := testenv.CreateNamespace(ctx, c, "scorecard")
		require.NoError(t, err)
		status := checks.Online[checks.SampleBecomesReady](ctx, checks.Cluster{Client: c, Namespace: ns, Timeout: 2 * time.Second}, bundleDir)
		assert.Equal(t, scapiv1alpha3.FailState, status.Results[0].State)
	})

	ns, err := testenv.CreateNamespace(ctx, c, "scorecard")
	require.NoError(t, err)
	mgr, err := operator.NewManager(cfg, operator.Options{
		WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.RunLocalNode(t, c, ns)

	for _, name := range []string{checks.SampleBecomesReady, checks.StatusDescriptorsMatchStatus} {
		t.Run(name, func(t *testing.T) {
			status := checks.Online[name](ctx, checks.Cluster{Client: c, Namespace: ns, Timeout: 30 * time.Second}, bundleDir)
			require.Len(t, status.Results, 1)
			r := status.Results[0]
			assert.Equal(t, scapiv1alpha3.PassState, r.State, "errors: %v\nlog: %s", r.Errors, r.Log)
		})
	}
}
