//go:build olm

package olm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/redistest"
)

// olmv1Namespace is where the ClusterExtension installs the operator.
const olmv1Namespace = "redis-operator"

// The OLM v1 story: a ClusterCatalog of the catalog image, a ClusterExtension that installs the
// operator for every namespace, the catalog's head moving to the next release, and the
// extension deleted, as the README and docs/olm.md tell a platform team to do it.
func TestOLMv1InstallsUpgradesAndRemovesTheOperatorFromTheCatalogImage(t *testing.T) {
	ctx := context.Background()
	olmv1, err := cluster.StartOLMv1(ctx)
	require.NoError(t, err)
	defer olmv1.Stop()
	// OLM v1 installs an object only if no other installer made it: the stories before this one
	// installed the operator with OLM v0, which leaves the bundle's cluster-wide objects (its
	// CRDs, on purpose, and its ClusterRoles) behind.
	cluster.MustKubectl(t, "delete", "crd", "redisclusters.cache.example.com", "redisbackups.cache.example.com", "--ignore-not-found", "--wait")
	cluster.MustKubectl(t, "delete", "clusterrole", "redis-operator-metrics-reader", "redis-operator-rediscluster-editor-role",
		"redis-operator-rediscluster-viewer-role", "--ignore-not-found")

	// Given the catalog with 0.1.0 only, published as the catalog image
	only010 := func(name string) bool { return name == pkg+".v0.1.0" }
	require.NoError(t, cluster.PublishCatalog(ctx, localcluster.CatalogImage, publishedCatalog(t, only010)))

	// When a platform team runs the README's OLM v1 install: a ClusterCatalog of it and a
	// ClusterExtension of the package (AllNamespaces)
	installed := time.Now()
	cluster.RunDocsExample(t, "readme-olmv1", t.TempDir(), "")
	fmt.Printf("figure: OLM v1 ClusterCatalog Serving and ClusterExtension -> 0.1.0 Installed in %.1fs\n", time.Since(installed).Seconds())
	assert.Equal(t, "0.1.0", installedVersion(t))
	cluster.MustKubectl(t, "-n", olmv1Namespace, "wait", "deployment/redis-operator-controller-manager", "--for=condition=Available", "--timeout=120s")
	operatorStaysRunning(t, olmv1Namespace)

	// Then a RedisCluster in another namespace becomes Ready under it
	ns := newNamespace(t, "olmv1-story")
	cluster.MustKubectl(t, "-n", ns, "apply", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
	require.Eventually(t, func() bool { return redisClusterReady(t, ns) }, waitFor, tick, "RedisCluster Ready")
	before := podRestarts(t, ns)
	upgrade := watchUpgrade(t, ns, nil)

	// When the next release is pushed under the same catalog image name
	published := time.Now()
	require.NoError(t, cluster.PublishCatalog(ctx, localcluster.CatalogImage, publishedCatalog(t, nil)))

	// Then OLM v1 finds 0.2.0 at its next poll and refuses it, naming the CRD changes that
	// config/catalog/crd-upgrade-refusals.yaml lists (0.2.0 tightened validation on purpose)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := cluster.KubectlOutput("get", "clusterextension/redis-operator", "-o", `jsonpath={.status.conditions[?(@.type=="Progressing")].message}`)
		require.NoError(c, err, out)
		assert.Contains(c, out, `validating upgrade for CRD "redisclusters.cache.example.com"`)
		assert.Contains(c, out, "^.spec.config")
	}, waitFor, tick, "OLM v1 refuses 0.1.0 -> 0.2.0 for its CRD changes")
	fmt.Printf("figure: OLM v1 saw 0.2.0 and refused the CRD upgrade %.1fs after the catalog image was pushed\n", time.Since(published).Seconds())
	assert.Equal(t, "0.1.0", installedVersion(t), "the refused upgrade left 0.1.0 installed")

	// When the platform team opts out of the check for this step, as docs/olm.md says
	optedOut := time.Now()
	cluster.RunDocsExample(t, "olmv1-upgrade-0.2.0", t.TempDir(), "")

	// Then it upgrades: 0.2.0 installed, the operator runs and stays so, the RedisCluster stayed
	// Ready with every acknowledged write, and no Redis pod restarted
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "0.2.0", installedVersion(c)) }, waitFor, tick)
	cluster.MustKubectl(t, "wait", "clusterextension/redis-operator", "--for=condition=Installed", "--timeout=3m")
	fmt.Printf("figure: OLM v1 upgrade 0.1.0 -> 0.2.0 Installed %.1fs after the opt-out\n", time.Since(optedOut).Seconds())
	cluster.MustKubectl(t, "-n", olmv1Namespace, "rollout", "status", "deployment/redis-operator-controller-manager", "--timeout=120s")
	operatorStaysRunning(t, olmv1Namespace)
	upgrade.finish(t)
	assert.Equal(t, before, podRestarts(t, ns), "the upgrade restarted no Redis pod")

	// When the extension is deleted
	cluster.MustKubectl(t, "delete", "clusterextension/redis-operator", "--wait", "--timeout=3m")

	// Then the operator is gone, and every RedisCluster stays, with its Redis and its data
	// (the Deployment's deletion may still be under way when the extension is gone: CI at 7735a44)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		deploys := &appsv1.DeploymentList{}
		require.NoError(c, cluster.Client.List(ctx, deploys, client.InNamespace(olmv1Namespace)))
		assert.Empty(c, deploys.Items, "the operator's Deployment is gone")
	}, waitFor, tick)
	cluster.MustKubectl(t, "get", "crd", "redisclusters.cache.example.com")
	assert.True(t, redisClusterReady(t, ns), "the RedisCluster is still there, its last status Ready")
	reader, err := primaryClient(ctx, ns)
	require.NoError(t, err)
	defer reader.Close()
	acked, _, _ := upgrade.writer.Result()
	assert.Empty(t, redistest.Missing(ctx, reader, acked), "every acknowledged write is still served")
	cluster.MustKubectl(t, "delete", "clustercatalog/redis-operator", "--wait")
}

func installedVersion(c require.TestingT) string {
	out, err := cluster.KubectlOutput("get", "clusterextension/redis-operator", "-o", "jsonpath={.status.install.bundle.version}")
	require.NoError(c, err, out)
	return strings.TrimSpace(out)
}
