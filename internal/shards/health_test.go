package shards_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/shards"
)

// formed is three shards of two nodes, each shard's first node serving a third of the slots.
func formed() *cluster {
	c := newCluster(3, 2)
	c.set("rc-shard0-0", "master", "", r(0, 5460)).set("rc-shard1-0", "master", "", r(5461, 10921)).
		set("rc-shard2-0", "master", "", r(10922, 16383))
	c.set("rc-shard0-1", "slave", "n00").set("rc-shard1-1", "slave", "n10").set("rc-shard2-1", "slave", "n20")
	return c.joined()
}

func TestHealthCountsEachShardsSlotsAndThoseWithoutAPrimary(t *testing.T) {
	for _, tt := range []struct {
		name       string
		cluster    func() *cluster
		assigned   map[int]int
		failing    map[int]int
		open       int
		served     bool
		noneAnswer bool
	}{
		{"formed", formed, map[int]int{0: 5461, 1: 5461, 2: 5462}, map[int]int{}, 0, true, false},
		{"a shard's primary flagged failed by the cluster", func() *cluster {
			c := formed()
			for i := range c.members {
				for k := range c.members[i].Nodes {
					if c.members[i].Nodes[k].ID == "n10" {
						c.members[i].Nodes[k].Flags = append(c.members[i].Nodes[k].Flags, "fail")
					}
				}
			}
			c.member("rc-shard1-0").Nodes = nil // it does not answer either
			return c
		}, map[int]int{0: 5461, 1: 5461, 2: 5462}, map[int]int{1: 5461}, 0, false, false},
		{"a slot moving from shard 0 to shard 2", func() *cluster {
			c := formed()
			c.member("rc-shard0-0").Nodes[0].Migrating = map[int]string{5460: "n20"}
			c.member("rc-shard2-0").Nodes[0].Importing = map[int]string{5460: "n00"}
			return c
		}, map[int]int{0: 5461, 1: 5461, 2: 5462}, map[int]int{}, 1, true, false},
		{"slots not assigned yet", func() *cluster { return newCluster(3, 2).joined() }, map[int]int{}, map[int]int{}, 0, false, false},
		{"no node answers", func() *cluster {
			c := formed()
			for i := range c.members {
				c.members[i].Nodes = nil
			}
			return c
		}, map[int]int{}, map[int]int{}, 0, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := shards.HealthOf(tt.cluster().members)
			assert.Equal(t, tt.assigned, h.Assigned)
			assert.Equal(t, tt.failing, h.Failing)
			assert.Equal(t, tt.open, h.Open)
			assert.Equal(t, tt.served, h.SlotsServed())
			assert.Equal(t, !tt.noneAnswer, h.Answered)
		})
	}
}
