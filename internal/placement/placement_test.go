package placement_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/placement"
)

func TestDecide(t *testing.T) {
	rep := func(name, node string, primary bool) placement.Pod {
		return placement.Pod{Name: name, Node: node, Primary: primary}
	}
	shard := func(name, node string, shard int, primary bool) placement.Pod {
		return placement.Pod{Name: name, Node: node, Shard: shard, Primary: primary}
	}
	tests := []struct {
		name    string
		pods    []placement.Pod
		sharded bool
		want    placement.Risk
	}{
		{name: "replication spread over three nodes", pods: []placement.Pod{
			rep("s-0", "a", true), rep("s-1", "b", false), rep("s-2", "c", false)}},
		{name: "replication: two on one node, one elsewhere: a copy survives either", pods: []placement.Pod{
			rep("s-0", "a", true), rep("s-1", "a", false), rep("s-2", "b", false)}},
		{name: "replication: the primary and its only replica on one node", pods: []placement.Pod{
			rep("s-0", "b", true), rep("s-1", "b", false)},
			want: placement.Risk{Node: "b", Message: "s-0 and s-1 are all on b: losing b loses the primary and its only replica"}},
		{name: "replication: every pod on one node", pods: []placement.Pod{
			rep("s-0", "a", false), rep("s-1", "a", true), rep("s-2", "a", false)},
			want: placement.Risk{Node: "a", Message: "s-0, s-1 and s-2 are all on a: losing a loses the primary and every replica"}},
		{name: "a single node has no copy anywhere: not a placement risk", pods: []placement.Pod{rep("s-0", "a", true)}},
		{name: "a pod with no node yet counts nowhere", pods: []placement.Pod{
			rep("s-0", "a", true), rep("s-1", "", false)}},
		{name: "cluster mode: three shards of two on three nodes, primaries apart", sharded: true, pods: []placement.Pod{
			shard("x0-0", "a", 0, true), shard("x0-1", "b", 0, false),
			shard("x1-0", "b", 1, true), shard("x1-1", "c", 1, false),
			shard("x2-0", "c", 2, true), shard("x2-1", "a", 2, false)}},
		{name: "cluster mode: two of three primaries on one node (after a failover)", sharded: true, pods: []placement.Pod{
			shard("x0-0", "a", 0, true), shard("x0-1", "b", 0, false),
			shard("x1-0", "b", 1, false), shard("x1-1", "a", 1, true),
			shard("x2-0", "c", 2, true), shard("x2-1", "a", 2, false)},
			want: placement.Risk{Node: "a", Message: "x0-0 and x1-1 (primaries of shards 0 and 1) are on a: losing a leaves 1 of 3 primaries, too few to elect replacements, and the cluster stops serving"}},
		{name: "cluster mode: a shard's two pods on one node", sharded: true, pods: []placement.Pod{
			shard("x0-0", "a", 0, true), shard("x0-1", "b", 0, false),
			shard("x1-0", "c", 1, true), shard("x1-1", "c", 1, false),
			shard("x2-0", "b", 2, true), shard("x2-1", "a", 2, false)},
			want: placement.Risk{Node: "c", Message: "x1-0 and x1-1 are all on c: losing c loses the primary and its only replica of shard 1"}},
		{name: "cluster mode: two of four primaries on one node is half, not a majority left", sharded: true, pods: []placement.Pod{
			shard("x0-0", "a", 0, true), shard("x0-1", "b", 0, false),
			shard("x1-0", "a", 1, true), shard("x1-1", "b", 1, false),
			shard("x2-0", "b", 2, true), shard("x2-1", "a", 2, false),
			shard("x3-0", "c", 3, true), shard("x3-1", "a", 3, false)},
			want: placement.Risk{Node: "a", Message: "x0-0 and x1-0 (primaries of shards 0 and 1) are on a: losing a leaves 2 of 4 primaries, too few to elect replacements, and the cluster stops serving"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, placement.Decide(tt.pods, tt.sharded))
		})
	}
}
