// Package placement decides what losing one machine would do to a RedisCluster, from where
// its pods run: the status says so (condition Resilient), so that a user learns before a node
// fails that it would take a shard down.
//
// The rule it keeps: a RedisCluster survives the loss of any one node when, for every node,
//   - every shard keeps a node off it (in replication mode the one shard is every pod): the
//     data has a copy elsewhere, which the operator (replication) or Redis Cluster promotes;
//   - in cluster mode, the primaries off it are a majority of all primaries: Redis Cluster
//     promotes a replica only when a majority of primaries agree that its primary failed.
//
// A pod with no node yet counts on no node; the caller says Unknown until every pod has one.
package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Pod is one Redis node's pod: where it runs, its shard (0 in replication mode) and whether it
// is its shard's primary.
type Pod struct {
	Name, Node string
	Shard      int
	Primary    bool
}

// Risk is what losing one machine would do; the zero Risk says any one machine can go.
type Risk struct {
	// Node is the machine whose loss the message describes: the first in name order.
	Node string
	// Message names the pods on it and what losing it loses.
	Message string
}

// Decide returns the risk of losing each node in turn, the first found in node name order
// (sharded: cluster mode, where the majority of primaries counts too).
func Decide(pods []Pod, sharded bool) Risk {
	byNode := map[string][]Pod{}
	shardSize, primaries := map[int]int{}, 0
	for _, p := range pods {
		shardSize[p.Shard]++
		if p.Primary {
			primaries++
		}
		if p.Node != "" {
			byNode[p.Node] = append(byNode[p.Node], p)
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		on := byNode[node]
		slices.SortFunc(on, func(a, b Pod) int { return cmp.Compare(a.Name, b.Name) })
		if m := wholeShard(node, on, shardSize, sharded); m != "" {
			return Risk{Node: node, Message: m}
		}
		if !sharded {
			continue
		}
		var prim []Pod
		for _, p := range on {
			if p.Primary {
				prim = append(prim, p)
			}
		}
		if left := primaries - len(prim); len(prim) > 0 && left*2 <= primaries {
			return Risk{Node: node, Message: fmt.Sprintf("%s (primaries of shards %s) are on %s: losing %s leaves %d of %d primaries, too few to elect replacements, and the cluster stops serving",
				names(prim), shardList(prim), node, node, left, primaries)}
		}
	}
	return Risk{}
}

// wholeShard says when a node holds every pod of a shard of more than one pod (a shard of one
// has no copy anywhere: the user chose it, and Persistent says what a restart keeps).
func wholeShard(node string, on []Pod, shardSize map[int]int, sharded bool) string {
	byShard := map[int][]Pod{}
	for _, p := range on {
		byShard[p.Shard] = append(byShard[p.Shard], p)
	}
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		all := byShard[shard]
		if len(all) < 2 || len(all) != shardSize[shard] {
			continue
		}
		what := "the primary and every replica"
		if len(all) == 2 {
			what = "the primary and its only replica"
		}
		if sharded {
			what += fmt.Sprintf(" of shard %d", shard)
		}
		return fmt.Sprintf("%s are all on %s: losing %s loses %s", names(all), node, node, what)
	}
	return ""
}

// names lists pods as a sentence does: "a and b", "a, b and c".
func names(pods []Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	return sentence(n)
}

// shardList lists the pods' shards as a sentence does.
func shardList(pods []Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, fmt.Sprint(p.Shard))
	}
	return sentence(s)
}

// sentence joins words as a sentence does: "a", "a and b", "a, b and c".
func sentence(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
