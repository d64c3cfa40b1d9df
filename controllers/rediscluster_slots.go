package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Moving hash slots between shards, as shards.Decide plans it (see its safety rule in
// internal/shards/moves.go): the executor carries out each planned move's remaining steps in
// order, then the next reconcile looks at the nodes again. A reconcile moves slots for at most
// moveBudget, so that the status says how far the move is, then comes back at once.

const (
	// moveBudget is how long one reconcile moves slots before it writes the status.
	moveBudget = time.Second
	// keysPerMigrate is how many keys one MIGRATE carries: the giving primary is blocked while
	// it sends them, and its clients wait that long.
	keysPerMigrate = 100
	// movingRequeue is when a reconcile that stopped moving slots at its budget comes back.
	movingRequeue = 10 * time.Millisecond
)

// moveSlots carries out the plan's moves until the budget is spent.
func (r *RedisClusterReconciler) moveSlots(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, addrs map[string]string) error {
	plan := state.shards.plan
	var primaries []string
	for _, sh := range plan.Shards {
		if sh.Primary != "" {
			primaries = append(primaries, sh.Primary)
		}
	}
	start := time.Now()
	moved := map[string]int{}
	keys := 0
	var err error
	for i, m := range plan.Moves {
		if i > 0 && time.Since(start) > moveBudget {
			state.shards.moreToMove = true
			break
		}
		var n int
		n, err = moveSlot(ctx, state.dial, m, addrs, primaries)
		keys += n
		if err != nil {
			err = fmt.Errorf("%s: %w", m, err)
			break
		}
		moved[m.From+" to "+m.To]++
		state.changed = true
	}
	if len(moved) > 0 {
		var parts []string
		for pair, n := range moved {
			parts = append(parts, fmt.Sprintf("%d slots from %s", n, pair))
		}
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "MoveSlots",
			"Moved %s, with %d keys", strings.Join(parts, ", "), keys)
	}
	return err
}

// moveSlot takes the move's remaining steps and returns how many keys it moved.
func moveSlot(ctx context.Context, dial func(string) redis.Node, m shards.Move, addrs map[string]string, primaries []string) (int, error) {
	from, to := dial(addrs[m.From]), dial(addrs[m.To])
	defer from.Close()
	defer to.Close()
	moved := 0
	if !m.Owned {
		if !m.Importing {
			if err := to.ClusterSetSlotImporting(ctx, m.Slot, m.FromID); err != nil {
				return moved, fmt.Errorf("%s imports it: %w", m.To, err)
			}
		}
		if !m.Migrating {
			if err := from.ClusterSetSlotMigrating(ctx, m.Slot, m.ToID); err != nil {
				return moved, fmt.Errorf("%s migrates it: %w", m.From, err)
			}
		}
		for {
			keys, err := from.ClusterKeysInSlot(ctx, m.Slot, keysPerMigrate)
			if err != nil {
				return moved, fmt.Errorf("listing its keys on %s: %w", m.From, err)
			}
			if len(keys) == 0 {
				break
			}
			if err := from.Migrate(ctx, addrs[m.To], keys); err != nil {
				return moved, fmt.Errorf("moving %d keys: %w", len(keys), err)
			}
			moved += len(keys)
		}
		// The receiver first: once it owns the slot, the giver's clients are sent to it.
		if err := to.ClusterSetSlotNode(ctx, m.Slot, m.ToID); err != nil {
			return moved, fmt.Errorf("%s takes it: %w", m.To, err)
		}
	}
	// Redis refuses this while the giver still holds a key of the slot.
	if err := from.ClusterSetSlotNode(ctx, m.Slot, m.ToID); err != nil {
		return moved, fmt.Errorf("%s gives it: %w", m.From, err)
	}
	// The other primaries learn it by gossip too; told at once, they send no client to the giver.
	var errs []error
	for _, p := range primaries {
		if p == m.From || p == m.To {
			continue
		}
		n := dial(addrs[p])
		if err := n.ClusterSetSlotNode(ctx, m.Slot, m.ToID); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		_ = n.Close()
	}
	return moved, errors.Join(errs...)
}

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;delete

// removeDrainedShards deletes the StatefulSet of each shard being removed once it serves no
// slot; the garbage collector deletes its pods, and the cluster forgets their nodes once it
// agrees they have failed (shards.Decide).
func (r *RedisClusterReconciler) removeDrainedShards(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	for _, i := range state.shards.plan.Drained {
		sts := &appsv1.StatefulSet{}
		key := client.ObjectKey{Namespace: rc.Namespace, Name: resources.ShardStatefulSetName(rc, i)}
		if err := r.Get(ctx, key, sts); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("reading StatefulSet %s: %w", key.Name, err)
			}
			continue
		}
		if !sts.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Delete(ctx, sts, client.Preconditions{UID: &sts.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting StatefulSet %s of a drained shard: %w", key.Name, err)
		}
		state.changed = true
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "RemoveShard",
			"Shard %d serves no slot any more: its StatefulSet %s is deleted", i, key.Name)
	}
	return nil
}
