package shards_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

// slotsOf are the ranges of the sorted slots.
func rangesOf(slots map[int]bool) []redis.SlotRange {
	var out []redis.SlotRange
	for s := range redis.SlotCount {
		if !slots[s] {
			continue
		}
		if len(out) > 0 && out[len(out)-1].End == s-1 {
			out[len(out)-1].End = s
		} else {
			out = append(out, r(s, s))
		}
	}
	return out
}

// balanced is a cluster of n shards of one node each, with the slots spread as a new cluster
// of before shards spreads them, the other shards' nodes new empty primaries.
func balanced(n, before int) (*cluster, map[string]map[int]bool) {
	c := newCluster(n, 1)
	owned := map[string]map[int]bool{}
	for i := range n {
		pod := fmt.Sprintf("rc-shard%d-0", i)
		owned[pod] = map[int]bool{}
		if i < before {
			sr := shards.SlotsOf(i, before)
			for s := sr.Start; s <= sr.End; s++ {
				owned[pod][s] = true
			}
		}
	}
	return c, owned
}

// moveAll carries out every Move Decide asks for, round after round, as the executor would,
// and returns the receiving shards' pods of each round.
func moveAll(t *testing.T, c *cluster, owned map[string]map[int]bool, shardCount int) (rounds [][]string, last shards.Plan) {
	t.Helper()
	for range 10 {
		for pod, slots := range owned {
			c.set(pod, "master", "", rangesOf(slots)...)
		}
		p := shards.Decide(c.joined().members, shardCount)
		require.Empty(t, p.Actions)
		require.Empty(t, p.Waiting)
		if len(p.Moves) == 0 {
			return rounds, p
		}
		var pairs []string
		for _, m := range p.Moves {
			require.True(t, owned[m.From][m.Slot], "%s: the giver serves the slot", m)
			require.False(t, m.Importing || m.Migrating || m.Owned, "a new move has no step taken")
			delete(owned[m.From], m.Slot)
			owned[m.To][m.Slot] = true
			pair := m.From + "->" + m.To
			if len(pairs) == 0 || pairs[len(pairs)-1] != pair {
				pairs = append(pairs, pair)
			}
		}
		rounds = append(rounds, pairs)
	}
	t.Fatal("the moves do not end")
	return nil, shards.Plan{}
}

func TestScaleOutFillsOneNewShardAtATimeUntilTheSlotsAreEven(t *testing.T) {
	// Given 3 shards serving all slots, and 2 new shards' empty primaries
	c, owned := balanced(5, 3)
	// When the slots move as Decide says
	rounds, last := moveAll(t, c, owned, 5)
	// Then shard 3 is filled first, from the fullest shards, then shard 4
	assert.Equal(t, [][]string{
		{"rc-shard0-0->rc-shard3-0", "rc-shard2-0->rc-shard3-0"},
		{"rc-shard1-0->rc-shard4-0", "rc-shard2-0->rc-shard4-0"},
	}, rounds)
	// And every shard serves within one slot of even, every slot once
	total := 0
	for pod, slots := range owned {
		assert.InDelta(t, redis.SlotCount/5, len(slots), 1, pod)
		total += len(slots)
	}
	assert.Equal(t, redis.SlotCount, total)
	assert.Empty(t, last.Drained)
}

func TestScaleInDrainsTheLastShardFirstThenLetsItGo(t *testing.T) {
	// Given 5 shards, evenly spread
	c, owned := balanced(5, 5)
	// When the cluster is to have 3
	rounds, last := moveAll(t, c, owned, 3)
	// Then shard 4 is drained first, then shard 3, each to the shards short of their share in turn
	assert.Equal(t, [][]string{
		{"rc-shard4-0->rc-shard0-0", "rc-shard4-0->rc-shard1-0"},
		{"rc-shard3-0->rc-shard1-0", "rc-shard3-0->rc-shard2-0"},
	}, rounds)
	for i := range 3 {
		want := shards.SlotsOf(i, 3)
		assert.Len(t, owned[fmt.Sprintf("rc-shard%d-0", i)], want.End-want.Start+1)
	}
	// And both removed shards may go, once they serve nothing
	assert.Equal(t, []int{3, 4}, last.Drained)
}

func TestAShardBeingRemovedIsNotLetGoWhileItServesSlots(t *testing.T) {
	c, _ := balanced(4, 4)
	p := shards.Decide(c.joined().members, 3)
	assert.Empty(t, p.Moves, "new nodes serve nothing yet")
	c.set("rc-shard3-0", "master", "", r(100, 200)).set("rc-shard0-0", "master", "", r(0, 99), r(201, 5460)).
		set("rc-shard1-0", "master", "", r(5461, 10921)).set("rc-shard2-0", "master", "", r(10922, 16383))
	p = shards.Decide(c.joined().members, 3)
	assert.Empty(t, p.Drained)
	assert.Len(t, p.Moves, 101)
	assert.Equal(t, "rc-shard3-0", p.Moves[0].From)
}

// withOpenSlot sets a node's importing and migrating slots.
func (c *cluster) withOpenSlot(pod string, importing, migrating map[int]string) *cluster {
	m := c.member(pod)
	m.Nodes[0].Importing, m.Nodes[0].Migrating = importing, migrating
	return c
}

