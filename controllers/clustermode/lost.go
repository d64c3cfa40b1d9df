package clustermode

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/shards"
)

// Without spec.storage a node keeps nothing across its pod: when every node of a shard (or of
// the cluster) is deleted at once, they come back as new, empty nodes, nobody serves the
// shard's slots, and shards.Decide gives the slots to the shard's new primary (AddSlots) so
// that the cluster serves again. That is a loss, and it is said: the DataLost condition, a
// Warning Event and redis_operator_data_lost_total, as replication mode says its own.

// heldMemory is how many keys each shard's primary held when last seen serving its slots, by
// shard index: what giving the shard its slots again, empty, loses.
type heldMemory struct {
	mu   sync.Mutex
	keys map[int]int64
}

// remember records the keys each shard's serving primary holds now.
func (m *heldMemory) remember(s *State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[int]int64{}
	}
	serving := map[string]bool{}
	for _, mb := range s.Members {
		if self, ok := mb.Self(); ok && self.IsPrimary() && self.SlotCount() > 0 {
			serving[mb.Pod] = true
		}
	}
	for shard, v := range s.ViewOf {
		if p, ok := v.Find(v.Primary); ok && p.Reachable() && serving[p.Name] {
			m.keys[shard] = p.Info.Keys
		}
	}
}

// held is what shard held when last seen, and whether it was seen.
func (m *heldMemory) held(shard int) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[shard]
	return k, ok
}

// shardsLost says what giving these shards' primaries their slots again loses; empty when
// nothing: slots given to a primary that already serves some (an assignment cut short), a
// cluster forming, or shards that held no key. An operator restarted since it last saw the
// shards knows only that they served when the status recorded their slots, not how many keys
// they held, and says so.
func shardsLost(rc *cachev1.RedisCluster, m *Memory, s *State, plan shards.Plan) string {
	shardOf := map[string]int{}
	emptyHanded := map[string]bool{}
	for _, m := range s.Members {
		shardOf[m.Pod] = m.Shard
		self, ok := m.Self()
		emptyHanded[m.Pod] = ok && self.SlotCount() == 0
	}
	var lost []string
	var total int64
	for _, a := range plan.Actions {
		if a.Kind != shards.AddSlots || !emptyHanded[a.On] {
			continue
		}
		shard := shardOf[a.On]
		name := fmt.Sprintf("shard %d", shard)
		keys, seen := m.held.held(shard)
		switch {
		case seen && keys > 0:
			lost = append(lost, fmt.Sprintf("%s (%d keys)", name, keys))
			total += keys
		case !seen && shard < len(rc.Status.Shards) && len(rc.Status.Shards[shard].Slots) > 0:
			lost = append(lost, name+" (its keys: unknown, the operator restarted since it last saw them)")
		}
	}
	if len(lost) == 0 {
		return ""
	}
	slices.Sort(lost)
	why := "Without spec.storage a node keeps nothing across a restart: a RedisCluster with spec.storage keeps each node's data on a volume of its own."
	if rc.Spec.Storage != nil {
		why = "Their volumes held none of it."
	}
	return fmt.Sprintf("Every node of %s came back empty, and the shards were given their slots again so that the cluster serves: %d keys known lost. %s",
		strings.Join(lost, ", "), total, why)
}

// recordShardsLost says the loss of this reconcile's slot assignment, once: the Event, the
// metric, and the DataLost condition (c.Lost).
func recordShardsLost(c *scope.Cluster, lost string) {
	if lost == "" {
		return
	}
	c.Lost = lost
	c.Recorder.Eventf(c.RC, nil, corev1.EventTypeWarning, cachev1.EventDataLost, "Shards", "%s", lost)
	metrics.DataLost(c.RC)
}
