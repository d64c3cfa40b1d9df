package shards_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

// failedEverywhere marks every entry but a node's own as failed and unreachable: what each
// node's table says once nobody reached anybody for a node timeout.
func failedEverywhere(c *cluster) *cluster {
	for i := range c.members {
		for k := range c.members[i].Nodes {
			if n := &c.members[i].Nodes[k]; !n.Myself() {
				n.Flags = append(n.Flags, "fail")
				n.Connected = false
			}
		}
	}
	return c
}

func TestEveryPodBackAtANewAddressIsIntroducedAgainAndNothingElseIsSent(t *testing.T) {
	// Given a formed cluster whose six pods all came back at new addresses with their nodes.conf
	c := formed()
	for i, m := range c.members {
		c.moved(m.Pod, fmt.Sprintf("10.0.1.%d:6379", i+1))
	}
	failedEverywhere(c)

	// Then each node is told the new address of each other node, by ID, and nothing else is
	// sent: no slot is assigned, no replica repointed, no node forgotten
	p := shards.Decide(c.members, 3)
	got := kinds(p)
	assert.Len(t, got[shards.Rejoin], 6*5)
	assert.Equal(t, []shards.ActionKind{shards.Rejoin}, keysOf(got))
	assert.Contains(t, got[shards.Rejoin], "rc-shard0-0 meets n21 at its new address 10.0.1.6:6379")
	assert.Contains(t, p.Waiting, "6 Redis nodes came back at new addresses")
	assert.Empty(t, p.Moves)
	// And the shards are as the nodes' own tables say: the same primaries with the same slots
	assert.Equal(t, "rc-shard1-0", p.Shards[1].Primary)
	assert.Equal(t, []redis.SlotRange{r(5461, 10921)}, p.Shards[1].Slots)

	// When the nodes know each other's new addresses again
	c.joined()
	// Then there is nothing to do
	p = shards.Decide(c.members, 3)
	assert.Empty(t, p.Actions)
	assert.Empty(t, p.Waiting)
}

func TestRejoinInEveryPartialCase(t *testing.T) {
	tests := []struct {
		name    string
		cluster func() *cluster
		// rejoin are the rejoins sent; others, the other kinds of command sent
		rejoin  int
		others  []shards.ActionKind
		waiting string
	}{
		{"one shard's pods back at new addresses: every node is told theirs, the others' stand", func() *cluster {
			return formed().moved("rc-shard1-0", "10.0.1.1:6379").moved("rc-shard1-1", "10.0.1.2:6379")
		}, 2*4 + 2, nil, "2 Redis nodes came back at new addresses"},
		{"some pods back, some not answering yet: the answering ones are introduced to each other", func() *cluster {
			c := formed()
			for i, m := range c.members {
				c.moved(m.Pod, fmt.Sprintf("10.0.1.%d:6379", i+1))
			}
			c.member("rc-shard2-0").Nodes = nil
			c.member("rc-shard2-1").Nodes = nil
			return failedEverywhere(c)
		}, 4 * 3, nil, "4 Redis nodes came back at new addresses"},
		{"a pod without an address yet is not introduced", func() *cluster {
			c := formed().moved("rc-shard0-1", "10.0.1.1:6379")
			c.member("rc-shard0-1").Addr = ""
			return c
		}, 0, nil, ""},
		{"a node known at no address (noaddr) is told it", func() *cluster {
			c := formed()
			n := &c.member("rc-shard0-0").Nodes[1]
			n.Addr, n.Flags = "", []string{"slave", "noaddr"}
			return c
		}, 1, nil, "1 Redis nodes came back"},
		{"a node whose nodes.conf is gone is met as a new node, its old ID left to be forgotten", func() *cluster {
			c := formed().moved("rc-shard1-1", "10.0.1.9:6379").set("rc-shard1-1", "master", "")
			c.member("rc-shard1-1").Nodes = c.member("rc-shard1-1").Nodes[:1]
			c.member("rc-shard1-1").Nodes[0].ID = "n11-new"
			return c
		}, 0, []shards.ActionKind{shards.Meet}, "rc-shard1-1 does not know rc-shard1-0 yet"},
		{"two pods claiming one ID: nothing at all is sent", func() *cluster {
			c := formed().moved("rc-shard0-0", "10.0.1.1:6379")
			c.member("rc-shard2-1").Nodes[0].ID = "n00"
			return c
		}, 0, nil, "pods rc-shard0-0, rc-shard2-1 all claim Redis node ID n00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := shards.Decide(tt.cluster().members, 3)
			got := kinds(p)
			assert.Len(t, got[shards.Rejoin], tt.rejoin)
			delete(got, shards.Rejoin)
			assert.ElementsMatch(t, tt.others, keysOf(got))
			if tt.rejoin > 0 {
				for _, a := range p.Actions {
					assert.Equal(t, shards.Rejoin, a.Kind, "a rejoin goes alone: %s", a)
				}
			}
			if tt.waiting == "" {
				assert.Empty(t, p.Waiting)
			} else {
				assert.Contains(t, p.Waiting, tt.waiting)
			}
		})
	}
}