func fourShards(c *cluster) *cluster {
	return c.set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard1-0", "master", "", r(5461, 10921)).
		set("rc-shard2-0", "master", "", r(10922, 16383))
}

func TestAnOpenSlotIsFinishedBeforeAnyOtherMove(t *testing.T) {
	tests := []struct {
		name string
		open func(c *cluster)
		// seen changes what the nodes see of each other, once they have joined.
		seen func(c *cluster)
		want shards.Move
	}{{
		"stopped after IMPORTING", func(c *cluster) {
			c.withOpenSlot("rc-shard3-0", map[int]string{5460: "n00"}, nil)
		}, nil, shards.Move{Slot: 5460, ToShard: 3, From: "rc-shard0-0", To: "rc-shard3-0", FromID: "n00", ToID: "n30", Importing: true, ToSeesFrom: true},
	}, {
		"stopped after MIGRATING, keys moving", func(c *cluster) {
			c.withOpenSlot("rc-shard3-0", map[int]string{5460: "n00"}, nil).withOpenSlot("rc-shard0-0", nil, map[int]string{5460: "n30"})
		}, nil, shards.Move{Slot: 5460, ToShard: 3, From: "rc-shard0-0", To: "rc-shard3-0", FromID: "n00", ToID: "n30", Importing: true, Migrating: true, ToSeesFrom: true},
	}, {
		"stopped after the receiver took the slot", func(c *cluster) {
			c.set("rc-shard3-0", "master", "", r(5460, 5460)).withOpenSlot("rc-shard0-0", nil, map[int]string{5460: "n30"})
		}, nil, shards.Move{Slot: 5460, ToShard: 3, From: "rc-shard0-0", To: "rc-shard3-0", FromID: "n00", ToID: "n30", Migrating: true, Owned: true, ToSeesFrom: true},
	}, {
		"the receiver failed over: the move goes on to its shard's new primary", func(c *cluster) {
			c.set("rc-shard3-0", "slave", "n31").set("rc-shard3-1", "master", "").withOpenSlot("rc-shard0-0", nil, map[int]string{5460: "n30"})
		}, nil, shards.Move{Slot: 5460, ToShard: 3, From: "rc-shard0-0", To: "rc-shard3-1", FromID: "n00", ToID: "n31", ToSeesFrom: true},
	}, {
		// The receiver ignored the new primary's claim to the slot it imports, and dropped the
		// old one's slots when it turned replica: it must be told the owner before the keys come.
		"the giver failed over while the receiver imports, which sees nobody serve the slot", func(c *cluster) {
			c.set("rc-shard0-0", "slave", "n01").set("rc-shard0-1", "master", "", r(0, 5460)).
				withOpenSlot("rc-shard3-0", map[int]string{5460: "n00"}, nil)
		}, func(c *cluster) {
			receiver := c.member("rc-shard3-0")
			for i, n := range receiver.Nodes {
				if n.ID == "n01" {
					receiver.Nodes[i].Slots = []redis.SlotRange{r(0, 5459)}
				}
			}
		}, shards.Move{Slot: 5460, ToShard: 3, From: "rc-shard0-1", To: "rc-shard3-0", FromID: "n01", ToID: "n30"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fourShards(newCluster(4, 2))
			for i := range 4 {
				c.set(fmt.Sprintf("rc-shard%d-1", i), "slave", fmt.Sprintf("n%d0", i))
			}
			tt.open(c)
			c.joined()
			if tt.seen != nil {
				tt.seen(c)
			}
			p := shards.Decide(c.members, 4)
			require.Empty(t, p.Actions)
			require.NotEmpty(t, p.Moves)
			assert.Equal(t, tt.want, p.Moves[0])
			assert.Len(t, p.Moves, 1, "nothing else moves while a slot is open")
		})
	}
}

func TestAnOpenSlotWhoseOtherEndIsGoneIsClosed(t *testing.T) {
	// shard 0's primary migrates a slot to a node that is no pod's (and forgotten)
	c := fourShards(newCluster(3, 1)).withOpenSlot("rc-shard0-0", nil, map[int]string{42: "gone"})
	p := shards.Decide(c.joined().members, 3)
	assert.Equal(t, map[shards.ActionKind][]string{shards.Stable: {"rc-shard0-0 closes slot 42, whose other end is gone"}}, kinds(p))
	assert.Empty(t, p.Moves)
}

func TestNoSlotMovesWhileANodeDoesNotAnswerOrAGoneNodeIsStillKnown(t *testing.T) {
	c, _ := balanced(4, 3)
	fourShards(c)
	c.joined()
	require.NotEmpty(t, shards.Decide(c.members, 4).Moves)

	c.member("rc-shard1-0").Nodes = nil
	assert.Empty(t, shards.Decide(c.members, 4).Moves, "a node that does not answer")

	c, _ = balanced(4, 3)
	fourShards(c).joined()
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, node("gone", "master", ""))
	}
	p := shards.Decide(c.members, 4)
	assert.Empty(t, p.Moves, "a node no pod is, not yet failed")
	assert.Contains(t, p.Waiting, "no pod's")
}
