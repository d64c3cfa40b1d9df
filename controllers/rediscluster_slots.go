package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// moveSlots carries out the plan's moves until the budget is spent, a step of slotsPerStep
// slots at a time.
func (r *RedisClusterReconciler) moveSlots(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
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
	for _, step := range movesInSteps(plan.Moves) {
		if len(moved) > 0 && time.Since(start) > moveBudget {
			break
		}
		var n int
		n, err = moveStep(ctx, state.dial, step, state.shards.addrs, primaries)
		keys += n
		if err != nil {
			break
		}
		moved[step[0].From+" to "+step[0].To] += len(step)
		state.changed = true
	}
	if len(moved) > 0 {
		var parts []string
		for pair, n := range moved {
			parts = append(parts, fmt.Sprintf("%d slots from %s", n, pair))
		}
		slices.Sort(parts)
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "MoveSlots",
			"Moved %s, with %d keys", strings.Join(parts, ", "), keys)
		if err == nil {
			// Back at once: for the rest, or the next shard's moves.
			return waitFor(movingRequeue, cachev1.ReasonSlotsMoving, slotsMoving(rc, *plan))
		}
	}
	return err
}

// slotsPerStep is how many slots move together: each SETSLOT step is one pipeline, and one
// write of nodes.conf, for them all (a nodes.conf write is an fsync: one per slot and step
// made a slot take about 4ms).
const slotsPerStep = 32

// movesInSteps cuts the moves into steps of up to slotsPerStep slots between the same two
// primaries, in order.
func movesInSteps(moves []shards.Move) [][]shards.Move {
	var steps [][]shards.Move
	for _, m := range moves {
		if n := len(steps); n > 0 && len(steps[n-1]) < slotsPerStep && steps[n-1][0].From == m.From && steps[n-1][0].To == m.To {
			steps[n-1] = append(steps[n-1], m)
			continue
		}
		steps = append(steps, []shards.Move{m})
	}
	return steps
}

// moveStep takes the remaining steps of moves between the same two primaries, and returns how
// many keys it moved.
func moveStep(ctx context.Context, dial func(string) redis.Node, moves []shards.Move, addrs map[string]string, primaries []string) (int, error) {
	first := moves[0]
	from, to := dial(addrs[first.From]), dial(addrs[first.To])
	defer from.Close()
	defer to.Close()
	var importing, migrating, open, all []int
	for _, m := range moves {
		all = append(all, m.Slot)
		if m.Owned {
			continue
		}
		open = append(open, m.Slot)
		if !m.Importing {
			importing = append(importing, m.Slot)
		}
		if !m.Migrating {
			migrating = append(migrating, m.Slot)
		}
	}
	if err := setSlots(ctx, to, redis.SlotImporting, first.FromID, importing); err != nil {
		return 0, fmt.Errorf("%s imports slots %v from %s: %w", first.To, importing, first.From, err)
	}
	if err := setSlots(ctx, from, redis.SlotMigrating, first.ToID, migrating); err != nil {
		return 0, fmt.Errorf("%s migrates slots %v to %s: %w", first.From, migrating, first.To, err)
	}
	// Every slot's keys, even of a slot the receiver owns already: a giver stopped between the
	// two SETSLOT NODE may still hold one, and Redis would refuse it the last step for ever.
	moved, err := migrateKeys(ctx, from, addrs[first.To], all)
	if err != nil {
		return moved, fmt.Errorf("moving the keys of slots %v from %s to %s: %w", all, first.From, first.To, err)
	}
	// The receiver first: once it owns the slots, the giver sends its clients there.
	if err := setSlots(ctx, to, redis.SlotNode, first.ToID, open); err != nil {
		return moved, fmt.Errorf("%s takes slots %v: %w", first.To, open, err)
	}
	// Redis refuses this while the giver still holds a key of a slot.
	if err := setSlots(ctx, from, redis.SlotNode, first.ToID, all); err != nil {
		return moved, fmt.Errorf("%s gives slots %v: %w", first.From, all, err)
	}
	// The other primaries learn it by gossip too; told at once, they send no client to the
	// giver. Told together: each writes its nodes.conf.
	others := slices.DeleteFunc(slices.Clone(primaries), func(p string) bool { return p == first.From || p == first.To })
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, p := range others {
		wg.Go(func() {
			n := dial(addrs[p])
			defer n.Close()
			if err := setSlots(ctx, n, redis.SlotNode, first.ToID, all); err != nil {
				errs[i] = fmt.Errorf("%s takes %s as the owner of slots %v: %w", p, first.To, all, err)
			}
		})
	}
	wg.Wait()
	return moved, errors.Join(errs...)
}

func setSlots(ctx context.Context, n redis.Node, state redis.SlotState, id string, slots []int) error {
	if len(slots) == 0 {
		return nil
	}
	return n.ClusterSetSlots(ctx, state, id, slots...)
}

// migrateKeys moves the slots' keys from the giving primary to the receiver at addr, slot by
// slot, up to keysPerMigrate per MIGRATE: each MIGRATE blocks the giver while it runs, so its
// clients wait for one batch at most. A slot that gave fewer than keysPerMigrate is done:
// while a slot migrates, the giver creates no key in it (clients are sent to the receiver).
func migrateKeys(ctx context.Context, from redis.Node, addr string, slots []int) (int, error) {
	moved := 0
	for _, slot := range slots {
		for {
			keys, err := from.ClusterKeysInSlot(ctx, slot, keysPerMigrate)
			if err != nil {
				return moved, fmt.Errorf("slot %d: %w", slot, err)
			}
			if len(keys) > 0 {
				if err := from.Migrate(ctx, addr, keys); err != nil {
					return moved, fmt.Errorf("slot %d: %w", slot, err)
				}
				moved += len(keys)
			}
			if len(keys) < keysPerMigrate {
				break
			}
		}
	}
	return moved, nil
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
