package backup

import "github.com/org/redis-operator/internal/topology"

// Part is where a backup takes one snapshot of a RedisCluster from: the whole cluster
// in replication mode; one shard, with the slots it serves, in cluster mode.
type Part struct {
	// Shard is the shard's StatefulSet; empty in replication mode.
	Shard string
	Slots []string
	// Source is a caught-up replica when one serves (topology.View.SnapshotSource), or the
	// primary; Primary is the part's primary.
	Source, Primary topology.Observed
}
