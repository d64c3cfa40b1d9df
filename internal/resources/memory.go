package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// MaxMemoryPercent is the share of the Redis container's memory limit that Redis's data gets
// (maxmemory) when spec.config sets no maxmemory. Without one Redis has no limit of its own:
// writes grow it until the kernel kills it, and the replica that takes over holds the same data
// and is killed the same way. The rest of the limit is what Redis uses beyond what maxmemory
// counts: its own process and the allocator's fragmentation, the replication backlog, the
// replicas' and clients' output buffers, and the pages a write copies while a fork (a snapshot,
// a replica's full sync, an AOF rewrite) still reads the old ones. How the share was measured:
// docs/settings.md#memory.
const MaxMemoryPercent = 60

// MemoryLimit is the Redis container's memory limit in bytes; false when none is set.
func MemoryLimit(rc *cachev1.RedisCluster) (int64, bool) {
	if rc.Spec.Resources == nil {
		return 0, false
	}
	q, ok := rc.Spec.Resources.Limits[corev1.ResourceMemory]
	if !ok || q.IsZero() {
		return 0, false
	}
	return q.Value(), true
}

// MaxMemory is the maxmemory the operator gives Redis: MaxMemoryPercent of the memory limit
// when spec.config sets none, and "0" (Redis's own default, no limit) without a memory limit,
// so that a limit removed from the spec is removed from the nodes too. False when spec.config
// sets maxmemory: the user's value is redis.conf's.
func MaxMemory(rc *cachev1.RedisCluster) (string, bool) {
	if _, set := rc.Spec.Config["maxmemory"]; set {
		return "", false
	}
	limit, ok := MemoryLimit(rc)
	if !ok {
		return "0", true
	}
	return strconv.FormatInt(limit/100*MaxMemoryPercent, 10), true
}
