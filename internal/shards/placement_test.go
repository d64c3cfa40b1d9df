package shards_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

// threeShardsOfTwo: each shard's pod 0 is its primary, pod 1 its replica.
func threeShardsOfTwo() shards.Plan {
	return shards.Plan{Shards: []shards.Shard{
		{Index: 0, Primary: "x0-0", Replicas: []string{"x0-1"}, Slots: []redis.SlotRange{r(0, 5460)}},
		{Index: 1, Primary: "x1-0", Replicas: []string{"x1-1"}, Slots: []redis.SlotRange{r(5461, 10921)}},
		{Index: 2, Primary: "x2-0", Replicas: []string{"x2-1"}, Slots: []redis.SlotRange{r(10922, 16383)}},
	}}
}

func TestPrimariesMoveToMachinesOfTheirOwnOneShardAtATime(t *testing.T) {
	apart := map[string]string{"x0-0": "a", "x0-1": "b", "x1-0": "b", "x1-1": "c", "x2-0": "c", "x2-1": "a"}
	// After node b failed: shard 1's replica on c took over (x1-1), then b came back.
	afterFailover := func() shards.Plan {
		p := threeShardsOfTwo()
		p.Shards[1].Primary, p.Shards[1].Replicas = "x1-1", []string{"x1-0"}
		return p
	}
	tests := []struct {
		name   string
		plan   func() shards.Plan
		nodeOf map[string]string
		want   shards.RolloutStep
	}{
		{"one primary per machine: nothing", threeShardsOfTwo, apart, shards.RolloutStep{}},
		{"after a failover two primaries share a machine: the one whose replica is on the free machine moves back", afterFailover, apart,
			shards.RolloutStep{Kind: shards.Failover, Pod: "x1-0", Shard: 1, Why: "c holds the primaries of shards 1 and 2: x1-0 takes shard 1 over on b, which holds none"}},
		{"scheduled so at creation: pods 0 of two shards on one machine", threeShardsOfTwo,
			map[string]string{"x0-0": "a", "x0-1": "b", "x1-0": "a", "x1-1": "c", "x2-0": "c", "x2-1": "b"},
			shards.RolloutStep{Kind: shards.Failover, Pod: "x0-1", Shard: 0, Why: "a holds the primaries of shards 0 and 1: x0-1 takes shard 0 over on b, which holds none"}},
		{"every machine but one holds a primary already: nowhere better, nothing", threeShardsOfTwo,
			map[string]string{"x0-0": "a", "x0-1": "b", "x1-0": "a", "x1-1": "b", "x2-0": "b", "x2-1": "a"},
			shards.RolloutStep{}},
		{"nothing while the cluster is not whole", func() shards.Plan {
			p := afterFailover()
			p.Waiting = "x1-0 does not answer"
			return p
		}, apart, shards.RolloutStep{Why: "a primary moves to a machine of its own once the cluster is whole"}},
		{"nothing while slots move", func() shards.Plan {
			p := afterFailover()
			p.Moves = []shards.Move{{Slot: 1}}
			return p
		}, apart, shards.RolloutStep{Why: "a primary moves to a machine of its own once the cluster is whole"}},
		{"a replica not attached is not a candidate", func() shards.Plan {
			p := afterFailover()
			p.Shards[1].Replicas = nil
			return p
		}, apart, shards.RolloutStep{}},
		{"pods with no machine count nowhere", afterFailover, map[string]string{}, shards.RolloutStep{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, shards.DecidePrimaryPlacement(tt.plan(), tt.nodeOf))
		})
	}
}
