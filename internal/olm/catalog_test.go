package olm_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/api"
	registryclient "github.com/operator-framework/operator-registry/pkg/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const packageName = "redis-operator"

func opm(t *testing.T) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "bin", "opm")
	_, err := os.Stat(path)
	require.NoError(t, err, "run `make opm` first")
	return path
}

func loadCatalog(t *testing.T) *declcfg.DeclarativeConfig {
	t.Helper()
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(filepath.Join(repoRoot(t), "catalog")))
	require.NoError(t, err)
	return cfg
}

// currentVersion is the version of the bundle in bundle/: the release the catalog must lead to.
func currentVersion(t *testing.T) string {
	t.Helper()
	return loadBundle(t).CSV.Spec.Version.String()
}

func TestCatalogPassesOpmValidate(t *testing.T) {
	out, err := exec.Command(opm(t), "validate", filepath.Join(repoRoot(t), "catalog")).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func TestEveryChannelLeadsToTheCurrentRelease(t *testing.T) {
	cfg := loadCatalog(t)
	head := packageName + ".v" + currentVersion(t)
	require.Len(t, cfg.Packages, 1)
	assert.Equal(t, packageName, cfg.Packages[0].Name)
	assert.NotNil(t, cfg.Packages[0].Icon, "the package shows an icon in OperatorHub")
	assert.NotEmpty(t, cfg.Packages[0].Description)
	require.GreaterOrEqual(t, len(cfg.Bundles), 2, "the upgrade graph is shown with at least two releases")

	versions := bundleVersions(t, cfg)
	for _, ch := range cfg.Channels {
		t.Run(ch.Name, func(t *testing.T) {
			// Exactly one head: the entry nothing else replaces or skips.
			replaced := map[string]bool{}
			for _, e := range ch.Entries {
				if e.Replaces != "" {
					replaced[e.Replaces] = true
				}
				for _, s := range e.Skips {
					replaced[s] = true
				}
			}
			var heads []string
			for _, e := range ch.Entries {
				if !replaced[e.Name] {
					heads = append(heads, e.Name)
				}
			}
			assert.Equal(t, []string{head}, heads)

			// Every entry reaches the head, by replaces edges or the head's skipRange.
			for _, e := range ch.Entries {
				assert.True(t, reachesHead(ch, e.Name, head, versions), "%s has no upgrade path to %s", e.Name, head)
			}
		})
	}
}

func bundleVersions(t *testing.T, cfg *declcfg.DeclarativeConfig) map[string]semver.Version {
	t.Helper()
	versions := map[string]semver.Version{}
	for _, b := range cfg.Bundles {
		props, err := property.Parse(b.Properties)
		require.NoError(t, err)
		require.Len(t, props.Packages, 1)
		v, err := semver.Parse(props.Packages[0].Version)
		require.NoError(t, err)
		versions[b.Name] = v
	}
	return versions
}

// reachesHead follows the edges OLM follows: an entry is upgraded by the entry that replaces it,
// skips it, or whose skipRange holds its version.
func reachesHead(ch declcfg.Channel, from, head string, versions map[string]semver.Version) bool {
	seen := map[string]bool{}
	for current := from; !seen[current]; {
		if current == head {
			return true
		}
		seen[current] = true
		next := ""
		for _, e := range ch.Entries {
			if e.Name == current {
				continue
			}
			inRange := false
			if e.SkipRange != "" {
				if r, err := semver.ParseRange(e.SkipRange); err == nil {
					inRange = r(versions[current])
				}
			}
			if e.Replaces == current || contains(e.Skips, current) || inRange {
				next = e.Name
				break
			}
		}
		if next == "" {
			return false
		}
		current = next
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// OLM's catalog operator reads a catalog through the registry gRPC API that `opm serve` answers.
// Ask it what the catalog operator asks when resolving an install and an upgrade.
func TestOpmServeAnswersTheRegistryAPI(t *testing.T) {
	port := freeLoopbackPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serve := exec.CommandContext(ctx, opm(t), "serve", filepath.Join(repoRoot(t), "catalog"),
		"--port", fmt.Sprint(port), "--pprof-addr", fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t)),
		// Its cache under the test's directory: killed, opm serve leaves a cache it made itself in
		// /tmp. An empty cache directory is filled, not checked.
		"--cache-dir", t.TempDir(), "--cache-enforce-integrity=false")
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		cancel()
		_ = serve.Wait()
		if t.Failed() {
			t.Logf("opm serve:\n%s", logs.String())
		}
	})

	c, err := registryclient.NewClient(fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, func() bool {
		ok, err := c.HealthCheck(ctx, time.Second)
		return err == nil && ok
	}, 30*time.Second, 100*time.Millisecond, "opm serve did not become healthy")

	head := packageName + ".v" + currentVersion(t)

	// The packages it serves.
	stream, err := c.Registry.ListPackages(ctx, &api.ListPackageRequest{})
	require.NoError(t, err)
	var names []string
	for {
		p, err := stream.Recv()
		if err != nil {
			break
		}
		names = append(names, p.GetName())
	}
	assert.Equal(t, []string{packageName}, names)

	// The package, its default channel and that channel's head.
	pkg, err := c.GetPackage(ctx, packageName)
	require.NoError(t, err)
	require.NotEmpty(t, pkg.GetChannels())
	assert.Equal(t, "stable", pkg.GetDefaultChannelName())
	for _, ch := range pkg.GetChannels() {
		assert.Equal(t, head, ch.GetCsvName(), "head of channel %s", ch.GetName())
	}

	// The bundle an install of the default channel gets.
	bundle, err := c.GetBundleInPackageChannel(ctx, packageName, "stable")
	require.NoError(t, err)
	assert.Equal(t, head, bundle.GetCsvName())
	assert.NotEmpty(t, bundle.GetObject(), "the bundle carries its manifests")

	// The bundle that upgrades the first release.
	upgrade, err := c.GetReplacementBundleInPackageChannel(ctx, packageName+".v0.1.0", packageName, "stable")
	require.NoError(t, err)
	assert.Equal(t, head, upgrade.GetCsvName())
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
