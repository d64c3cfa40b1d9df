package shards

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/org/redis-operator/internal/redis"
)

// The executor carries out a Plan on the nodes, as Decide made it: its cluster commands (Act)
// and its slot moves (MoveSlots), each move's remaining steps in order. It decides nothing:
// the safety rule is Decide's (shards.go, moves.go).

// ClusterNode is what Act needs of a node (redis.Node has it).
type ClusterNode interface {
	ClusterMeet(ctx context.Context, addr string, bus int) error
	ClusterAnnounce(ctx context.Context, a redis.Announced) error
	ClusterAddSlots(ctx context.Context, ranges []redis.SlotRange) error
	ClusterReplicate(ctx context.Context, nodeID string) error
	ClusterForget(ctx context.Context, nodeID string) error
	ClusterSetSlotStable(ctx context.Context, slot int) error
}

// Act sends one action's cluster command to its node.
func Act(ctx context.Context, n ClusterNode, a Action) error {
	switch a.Kind {
	case Meet, Rejoin:
		return n.ClusterMeet(ctx, a.Addr, a.Bus)
	case Announce:
		return n.ClusterAnnounce(ctx, a.Announced)
	case AddSlots:
		return n.ClusterAddSlots(ctx, a.Ranges)
	case Replicate:
		return n.ClusterReplicate(ctx, a.NodeID)
	case Forget:
		return n.ClusterForget(ctx, a.NodeID)
	case Stable:
		return n.ClusterSetSlotStable(ctx, a.Slot)
	}
	return fmt.Errorf("unknown cluster command %q", a.Kind)
}

// Carry sends each of actions' cluster commands to its node (addrs: each pod's address), in
// order; one that fails does not stop the others. It returns the actions carried out, for the
// controller's Events, and the failures joined.
func Carry(ctx context.Context, dial redis.Dialer, actions []Action, addrs map[string]string) (done []Action, err error) {
	var errs []error
	for _, a := range actions {
		n := dial(addrs[a.On])
		err := Act(ctx, n, a)
		_ = n.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		done = append(done, a)
	}
	return done, errors.Join(errs...)
}

// ParseLayout is the slots each shard served, as a backup recorded them ("0-5460", "5461").
func ParseLayout(slots [][]string) (Layout, error) {
	layout := make(Layout, len(slots))
	for i, ranges := range slots {
		for _, s := range ranges {
			rg, err := redis.ParseSlotRange(s)
			if err != nil {
				return nil, fmt.Errorf("shard %d: %w", i, err)
			}
			layout[i] = append(layout[i], rg)
		}
	}
	return layout, nil
}

// Answer is what a node says of the cluster.
type Answer struct {
	// Nodes is its answer to CLUSTER NODES.
	Nodes []redis.ClusterNode
	// Down is true when it says the cluster is down (CLUSTER INFO's cluster_state).
	Down bool
	// Announcing is the address it announces.
	Announcing redis.Announced
}

// Ask is what the node at addr says of the cluster; an error (and no nodes) when it does not
// answer, with why.
func Ask(ctx context.Context, dial redis.Dialer, addr string) (Answer, error) {
	n := dial(addr)
	defer n.Close()
	nodes, err := n.ClusterNodes(ctx)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Nodes: nodes}
	info, err := n.ClusterInfo(ctx)
	a.Down = err == nil && info.State != "ok"
	if a.Announcing, err = n.ClusterAnnounced(ctx); err != nil {
		return Answer{}, err
	}
	return a, nil
}

// TakeOver has the replica at addr take its primary's slots over with a manual CLUSTER
// FAILOVER: the primary stops taking writes until the replica has all of them, then hands over.
func TakeOver(ctx context.Context, dial redis.Dialer, addr string) error {
	n := dial(addr)
	defer n.Close()
	return n.ClusterFailover(ctx)
}

