package shards_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

// node is one CLUSTER NODES entry: id, flags, primary and slots.
func node(id, flags, primary string, slots ...redis.SlotRange) redis.ClusterNode {
	return redis.ClusterNode{ID: id, Addr: "127.0.0.1:6379", PrimaryID: primary, Slots: slots, Connected: true,
		Flags: strings.Split(flags, ",")}
}

// cluster is shards x per nodes: pod rc-shard<i>-<k>, node id n<i><k>.
type cluster struct {
	members []shards.Member
}

func newCluster(n, per int) *cluster {
	c := &cluster{}
	for i := range n {
		for k := range per {
			id := fmt.Sprintf("n%d%d", i, k)
			addr := fmt.Sprintf("127.0.0.%d:6379", 10*i+k+1)
			self := node(id, "myself,master", "")
			self.Addr = addr
			c.members = append(c.members, shards.Member{Pod: fmt.Sprintf("rc-shard%d-%d", i, k), Shard: i, Ordinal: k,
				Addr: addr, Nodes: []redis.ClusterNode{self}})
		}
	}
	return c
}

func (c *cluster) member(pod string) *shards.Member {
	for i := range c.members {
		if c.members[i].Pod == pod {
			return &c.members[i]
		}
	}
	panic(pod)
}

// set replaces a node's own entry.
func (c *cluster) set(pod, flags, primary string, slots ...redis.SlotRange) *cluster {
	m := c.member(pod)
	self := m.Nodes[0]
	m.Nodes[0] = node(self.ID, "myself,"+flags, primary, slots...)
	m.Nodes[0].Addr = self.Addr
	return c
}

// moved gives the pod a new address: its own entry says it (cluster-announce-ip), the other
// nodes' tables keep the old one until told.
func (c *cluster) moved(pod, addr string) *cluster {
	m := c.member(pod)
	m.Addr = addr
	m.Nodes[0].Addr = addr
	return c
}

// joined makes every member know every other as it sees itself.
func (c *cluster) joined() *cluster {
	selves := map[string]redis.ClusterNode{}
	for _, m := range c.members {
		s, _ := m.Self()
		selves[m.Pod] = s
	}
	for i := range c.members {
		self, _ := c.members[i].Self()
		nodes := []redis.ClusterNode{self}
		for _, o := range c.members {
			if o.Pod == c.members[i].Pod {
				continue
			}
			s := selves[o.Pod]
			var flags []string
			for _, f := range s.Flags {
				if f != "myself" {
					flags = append(flags, f)
				}
			}
			s.Flags = flags
			nodes = append(nodes, s)
		}
		c.members[i].Nodes = nodes
	}
	return c
}

// formedThreeByTwo is a formed cluster: each shard's first node serves a third of the slots, its
// second replicates it, and every node knows every other.
func formedThreeByTwo() *cluster {
	return newCluster(3, 2).set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard0-1", "slave", "n00").
		set("rc-shard1-0", "master", "", r(5461, 10921)).set("rc-shard1-1", "slave", "n10").
		set("rc-shard2-0", "master", "", r(10922, 16383)).set("rc-shard2-1", "slave", "n20").joined()
}

func r(a, b int) redis.SlotRange { return redis.SlotRange{Start: a, End: b} }

func kinds(p shards.Plan) map[shards.ActionKind][]string {
	out := map[shards.ActionKind][]string{}
	for _, a := range p.Actions {
		out[a.Kind] = append(out[a.Kind], a.String())
	}
	return out
}

func TestANewClusterMeetsThenSplitsTheSlotsThenAttachesTheReplicas(t *testing.T) {
	// Given six new nodes that know nobody
	c := newCluster(3, 2)
	p := shards.Decide(c.members, 3)
	// Then every node meets the first, and no slot is given before they have joined
	assert.Equal(t, map[shards.ActionKind][]string{shards.Meet: {
		"rc-shard0-0 meets 127.0.0.2:6379", "rc-shard0-0 meets 127.0.0.11:6379", "rc-shard0-0 meets 127.0.0.12:6379",
		"rc-shard0-0 meets 127.0.0.21:6379", "rc-shard0-0 meets 127.0.0.22:6379",
	}}, kinds(p))
	assert.NotEmpty(t, p.Waiting)

	// When they have joined, each shard's first node gets a third of the slots, and the
	// others replicate it
	p = shards.Decide(c.joined().members, 3)
	assert.Equal(t, map[shards.ActionKind][]string{
		shards.AddSlots:  {"rc-shard0-0 serves slots [0-5460]", "rc-shard1-0 serves slots [5461-10921]", "rc-shard2-0 serves slots [10922-16383]"},
		shards.Replicate: {"rc-shard0-1 replicates n00", "rc-shard1-1 replicates n10", "rc-shard2-1 replicates n20"},
	}, kinds(p))

	// And once done, there is nothing to do
	c.set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard1-0", "master", "", r(5461, 10921)).
		set("rc-shard2-0", "master", "", r(10922, 16383)).
		set("rc-shard0-1", "slave", "n00").set("rc-shard1-1", "slave", "n10").set("rc-shard2-1", "slave", "n20")
	p = shards.Decide(c.joined().members, 3)
	assert.Empty(t, p.Actions)
	assert.Empty(t, p.Waiting)
	assert.Equal(t, []shards.Shard{
		{Index: 0, Primary: "rc-shard0-0", Replicas: []string{"rc-shard0-1"}, Slots: []redis.SlotRange{r(0, 5460)}},
		{Index: 1, Primary: "rc-shard1-0", Replicas: []string{"rc-shard1-1"}, Slots: []redis.SlotRange{r(5461, 10921)}},
		{Index: 2, Primary: "rc-shard2-0", Replicas: []string{"rc-shard2-1"}, Slots: []redis.SlotRange{r(10922, 16383)}},
	}, p.Shards)
}

