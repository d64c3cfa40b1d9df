package shards

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Keeping the shards' primaries on different machines. Redis Cluster elects a shard's new
// primary only with the votes of a majority of primaries: a machine holding the primaries of
// two shards out of three takes the cluster down with it. The pods of a shard are scheduled
// apart (resources' default anti-affinity), but which of them is primary is Redis Cluster's
// doing: the first pods at creation, and after a failover, a replica wherever it runs.
// DecidePrimaryPlacement hands a shard over to its replica on a machine holding no primary
// when the primary's machine holds another shard's primary too.
//
// The safety rule it keeps (on top of the package's): only while the cluster is whole (every
// node answers, nothing to send, no slot moving: the rollout's gate), one shard at a time, only
// to a replica attached to the shard's primary, with CLUSTER FAILOVER, which Redis carries out
// only once that replica has every write the primary acknowledged (the primary stops its
// clients meanwhile): no acknowledged write is lost, and there are never two primaries. Each
// step moves a primary from a machine holding two or more to one holding none, so the steps
// end.

// DecidePrimaryPlacement returns the failover that puts a shard's primary on a machine of its
// own, or a step without Kind when there is none to take (Why then says what it waits for, or
// is empty when every machine holds one primary at most, or no replica can help). nodeOf gives
// each pod's machine; a pod without one counts nowhere.
func DecidePrimaryPlacement(plan Plan, nodeOf map[string]string) RolloutStep {
	primariesOn := map[string][]int{}
	for _, sh := range plan.Shards {
		if n := nodeOf[sh.Primary]; n != "" && len(sh.Slots) > 0 {
			primariesOn[n] = append(primariesOn[n], sh.Index)
		}
	}
	crowded := false
	for _, shards := range primariesOn {
		crowded = crowded || len(shards) > 1
	}
	if !crowded {
		return RolloutStep{}
	}
	if plan.Waiting != "" || len(plan.Actions) > 0 || len(plan.Moves) > 0 || len(plan.Drained) > 0 {
		return RolloutStep{Why: "a primary moves to a machine of its own once the cluster is whole"}
	}
	// The most crowded machine first, by name among equals; its shards in index order.
	machines := slices.SortedFunc(maps.Keys(primariesOn), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(primariesOn[b]), len(primariesOn[a])), cmp.Compare(a, b))
	})
	for _, machine := range machines {
		if len(primariesOn[machine]) < 2 {
			break
		}
		for _, sh := range plan.Shards {
			if nodeOf[sh.Primary] != machine || !slices.Contains(primariesOn[machine], sh.Index) {
				continue
			}
			for _, r := range sh.Replicas {
				if to := nodeOf[r]; to != "" && to != machine && len(primariesOn[to]) == 0 {
					return RolloutStep{Kind: Failover, Pod: r, Shard: sh.Index,
						Why: fmt.Sprintf("%s holds the primaries of shards %s: %s takes shard %d over on %s, which holds none",
							machine, joinInts(primariesOn[machine]), r, sh.Index, to)}
				}
			}
		}
	}
	return RolloutStep{}
}

func joinInts(xs []int) string {
	s := ""
	for i, x := range xs {
		switch {
		case i == 0:
		case i == len(xs)-1:
			s += " and "
		default:
			s += ", "
		}
		s += fmt.Sprint(x)
	}
	return s
}
