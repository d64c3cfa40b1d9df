package auth

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/testenv"
)

// A client outside verifies the host it dials: an address needs an IP SAN (a DNS SAN spelling
// it does not count), a name a DNS SAN, a wildcard covering one label.
func TestUncoveredAreTheHostsACertificateIsNotValidFor(t *testing.T) {
	ca, err := testenv.NewCA("ca")
	require.NoError(t, err)
	kp, err := ca.IssueFor([]string{"sessions.default.svc", "*.redis.example.com", "192.0.2.9"}, []net.IP{net.ParseIP("192.0.2.10")})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		hosts []string
		want  []string
	}{
		{"nothing asked", nil, nil},
		{"an address in an IP SAN", []string{"192.0.2.10"}, nil},
		{"an address only spelled in a DNS SAN", []string{"192.0.2.9"}, []string{"192.0.2.9"}},
		{"a name under the wildcard", []string{"node-0.redis.example.com"}, nil},
		{"a name two labels under the wildcard", []string{"a.node-0.redis.example.com"}, []string{"a.node-0.redis.example.com"}},
		{"each missing one, in order", []string{"192.0.2.11", "192.0.2.10", "lb.example.net"}, []string{"192.0.2.11", "lb.example.net"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Uncovered(kp.Cert, tc.hosts))
		})
	}
}
