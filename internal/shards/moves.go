package shards

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/org/redis-operator/internal/redis"
)

// Moving slots between shards (scale-out, scale-in). A slot moves in named steps, the order
// Redis Cluster documents: the receiving primary imports it (SETSLOT IMPORTING), the giving
// primary migrates it (SETSLOT MIGRATING), the giving primary's keys of the slot move in
// batches (MIGRATE), then every primary takes the receiver as the slot's owner (SETSLOT NODE,
// the receiver first). Each step is kept in the nodes (nodes.conf), so an operator that stops
// between two steps finds the slot open and finishes the move.
//
// The safety rule decideMoves keeps, on top of the package's: no slot is left open, and no key
// is left where no node serves it. An open slot is always finished first, toward the shard it
// was moving to (whichever node is that shard's primary now, after a failover); it is rolled back
// (SETSLOT STABLE) only when its other end is no node of the cluster any more, whose keys are
// gone with it. A slot is given away (SETSLOT NODE on the giving primary) only once the giving
// primary holds none of its keys: Redis refuses it otherwise, and the executor checks first.
// Slots move only while every node answers and every node is in one cluster, and one shard
// moves at a time: the shard being drained on a scale-in, or the shard being filled on a
// scale-out.

// Move is one slot to move from one shard's primary to another's, and the steps already taken.
type Move struct {
	Slot int
	// FromShard and ToShard are the shards' indexes, From and To their primaries' pods.
	FromShard, ToShard int
	From, To           string
	// FromID and ToID are the two primaries' node ids.
	FromID, ToID string
	// Importing: To imports the slot from From. Migrating: From migrates it to To.
	Importing, Migrating bool
	// Owned: To serves the slot already; only the others' SETSLOT NODE is left.
	Owned bool
	// ToSeesFrom: To's own view has From serving the slot. A node refuses the keys of a slot it
	// sees nobody serve, importing it or not (CLUSTERDOWN Hash slot not served); a receiver
	// loses sight of the owner when the giver fails over mid-move (it ignores claims to a slot
	// it imports, and drops the old giver's slots when that one turns replica).
	ToSeesFrom bool
}

func (m Move) String() string {
	return fmt.Sprintf("slot %d moves from %s to %s", m.Slot, m.From, m.To)
}

// Stable is an open slot to close on a node, whose other end is gone: CLUSTER SETSLOT STABLE.
const Stable ActionKind = "Stable"

// desiredSlotCount is how many slots shard i serves out of shards once balanced: SlotsOf's
// counts, which differ by at most one; none for a shard being removed.
func desiredSlotCount(i, shards int) int {
	if i >= shards {
		return 0
	}
	r := SlotsOf(i, shards)
	return r.End - r.Start + 1
}

// primariesOf is each shard's primary member, by shard index.
func primariesOf(plan Plan, answering []Member) map[int]Member {
	byPod := map[string]Member{}
	for _, m := range answering {
		byPod[m.Pod] = m
	}
	out := map[int]Member{}
	for _, sh := range plan.Shards {
		if m, ok := byPod[sh.Primary]; ok {
			out[sh.Index] = m
		}
	}
	return out
}

// decideMoves returns the slots to move now, in order, the open slots to close, and the shards
// at or past shards that are drained and may go (see the safety rule above). waiting says why
// nothing can move yet.
func decideMoves(plan Plan, answering []Member, shards int) (moves []Move, stable []Action, drained []int, waiting string) {
	primaries := primariesOf(plan, answering)
	shardOfID := map[string]int{}
	for _, m := range answering {
		shardOfID[selfOf(m).ID] = m.Shard
	}

	moves, stable, waiting = openMoves(primaries, shardOfID)
	if len(moves) > 0 || len(stable) > 0 || waiting != "" {
		return moves, stable, nil, waiting
	}
	owner, counts, waiting := slotOwners(primaries)
	if waiting != "" {
		return nil, nil, nil, waiting
	}
	indexes := make([]int, 0, len(plan.Shards))
	for _, sh := range plan.Shards {
		if _, ok := primaries[sh.Index]; !ok {
			return nil, nil, nil, fmt.Sprintf("shard %d has no primary; slots wait", sh.Index)
		}
		indexes = append(indexes, sh.Index)
		if sh.Index >= shards && counts[sh.Index] == 0 {
			drained = append(drained, sh.Index)
		}
	}
	surplus := func(i int) int { return counts[i] - desiredSlotCount(i, shards) }
	donors, receivers := donorsAndReceivers(indexes, shards, counts, surplus)
	if len(donors) == 0 || len(receivers) == 0 {
		return nil, nil, drained, ""
	}

	// Each donor gives its highest slots, as many as it has over its share (all, for a shard
	// being removed), to the receivers in turn, each up to its share.
	give := map[int][]int{}
	for s := redis.SlotCount - 1; s >= 0; s-- {
		if i := owner[s]; i >= 0 && slices.Contains(donors, i) && len(give[i]) < surplus(i) {
			give[i] = append(give[i], s)
		}
	}
	r := 0
	need := -surplus(receivers[0])
	for _, d := range donors {
		for _, s := range give[d] {
			for need == 0 {
				r++
				if r == len(receivers) {
					return moves, nil, drained, ""
				}
				need = -surplus(receivers[r])
			}
			from, to := primaries[d], primaries[receivers[r]]
			moves = append(moves, Move{Slot: s, FromShard: d, ToShard: receivers[r], From: from.Pod, To: to.Pod,
				FromID: selfOf(from).ID, ToID: selfOf(to).ID, ToSeesFrom: to.sees(selfOf(from).ID, s)})
			need--
		}
	}
	return moves, nil, drained, ""
}