func TestDecideNeverGivesASlotTwice(t *testing.T) {
	tests := []struct {
		name    string
		cluster func() *cluster
		want    map[shards.ActionKind][]string
	}{
		{"an assignment cut short gets only the missing slots", func() *cluster {
			return newCluster(3, 1).set("rc-shard0-0", "master", "", r(0, 100)).joined()
		}, map[shards.ActionKind][]string{shards.AddSlots: {
			"rc-shard0-0 serves slots [101-5460]", "rc-shard1-0 serves slots [5461-10921]", "rc-shard2-0 serves slots [10922-16383]"}}},
		{"a slot another shard serves is left to it", func() *cluster {
			return newCluster(3, 1).set("rc-shard1-0", "master", "", r(5000, 5500)).joined()
		}, map[shards.ActionKind][]string{shards.AddSlots: {
			"rc-shard0-0 serves slots [0-4999]", "rc-shard1-0 serves slots [5501-10921]", "rc-shard2-0 serves slots [10922-16383]"}}},
		{"no slot while a node does not answer: it may serve some", func() *cluster {
			c := newCluster(3, 1).joined()
			c.member("rc-shard2-0").Nodes = nil
			return c
		}, map[shards.ActionKind][]string{}},
		{"no slot while a node has not joined", func() *cluster {
			c := newCluster(3, 1).joined()
			c.member("rc-shard0-0").Nodes = c.member("rc-shard0-0").Nodes[:2]
			return c
		}, map[shards.ActionKind][]string{shards.Meet: {"rc-shard0-0 meets 127.0.0.21:6379"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kinds(shards.Decide(tt.cluster().members, 3)))
		})
	}
}

func TestAfterAFailoverThePromotedReplicaIsTheShardsPrimary(t *testing.T) {
	// Redis Cluster promoted rc-shard1-1; the old primary came back as its replica
	c := newCluster(3, 2).set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard0-1", "slave", "n00").
		set("rc-shard1-1", "master", "", r(5461, 10921)).set("rc-shard1-0", "slave", "n11").
		set("rc-shard2-0", "master", "", r(10922, 16383)).set("rc-shard2-1", "slave", "n20").joined()
	p := shards.Decide(c.members, 3)
	assert.Empty(t, p.Actions)
	assert.Equal(t, "rc-shard1-1", p.Shards[1].Primary)
	assert.Equal(t, []string{"rc-shard1-0"}, p.Shards[1].Replicas)

	// A node that lost its data directory comes back as a new, empty primary: it is attached
	// again, and its old self, failed and serving nothing, is forgotten everywhere
	c.set("rc-shard1-0", "master", "")
	c.member("rc-shard1-0").Nodes[0].ID = "n10-new"
	c.joined()
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, node("n10", "slave,fail", "n11"))
	}
	got := kinds(shards.Decide(c.members, 3))
	assert.Equal(t, []string{"rc-shard1-0 replicates n11"}, got[shards.Replicate])
	assert.Len(t, got[shards.Forget], 6, "every node forgets n10")
}

func TestDecideNeverMakesANodeThatServesSlotsAReplica(t *testing.T) {
	// Both nodes of shard 0 serve slots (a split, or a migration by hand): neither is attached
	c := newCluster(3, 2).set("rc-shard0-0", "master", "", r(0, 100)).set("rc-shard0-1", "master", "", r(101, 5460)).
		set("rc-shard1-0", "master", "", r(5461, 10921)).set("rc-shard1-1", "slave", "n10").
		set("rc-shard2-0", "master", "", r(10922, 16383)).set("rc-shard2-1", "slave", "n20").joined()
	p := shards.Decide(c.members, 3)
	assert.Empty(t, kinds(p)[shards.Replicate])
	assert.Contains(t, p.Waiting, "serves slots")
}

