package shards_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

func settled() shards.Plan {
	return shards.Plan{Shards: []shards.Shard{
		{Index: 0, Primary: "rc-shard0-0", Replicas: []string{"rc-shard0-1"}, Slots: []redis.SlotRange{r(0, 5460)}},
		{Index: 1, Primary: "rc-shard1-1", Replicas: []string{"rc-shard1-0"}, Slots: []redis.SlotRange{r(5461, 10921)}},
		{Index: 2, Primary: "rc-shard2-0", Slots: []redis.SlotRange{r(10922, 16383)}},
	}}
}

func TestRolloutReplacesReplicasFirstThenFailsPrimariesOverOnePodAtATime(t *testing.T) {
	all := map[string]bool{"rc-shard0-0": true, "rc-shard0-1": true, "rc-shard1-0": true, "rc-shard1-1": true}
	tests := []struct {
		name     string
		plan     func() shards.Plan
		outdated map[string]bool
		want     shards.RolloutStep
	}{
		{"nothing outdated", settled, nil, shards.RolloutStep{}},
		{"a shard's replica before its primary", settled, all,
			shards.RolloutStep{Kind: shards.ReplacePod, Pod: "rc-shard0-1", Shard: 0, Why: "replica rc-shard0-1 of shard 0 runs an old template"}},
		{"an outdated primary: its updated replica takes over", settled, map[string]bool{"rc-shard0-0": true, "rc-shard1-1": true},
			shards.RolloutStep{Kind: shards.Failover, Pod: "rc-shard0-1", Shard: 0,
				Why: "primary rc-shard0-0 of shard 0 runs an old template: its replica rc-shard0-1 takes over first"}},
		{"after a failover the old primary is a replica like any", settled, map[string]bool{"rc-shard1-0": true},
			shards.RolloutStep{Kind: shards.ReplacePod, Pod: "rc-shard1-0", Shard: 1, Why: "replica rc-shard1-0 of shard 1 runs an old template"}},
		{"nothing while the cluster is not whole", func() shards.Plan {
			p := settled()
			p.Waiting = "rc-shard0-1 does not know rc-shard0-0 yet"
			return p
		}, all, shards.RolloutStep{Why: "pods are replaced once the cluster is whole"}},
		{"nothing while slots move", func() shards.Plan {
			p := settled()
			p.Moves = []shards.Move{{Slot: 1}}
			return p
		}, all, shards.RolloutStep{Why: "pods are replaced once the cluster is whole"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, shards.DecideRollout(tt.plan(), tt.outdated, false))
		})
	}
}

func TestAShardOfOneNodeIsReplacedOnlyWhenItsDataIsOnAVolume(t *testing.T) {
	outdated := map[string]bool{"rc-shard2-0": true}
	step := shards.DecideRollout(settled(), outdated, false)
	assert.Empty(t, step.Kind, "its data would be lost")
	assert.Contains(t, step.Why, "would lose the shard's data")

	step = shards.DecideRollout(settled(), outdated, true)
	assert.Equal(t, shards.ReplacePod, step.Kind)
	assert.Equal(t, "rc-shard2-0", step.Pod)
}

func TestHandoverGivesAShardWhosePrimarysPodIsBeingDeletedToAReplicaThatStays(t *testing.T) {
	twoReplicas := func() shards.Plan {
		p := settled()
		p.Shards[0].Replicas = []string{"rc-shard0-1", "rc-shard0-2"}
		return p
	}
	nodes := map[string]string{"rc-shard0-0": "node-1", "rc-shard0-1": "node-1", "rc-shard0-2": "node-2", "rc-shard1-1": "node-2", "rc-shard1-0": "node-3"}
	why := "the pod of its primary rc-shard0-0 is being deleted"
	tests := []struct {
		name        string
		plan        func() shards.Plan
		terminating map[string]bool
		want        shards.RolloutStep
	}{
		{"no pod going away", settled, nil, shards.RolloutStep{}},
		{"a replica's pod going away: nothing to hand over", settled, map[string]bool{"rc-shard0-1": true}, shards.RolloutStep{}},
		{"a primary's pod going away: its replica takes over", settled, map[string]bool{"rc-shard0-0": true},
			shards.RolloutStep{Kind: shards.Failover, Pod: "rc-shard0-1", Shard: 0, Why: why}},
		{"a replica on another machine than the primary's goes first (a drain takes the machine)", twoReplicas, map[string]bool{"rc-shard0-0": true},
			shards.RolloutStep{Kind: shards.Failover, Pod: "rc-shard0-2", Shard: 0, Why: why}},
		{"a replica whose own pod is going away is passed over", twoReplicas, map[string]bool{"rc-shard0-0": true, "rc-shard0-2": true},
			shards.RolloutStep{Kind: shards.Failover, Pod: "rc-shard0-1", Shard: 0, Why: why}},
		{"every pod of the shard going away: nothing", settled, map[string]bool{"rc-shard0-0": true, "rc-shard0-1": true}, shards.RolloutStep{}},
		{"a shard without replicas: nothing", settled, map[string]bool{"rc-shard2-0": true}, shards.RolloutStep{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, shards.DecideHandover(tc.plan(), tc.terminating, nodes))
		})
	}
}
