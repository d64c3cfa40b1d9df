package checks_test

import (
	"path/filepath"
	"testing"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/scorecard/checks"
)

// The bundle that `make bundle` wrote and that ships.
var bundleDir = filepath.Join("..", "..", "bundle")

func TestBuiltinChecksPassOnTheBundle(t *testing.T) {
	for _, name := range checks.OfflineNames() {
		t.Run(name, func(t *testing.T) {
			status := checks.Offline[name](bundleDir)

			require.Len(t, status.Results, 1)
			r := status.Results[0]
			assert.Equal(t, name, r.Name)
			assert.Equal(t, scapiv1alpha3.PassState, r.State, "errors: %v", r.Errors)
			assert.Empty(t, r.Suggestions)
		})
	}
}

func loadBundle(t *testing.T) *apimanifests.Bundle {
	t.Helper()
	b, err := checks.LoadBundle(bundleDir)
	require.NoError(t, err)
	return b
}

// The checks must be able to fail: each alteration below breaks what one of them checks.
func TestBuiltinChecksFailOnABrokenBundle(t *testing.T) {
	cases := []struct {
		check     string
		breakIt   func(*apimanifests.Bundle)
		wantError string
	}{
		{checks.OLMSpecDescriptors, func(b *apimanifests.Bundle) {
			owned := &b.CSV.Spec.CustomResourceDefinitions.Owned[0]
			owned.SpecDescriptors = owned.SpecDescriptors[1:]
		}, "has no spec descriptor"},
		{checks.OLMStatusDescriptors, func(b *apimanifests.Bundle) {
			b.CSV.Spec.CustomResourceDefinitions.Owned[0].StatusDescriptors = nil
		}, "has no status descriptor"},
		{checks.OLMCRDsHaveResources, func(b *apimanifests.Bundle) {
			b.CSV.Spec.CustomResourceDefinitions.Owned[0].Resources = nil
		}, "lists no resources"},
		{checks.OLMCRDsHaveValidation, func(b *apimanifests.Bundle) {
			b.CSV.Annotations["alm-examples"] = `[{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"x"},"spec":{"replicas":1,"shards":3}}]`
		}, "spec.shards"},
		{checks.BasicCheckSpec, func(b *apimanifests.Bundle) {
			b.CSV.Annotations["alm-examples"] = `[{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"x"}}]`
		}, "has no spec"},
	}
	for _, tt := range cases {
		t.Run(tt.check, func(t *testing.T) {
			b := loadBundle(t)
			tt.breakIt(b)

			r := checks.CheckBundle(tt.check, b).Results[0]

			assert.Equal(t, scapiv1alpha3.FailState, r.State)
			require.NotEmpty(t, r.Errors)
			assert.Contains(t, r.Errors[0], tt.wantError)
		})
	}
}