func keysOf(m map[shards.ActionKind][]string) []shards.ActionKind {
	var out []shards.ActionKind
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAReplicaWhosePrimaryLostItsVolumeIsNeverPointedAtTheEmptyNode(t *testing.T) {
	// Given shard 1's primary back as a new, empty node (its volume lost): its replica still
	// replicates the old node, which serves the shard's slots in every table
	c := formed()
	c.set("rc-shard1-0", "master", "")
	c.member("rc-shard1-0").Nodes[0].ID = "n10-new"
	c.joined()
	for i := range c.members {
		if c.members[i].Pod != "rc-shard1-0" {
			c.members[i].Nodes = append(c.members[i].Nodes, node("n10", "master,fail?", "", r(5461, 10921)))
		}
	}

	// Then the replica is not repointed at the empty node (it would drop the shard's keys), no
	// slot is given, and the shard waits for Redis Cluster to promote the replica
	p := shards.Decide(c.members, 3)
	got := kinds(p)
	assert.Empty(t, got[shards.Replicate])
	assert.Empty(t, got[shards.AddSlots])
	assert.Contains(t, p.Waiting, "rc-shard1-1 replicates a primary that serves shard 1's slots and is gone")

	// When Redis Cluster promoted the replica: the new node is attached to it
	c.set("rc-shard1-1", "master", "", r(5461, 10921))
	c.joined()
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, node("n10", "master,fail", ""))
	}
	got = kinds(shards.Decide(c.members, 3))
	assert.Equal(t, []string{"rc-shard1-0 replicates n11"}, got[shards.Replicate])
}

func TestAShardWhoseEveryNodeCameBackEmptyGetsItsSlotsAgainOnceItsOldPrimaryIsForgotten(t *testing.T) {
	// Given shard 1's two nodes back empty with new IDs (no storage), the old primary failed and
	// still serving the shard's slots in every table, and nobody replicating it
	c := formed()
	c.set("rc-shard1-0", "master", "").set("rc-shard1-1", "master", "")
	c.member("rc-shard1-0").Nodes[0].ID = "n10-new"
	c.member("rc-shard1-1").Nodes[0].ID = "n11-new"
	c.joined()
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, node("n10", "master,fail", "", r(5461, 10921)), node("n11", "slave,fail", "n10"))
	}

	// Then both old nodes are forgotten everywhere, and no slot is given while one still owns them
	got := kinds(shards.Decide(c.members, 3))
	assert.Len(t, got[shards.Forget], 2*6)
	assert.Empty(t, got[shards.AddSlots])

	// And while a node still replicates the old primary, it is not forgotten: Redis promotes it
	c.member("rc-shard1-1").Nodes[0].Flags = []string{"myself", "slave"}
	c.member("rc-shard1-1").Nodes[0].PrimaryID = "n10"
	got = kinds(shards.Decide(c.members, 3))
	for _, f := range got[shards.Forget] {
		assert.NotContains(t, f, "forgets n10", "n10 has a replica")
	}

	// When every node forgot them: the shard's new primary gets the slots again
	c = formed()
	c.set("rc-shard1-0", "master", "").set("rc-shard1-1", "master", "")
	c.member("rc-shard1-0").Nodes[0].ID = "n10-new"
	c.member("rc-shard1-1").Nodes[0].ID = "n11-new"
	c.set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard2-0", "master", "", r(10922, 16383))
	got = kinds(shards.Decide(c.joined().members, 3))
	assert.Equal(t, []string{"rc-shard1-0 serves slots [5461-10921]"}, got[shards.AddSlots])
}

func TestAReplicaStillFollowingItsPrimarysOldAddressIsToldItsPrimaryAgain(t *testing.T) {
	// Given a whole restart the nodes have rejoined from: every table has every node's new
	// address, and each replica's replication follows its primary there
	c := formed()
	for i, m := range c.members {
		c.moved(m.Pod, fmt.Sprintf("10.0.1.%d:6379", i+1))
	}
	c.joined()
	for _, pod := range []string{"rc-shard0-1", "rc-shard1-1", "rc-shard2-1"} {
		primary := c.member(pod[:len(pod)-1] + "0")
		c.member(pod).Following = primary.Addr
	}
	p := shards.Decide(c.members, 3)
	assert.Empty(t, p.Actions)
	assert.Equal(t, []string{"rc-shard1-1"}, p.Shards[1].Replicas)

	// When one replica's replication still follows its primary's old address (Redis learned
	// the new one from gossip, which does not move replication)
	c.member("rc-shard1-1").Following = "127.0.0.11:6379"
	p = shards.Decide(c.members, 3)

	// Then it, and only it, is told its primary again, and it does not count as attached
	assert.Equal(t, map[shards.ActionKind][]string{shards.Replicate: {
		"rc-shard1-1 replicates n10 at its address now: its replication still followed 127.0.0.11:6379"}}, kinds(p))
	assert.Empty(t, p.Shards[1].Replicas)
	assert.Equal(t, []string{"rc-shard0-1"}, p.Shards[0].Replicas)

	// And a replica not asked for its replication, or one its table knows at no address, is
	// left as its table says
	c.member("rc-shard1-1").Following = ""
	assert.Empty(t, shards.Decide(c.members, 3).Actions)
	c.member("rc-shard1-1").Following = "127.0.0.11:6379"
	for k := range c.member("rc-shard1-1").Nodes {
		if n := &c.member("rc-shard1-1").Nodes[k]; n.ID == "n10" {
			n.Addr, n.Flags = "", append(n.Flags, "noaddr")
		}
	}
	assert.NotContains(t, keysOf(kinds(shards.Decide(c.members, 3))), shards.Replicate)
}