// Pace is how hard a slot move presses on the primaries: their clients wait behind each MIGRATE
// (the giver is blocked while it sends the keys) and each SETSLOT step (each writes nodes.conf),
// and the keys moved take CPU from the machines the writers share.
type Pace struct {
	// KeysPerMigrate is how many keys one MIGRATE carries.
	KeysPerMigrate int
	// Share is the share of the time the move may keep the primaries busy, in (0, 1]: after a
	// MIGRATE or a step's SETSLOTs that took d, the move rests d*(1-Share)/Share. 1 never rests.
	Share float64
}

// DefaultPace is what BenchmarkScaleOutShards chose (docs/benchmarks.md, "Slot moves").
var DefaultPace = Pace{KeysPerMigrate: 100, Share: 1}

// Valid says what is wrong with p, if anything.
func (p Pace) Valid() error {
	if p.KeysPerMigrate < 1 {
		return fmt.Errorf("keys per MIGRATE %d: want 1 or more", p.KeysPerMigrate)
	}
	if !(p.Share > 0 && p.Share <= 1) {
		return fmt.Errorf("share %v of the primaries' time: want more than 0, at most 1", p.Share)
	}
	return nil
}

// busy runs work, then rests as the pace asks for the time it took.
func (p Pace) busy(ctx context.Context, work func() error) error {
	start := time.Now()
	err := work()
	if err != nil || p.Share >= 1 {
		return err
	}
	rest := time.Duration(float64(time.Since(start)) * (1 - p.Share) / p.Share)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rest):
		return nil
	}
}

// Moved is what MoveSlots did: the slots moved between each two primaries ("a to b"), and the
// keys they carried.
type Moved struct {
	Slots map[string]int
	Keys  int
}

// MoveSlots carries out moves a step of slotsPerStep slots at a time, in order, at pace, until
// budget is spent (one step at least) or a step fails. addrs are the members' addresses by pod;
// primaries, every shard's primary: each learns of a step at once.
func MoveSlots(ctx context.Context, dial redis.Dialer, moves []Move, addrs map[string]string, primaries []string, pace Pace, budget time.Duration) (Moved, error) {
	start := time.Now()
	done := Moved{Slots: map[string]int{}}
	for _, step := range movesInSteps(moves) {
		if len(done.Slots) > 0 && time.Since(start) > budget {
			break
		}
		n, err := moveStep(ctx, dial, step, addrs, primaries, pace)
		done.Keys += n
		if err != nil {
			return done, err
		}
		done.Slots[step[0].From+" to "+step[0].To] += len(step)
	}
	return done, nil
}

// slotsPerStep is how many slots move together: each SETSLOT step is one pipeline, and one
// write of nodes.conf, for them all (a nodes.conf write is an fsync: one per slot and step
// made a slot take about 4ms).
const slotsPerStep = 32

// movesInSteps cuts the moves into steps of up to slotsPerStep slots between the same two
// primaries, in order.
func movesInSteps(moves []Move) [][]Move {
	var steps [][]Move
	for _, m := range moves {
		if n := len(steps); n > 0 && len(steps[n-1]) < slotsPerStep && steps[n-1][0].From == m.From && steps[n-1][0].To == m.To {
			steps[n-1] = append(steps[n-1], m)
			continue
		}
		steps = append(steps, []Move{m})
	}
	return steps
}