func TestANodeIsForgottenOnlyWhenEveryPodAnswersAndItServesNothing(t *testing.T) {
	c := newCluster(3, 1).set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard1-0", "master", "", r(5461, 10921)).
		set("rc-shard2-0", "master", "", r(10922, 16383)).joined()
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, node("gone", "master,fail", ""))
	}
	assert.Len(t, kinds(shards.Decide(c.members, 3))[shards.Forget], 3)

	c.member("rc-shard2-0").Nodes = nil
	assert.Empty(t, kinds(shards.Decide(c.members, 3))[shards.Forget], "a pod that does not answer may be that node, restarting")
}

// With spec.expose a replaced pod keeps its Service's address: its new node answers there at
// once, Redis flags the old one noaddr and never marks it failed. It is gone all the same.
func TestANodeWhoseAddressAnotherNodeTookIsForgotten(t *testing.T) {
	c := formedThreeByTwo()
	taken := node("old", "slave,noaddr", "n00")
	taken.Addr, taken.Connected = "", false
	for i := range c.members {
		c.members[i].Nodes = append(c.members[i].Nodes, taken)
	}
	assert.Len(t, kinds(shards.Decide(c.members, 3))[shards.Forget], 6, "every node forgets it")

	// Not while it serves slots that a replica holds: Redis Cluster does not promote the
	// replica of a primary it never marks failed, and the operator does not either (yet).
	primary := node("old", "master,noaddr", "", r(0, 5460))
	primary.Addr, primary.Connected = "", false
	c.set("rc-shard0-0", "slave", "old")
	for i := range c.members {
		c.members[i].Nodes[len(c.members[i].Nodes)-1] = primary
	}
	p := shards.Decide(c.members, 3)
	assert.Empty(t, kinds(p)[shards.Forget])
	assert.Equal(t, "shard 0 has no primary", p.Waiting)
}

// A member that did not answer while the others forgot a gone node (with spec.expose, a new pod
// waiting out its old node's failure) may hold it still, or hear of it later: it forgets it too,
// though the first member's table no longer has it.
func TestAGoneNodeOnlyOneTableStillHoldsIsForgottenThere(t *testing.T) {
	c := formedThreeByTwo()
	old := node("old", "master,noaddr", "")
	old.Addr, old.Connected = "", false
	m := c.member("rc-shard2-1")
	m.Nodes = append(m.Nodes, old)
	assert.Equal(t, []string{"rc-shard2-1 forgets old"}, kinds(shards.Decide(c.members, 3))[shards.Forget])

	// Judged by every table: one that says it still serves slots its replica holds keeps it.
	serving := node("old", "master", "", r(0, 5460))
	c.set("rc-shard0-0", "slave", "old")
	c.member("rc-shard0-0").Nodes = append(c.member("rc-shard0-0").Nodes, serving)
	assert.Empty(t, kinds(shards.Decide(c.members, 3))[shards.Forget])
}

// A restored cluster: each shard's first node loaded its shard's keys and took the slots they
// are in; the layout (the slots the backup recorded, not an even split) gives each shard the
// rest of its own, and nothing twice.
func TestARestoredClusterGetsTheSlotsItsBackupRecorded(t *testing.T) {
	layout := shards.Layout{
		{r(0, 4095), r(16352, 16383)},
		{r(4096, 10921)},
		{r(10922, 16351)},
	}
	assert.True(t, layout.Covers(3))
	c := newCluster(3, 1)
	c.set("rc-shard0-0", "master", "", r(7, 7), r(16360, 16360)).set("rc-shard2-0", "master", "", r(12000, 12000))
	p := shards.DecideLayout(c.joined().members, 3, layout)
	assert.Equal(t, map[shards.ActionKind][]string{shards.AddSlots: {
		"rc-shard0-0 serves slots [0-6 8-4095 16352-16359 16361-16383]",
		"rc-shard1-0 serves slots [4096-10921]",
		"rc-shard2-0 serves slots [10922-11999 12001-16351]",
	}}, kinds(p))

	// A layout that does not give every slot to exactly one shard is not used
	for _, broken := range []shards.Layout{
		{{r(0, 5460)}, {r(5461, 10921)}},                    // two shards' worth for three
		{{r(0, 5460)}, {r(5460, 10921)}, {r(10922, 16383)}}, // slot 5460 twice
		{{r(0, 5460)}, {r(5462, 10921)}, {r(10922, 16383)}}, // slot 5461 nobody's
	} {
		assert.False(t, broken.Covers(3), "%v", broken)
		p := shards.DecideLayout(newCluster(3, 1).joined().members, 3, broken)
		assert.Equal(t, shards.Decide(newCluster(3, 1).joined().members, 3).Actions, p.Actions, "%v: spread evenly instead", broken)
	}
}
