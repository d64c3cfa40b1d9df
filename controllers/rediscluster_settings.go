package controllers

import (
	"context"
	"fmt"
	"strings"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
)

// reconcileLiveSettings sets the LiveSettings on every node that answers, in either mode, once
// per node by this operator process: a node started by an earlier build, whose redis.conf
// lacked one, gets it without a restart (a node that starts reads them from redis.conf), and a
// new memory limit gives every node its new maxmemory.
func (r *RedisClusterReconciler) reconcileLiveSettings(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	var pairs []string
	for _, s := range resources.LiveSettings(rc) {
		pairs = append(pairs, s.Directive, s.Value)
	}
	if len(pairs) == 0 {
		return nil
	}
	want := strings.Join(pairs, " ")
	cs := r.clusterState(rc)
	for _, v := range state.mode.nodes(state).views { // one view, or one per shard
		for _, o := range v.Nodes {
			if !o.Reachable() || cs.settings.givenTo(o.Name) == want {
				continue
			}
			n := state.dial(o.Addr)
			err := n.SetConfig(ctx, pairs...)
			n.Close()
			if err != nil {
				return fmt.Errorf("setting %s on %s: %w", want, o.Name, err)
			}
			cs.settings.gave(o.Name, want)
		}
	}
	return nil
}
