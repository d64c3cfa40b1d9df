package operator_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/controllers/operator"
)

func TestParseWatchNamespaces(t *testing.T) {
	tests := []struct {
		value string
		want  []string
	}{
		{"", nil},                      // AllNamespaces
		{"team-a", []string{"team-a"}}, // OwnNamespace, SingleNamespace
		{"team-a,team-b", []string{"team-a", "team-b"}}, // MultiNamespace
		{" team-a , ,team-b,", []string{"team-a", "team-b"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, operator.ParseWatchNamespaces(tt.value), "WATCH_NAMESPACE=%q", tt.value)
	}
}