// moveStep takes the remaining steps of moves between the same two primaries, and returns how
// many keys it moved.
func moveStep(ctx context.Context, dial redis.Dialer, moves []Move, addrs map[string]string, primaries []string, pace Pace) (int, error) {
	first := moves[0]
	from, to := dial(addrs[first.From]), dial(addrs[first.To])
	defer from.Close()
	defer to.Close()
	var unseen, importing, migrating, open, all []int
	for _, m := range moves {
		all = append(all, m.Slot)
		if m.Owned {
			continue
		}
		open = append(open, m.Slot)
		if !m.ToSeesFrom {
			unseen = append(unseen, m.Slot)
		}
		if !m.Importing {
			importing = append(importing, m.Slot)
		}
		if !m.Migrating {
			migrating = append(migrating, m.Slot)
		}
	}
	// The receiver refuses the keys of a slot it sees nobody serve: it is told the giver's
	// claim first (SETSLOT NODE of another node keeps its importing state).
	if err := setSlots(ctx, to, redis.SlotNode, first.FromID, unseen); err != nil {
		return 0, fmt.Errorf("%s takes %s as the owner of slots %v: %w", first.To, first.From, unseen, err)
	}
	if err := setSlots(ctx, to, redis.SlotImporting, first.FromID, importing); err != nil {
		return 0, fmt.Errorf("%s imports slots %v from %s: %w", first.To, importing, first.From, err)
	}
	if err := setSlots(ctx, from, redis.SlotMigrating, first.ToID, migrating); err != nil {
		return 0, fmt.Errorf("%s migrates slots %v to %s: %w", first.From, migrating, first.To, err)
	}
	// Every slot's keys, even of a slot the receiver owns already: a giver stopped between the
	// two SETSLOT NODE may still hold one, and Redis would refuse it the last step for ever.
	moved, err := migrateKeys(ctx, from, addrs[first.To], all, pace)
	if err != nil {
		return moved, fmt.Errorf("moving the keys of slots %v from %s to %s: %w", all, first.From, first.To, err)
	}
	return moved, pace.busy(ctx, func() error { return giveSlots(ctx, dial, first, open, all, from, to, addrs, primaries) })
}

// giveSlots makes the receiver the owner of the step's slots, on the receiver, the giver and the
// other primaries, in that order.
func giveSlots(ctx context.Context, dial redis.Dialer, first Move, open, all []int, from, to slotSetter, addrs map[string]string, primaries []string) error {
	// The receiver first: once it owns the slots, the giver sends its clients there.
	if err := setSlots(ctx, to, redis.SlotNode, first.ToID, open); err != nil {
		return fmt.Errorf("%s takes slots %v: %w", first.To, open, err)
	}
	// Redis refuses this while the giver still holds a key of a slot.
	if err := setSlots(ctx, from, redis.SlotNode, first.ToID, all); err != nil {
		return fmt.Errorf("%s gives slots %v: %w", first.From, all, err)
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
	return errors.Join(errs...)
}

// slotSetter is what setSlots needs of a node.
type slotSetter interface {
	ClusterSetSlots(ctx context.Context, state redis.SlotState, id string, slots ...int) error
}

// migrator is what migrateKeys needs of the giving node.
type migrator interface {
	ClusterKeysInSlot(ctx context.Context, slot, count int) ([]string, error)
	Migrate(ctx context.Context, addr string, keys []string) error
}

func setSlots(ctx context.Context, n slotSetter, state redis.SlotState, id string, slots []int) error {
	if len(slots) == 0 {
		return nil
	}
	return n.ClusterSetSlots(ctx, state, id, slots...)
}

// migrateKeys moves the slots' keys from the giving primary to the receiver at addr, slot by
// slot, up to pace.KeysPerMigrate per MIGRATE: each MIGRATE blocks the giver while it runs, so
// its clients wait for one batch at most, and the pace rests after each. A slot that gave fewer
// keys than a batch is done: while a slot migrates, the giver creates no key in it (clients are
// sent to the receiver).
func migrateKeys(ctx context.Context, from migrator, addr string, slots []int, pace Pace) (int, error) {
	moved := 0
	for _, slot := range slots {
		for {
			keys, err := from.ClusterKeysInSlot(ctx, slot, pace.KeysPerMigrate)
			if err != nil {
				return moved, fmt.Errorf("slot %d: %w", slot, err)
			}
			if len(keys) > 0 {
				if err := pace.busy(ctx, func() error { return from.Migrate(ctx, addr, keys) }); err != nil {
					return moved, fmt.Errorf("slot %d: %w", slot, err)
				}
				moved += len(keys)
			}
			if len(keys) < pace.KeysPerMigrate {
				break
			}
		}
	}
	return moved, nil
}
