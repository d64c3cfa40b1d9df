package shards

import "github.com/org/redis-operator/internal/redis"

// Health is what the nodes say of the cluster's slots, for its metrics: the cluster serves
// every slot only when each is assigned to a primary the cluster has not flagged as failed.
type Health struct {
	// Assigned are the slots each shard's primaries serve, by shard index.
	Assigned map[int]int
	// Failing are the slots, by shard, whose primary the cluster flags as failed (fail, not
	// fail?: a majority of primaries agreed): nobody serves them until a replica takes over.
	Failing map[int]int
	// Open is how many slots some node imports or migrates (a slot move under way, or one left
	// half done).
	Open int
	// Answered is false when no node answered: the rest says nothing then.
	Answered bool
}

// HealthOf reads the slots from the table of the first member that answers (the nodes' tables
// agree once the cluster has settled; one table counts each slot once), its entries placed in
// shards by the members' own ids, else by address; a node of no member's shard counts in none.
// The open slots are each node's own (only a node's own line shows them).
func HealthOf(members []Member) Health {
	h := Health{Assigned: map[int]int{}, Failing: map[int]int{}}
	shardOfID, shardOfAddr := map[string]int{}, map[string]int{}
	for _, m := range members {
		if self, ok := m.Self(); ok {
			shardOfID[self.ID] = m.Shard
		}
		if addr, _ := m.Peer(); addr != "" {
			shardOfAddr[addr] = m.Shard
		}
	}
	open := map[int]bool{}
	for _, m := range members {
		self, ok := m.Self()
		if !ok {
			continue
		}
		for slot := range self.Importing {
			open[slot] = true
		}
		for slot := range self.Migrating {
			open[slot] = true
		}
		if h.Answered {
			continue
		}
		h.Answered = true
		for _, n := range m.Nodes {
			if !n.IsPrimary() || n.SlotCount() == 0 {
				continue
			}
			shard, ok := shardOfID[n.ID]
			if !ok {
				if shard, ok = shardOfAddr[n.Addr]; !ok {
					continue
				}
			}
			h.Assigned[shard] += n.SlotCount()
			if n.Failed() {
				h.Failing[shard] += n.SlotCount()
			}
		}
	}
	h.Open = len(open)
	return h
}

// SlotsServed is every slot: the cluster's own state is ok.
func (h Health) SlotsServed() bool {
	total := 0
	for shard, n := range h.Assigned {
		total += n - h.Failing[shard]
	}
	return h.Answered && total == redis.SlotCount
}
