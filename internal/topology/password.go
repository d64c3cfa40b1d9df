package topology

import (
	"context"

	"github.com/org/redis-operator/internal/redis"
)

// RepairLogins reaches every node of v that refused the operator's login with dial (another
// login that may still work: the default user with a previous password) and runs repair on it:
// the password Secret changed under running nodes, or a node started before its file listed
// the operator's user. The changes are live, so no pod restarts for them. It returns the nodes
// it repaired.
func RepairLogins(ctx context.Context, v View, dial Dialer, repair func(context.Context, redis.Node) error) []string {
	var repaired []string
	for _, o := range v.AuthRefused() {
		n := dial(o.Addr)
		if _, err := n.Replication(ctx); err == nil {
			if err := repair(ctx, n); err == nil {
				repaired = append(repaired, o.Name)
			}
		}
		n.Close()
	}
	return repaired
}