// slotOwners is the shard serving each slot (-1 for none) and how many each serves, by the
// primaries' own word; waiting when two primaries claim one slot.
func slotOwners(primaries map[int]Member) ([]int, map[int]int, string) {
	counts := map[int]int{}
	owner := make([]int, redis.SlotCount)
	for s := range owner {
		owner[s] = -1
	}
	for shard, p := range primaries {
		for _, r := range selfOf(p).Slots {
			for s := max(r.Start, 0); s <= r.End && s < redis.SlotCount; s++ {
				if owner[s] >= 0 {
					return nil, nil, fmt.Sprintf("slot %d is served by the primaries of shards %d and %d; waiting for the cluster to agree", s, owner[s], shard)
				}
				owner[s] = shard
				counts[shard]++
			}
		}
	}
	return owner, counts, ""
}

// donorsAndReceivers: one shard moves at a time. The last shard being removed that still
// serves slots gives them to every shard short of its share; otherwise the first shard short
// of its share receives from every shard over it, the fullest first.
func donorsAndReceivers(indexes []int, shards int, counts map[int]int, surplus func(int) int) (donors, receivers []int) {
	for _, i := range slices.Backward(indexes) {
		if i >= shards && counts[i] > 0 {
			donors = []int{i}
			break
		}
	}
	for _, i := range indexes {
		if surplus(i) < 0 {
			receivers = append(receivers, i)
		}
	}
	if len(donors) > 0 {
		return donors, receivers
	}
	if len(receivers) > 0 {
		receivers = receivers[:1]
	}
	for _, i := range indexes {
		if surplus(i) > 0 {
			donors = append(donors, i)
		}
	}
	slices.SortStableFunc(donors, func(a, b int) int { return cmp.Compare(surplus(b), surplus(a)) })
	return donors, receivers
}

// openMoves are the slots a primary imports or migrates: each is finished toward the shard it
// was moving to, or closed when its other end is no node of the cluster.
func openMoves(primaries map[int]Member, shardOfID map[string]int) ([]Move, []Action, string) {
	type open struct{ from, to int }
	opens := map[int]open{}
	var stable []Action
	shardsInOrder := slices.Sorted(maps.Keys(primaries))
	for _, shard := range shardsInOrder {
		p := primaries[shard]
		self := selfOf(p)
		for slot, id := range self.Migrating {
			if to, ok := shardOfID[id]; ok && to != shard {
				opens[slot] = open{from: shard, to: to}
			} else {
				stable = append(stable, Action{Kind: Stable, On: p.Pod, Slot: slot})
			}
		}
		for slot, id := range self.Importing {
			if from, ok := shardOfID[id]; ok && from != shard {
				opens[slot] = open{from: from, to: shard}
			} else {
				stable = append(stable, Action{Kind: Stable, On: p.Pod, Slot: slot})
			}
		}
	}
	slices.SortFunc(stable, func(a, b Action) int { return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.On, b.On)) })
	var moves []Move
	for _, slot := range slices.Sorted(maps.Keys(opens)) {
		o := opens[slot]
		from, okFrom := primaries[o.from]
		to, okTo := primaries[o.to]
		if !okFrom || !okTo {
			return nil, nil, fmt.Sprintf("slot %d is moving from shard %d to shard %d, and one of them has no primary", slot, o.from, o.to)
		}
		f, t := selfOf(from), selfOf(to)
		moves = append(moves, Move{Slot: slot, FromShard: o.from, ToShard: o.to, From: from.Pod, To: to.Pod, FromID: f.ID, ToID: t.ID,
			Importing: t.Importing[slot] == f.ID, Migrating: f.Migrating[slot] == t.ID, Owned: t.Serves(slot), ToSeesFrom: to.sees(f.ID, slot)})
	}
	return moves, stable, ""
}

// sees is true when the member's view has the node id serving the slot.
func (m Member) sees(id string, slot int) bool {
	n, ok := m.node(id)
	return ok && n.Serves(slot)
}

// Describe says what the moves do, for the status: the shard being drained or filled, and how
// many slots are left to move.
func Describe(moves []Move, shards int) string {
	if len(moves) == 0 {
		return ""
	}
	if m := moves[0]; m.FromShard >= shards {
		return fmt.Sprintf("shard %d is being removed: %d of its slots are left to move to the other shards", m.FromShard, len(moves))
	}
	return fmt.Sprintf("slots are moving to shard %d: %d left to move", moves[0].ToShard, len(moves))
}
