package credentials

import (
	"context"
	"fmt"
	"strings"

	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// LiveSettings sets the LiveSettings on every node that answers, in either mode, once per node
// by this operator process: a node started by an earlier build, whose redis.conf lacked one,
// gets it without a restart (a node that starts reads them from redis.conf), and a new memory
// limit gives every node its new maxmemory.
func LiveSettings(ctx context.Context, c *scope.Cluster, m *Memory) error {
	var pairs []string
	for _, s := range resources.LiveSettings(c.RC) {
		pairs = append(pairs, s.Directive, s.Value)
	}
	if len(pairs) == 0 {
		return nil
	}
	want := strings.Join(pairs, " ")
	_, err := auth.Give(ctx, c.Nodes().Nodes, auth.Gift{Sum: want, Given: &m.settings, Dial: c.Dial,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			if err := auth.SetSettings(ctx, n, pairs...); err != nil {
				return false, fmt.Errorf("setting %s on %s: %w", want, o.Name, err)
			}
			return true, nil
		}})
	return err
}
