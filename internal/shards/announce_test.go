package shards_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/shards"
)

// spec.expose in cluster mode: each node announces its Service's outside address, and its peers
// are told where it is now, as for a pod back at a new address.
func TestANodeAnnouncesItsOutsideAddressThenItsPeersAreToldIt(t *testing.T) {
	// Given a formed cluster whose nodes announce their pods' addresses
	c := formed()
	for i := range c.members {
		c.members[i].Announcing = c.members[i].Own()
		c.members[i].Announce = c.members[i].Own()
	}
	assert.Empty(t, shards.Decide(c.members, 3).Actions, "nothing to announce")
	assert.True(t, shards.AtOwnAddresses(c.members))

	// When rc-shard0-0 should announce its Service's node ports on its Kubernetes node
	outside := shards.Announced{IP: "10.87.0.11", Port: 30001, BusPort: 30002}
	m := c.member("rc-shard0-0")
	m.Announce = outside

	// Then it is told so, and nothing else is sent
	p := shards.Decide(c.members, 3)
	assert.Equal(t, []shards.Action{{Kind: shards.Announce, On: "rc-shard0-0", Announced: outside}}, p.Actions)
	assert.Equal(t, "rc-shard0-0 announces 10.87.0.11:30001 (bus port 30002)", p.Actions[0].String())

	// When it announces it, its own entry saying so, while the others still know its pod's
	m.Announcing = outside
	m.Nodes[0].Addr, m.Nodes[0].Bus = "10.87.0.11:30001", 30002
	addr, bus := m.Peer()
	assert.Equal(t, "10.87.0.11:30001", addr)
	assert.Equal(t, 30002, bus)

	// Then each other node meets it there, bus port included, and nothing else is sent
	p = shards.Decide(c.members, 3)
	require.Len(t, p.Actions, 5)
	for _, a := range p.Actions {
		assert.Equal(t, shards.Rejoin, a.Kind)
		assert.Equal(t, "n00", a.NodeID)
		assert.Equal(t, "10.87.0.11:30001", a.Addr)
		assert.Equal(t, 30002, a.Bus, "the bus port is the Service's, not the port + 10000")
	}
	assert.False(t, shards.AtOwnAddresses(c.members), "reached through its Service")

	// When they know it there
	c.joined()
	// Then there is nothing to do, and its health counts its slots in its shard
	assert.Empty(t, shards.Decide(c.members, 3).Actions)
	assert.True(t, shards.HealthOf(c.members).SlotsServed())

	// When spec.expose goes: it is told to announce its pod's address again
	m = c.member("rc-shard0-0")
	m.Announce = m.Own()
	p = shards.Decide(c.members, 3)
	assert.Equal(t, []shards.Action{{Kind: shards.Announce, On: "rc-shard0-0", Announced: m.Own()}}, p.Actions)
	assert.Equal(t, "rc-shard0-0 announces its pod's address 127.0.0.1 again", p.Actions[0].String())
	assert.False(t, shards.AtOwnAddresses(c.members), "its Service may not go yet")
}

// A node that announces an outside address before it joins is met there.
func TestANewNodeIsMetAtTheAddressItAnnounces(t *testing.T) {
	c := newCluster(3, 1)
	m := c.member("rc-shard2-0")
	m.Announcing = shards.Announced{IP: "10.87.0.13", Port: 31000, BusPort: 31001}
	m.Announce = m.Announcing

	p := shards.Decide(c.members, 3)
	var meets []shards.Action
	for _, a := range p.Actions {
		if a.Kind == shards.Meet {
			meets = append(meets, a)
		}
	}
	assert.Equal(t, []shards.Action{
		{Kind: shards.Meet, On: "rc-shard0-0", Addr: "127.0.0.11:6379"},
		{Kind: shards.Meet, On: "rc-shard0-0", Addr: "10.87.0.13:31000", Bus: 31001},
	}, meets)
}
