package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// Memory, in both modes: a node whose Redis the kernel killed out of memory (its container's
// termination says OOMKilled), and a node whose data reached maxmemory under a policy that then
// refuses writes. The maxmemory that keeps Redis under its container's limit is a live setting
// (resources.MaxMemory, rediscluster_settings.go); this file says when memory ran out anyway.

// oomKill is one kill of a node's Redis by the kernel, out of memory.
type oomKill struct {
	pod      string
	restarts int32
	at       metav1.Time
}

// memoryState is what a reconcile learns of its nodes' memory.
type memoryState struct {
	// kills are the pods whose Redis container last ended OOMKilled, by pod name.
	kills []oomKill
	// full names the nodes whose data reached maxmemory under a policy that refuses writes,
	// with that maxmemory, as last read.
	full []string
}

// memoryMemory is what the operator remembers of the nodes' memory between reconciles: each
// node's last load reading (read every statsInterval, not at every check), and the kills it
// already reported.
type memoryMemory struct {
	mu   sync.Mutex
	last map[string]topology.Stats
	// refusing is true for the nodes that refused writes for their maxmemory between their last
	// two readings.
	refusing map[string]bool
	reported map[string]oomKill
}

// oomKills are the pods whose Redis container ended OOMKilled, now or as its last termination.
func oomKills(pods []corev1.Pod) []oomKill {
	var out []oomKill
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != resources.RedisContainerName {
				continue
			}
			for _, t := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
				if t != nil && t.Reason == "OOMKilled" {
					out = append(out, oomKill{pod: p.Name, restarts: c.RestartCount, at: t.FinishedAt})
					break
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b oomKill) int { return strings.Compare(a.pod, b.pod) })
	return out
}

// reconcileMemory reports each new kill of a node's Redis out of memory (a Warning Event with
// the container's limit and what Redis used at its last reading, and the metric), and finds
// the nodes whose data fills their maxmemory and refuse writes.
func reconcileMemory(_ context.Context, state *reconcileState) error {
	rc := state.RC
	mem := &state.kept.memory
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.last == nil {
		mem.last, mem.refusing, mem.reported = map[string]topology.Stats{}, map[string]bool{}, map[string]oomKill{}
	}
	for pod, s := range state.mode.nodes(state).stats {
		before, seen := mem.last[pod]
		mem.refusing[pod] = refusesWrites(before, seen, s)
		mem.last[pod] = s
	}
	state.memory.kills = oomKills(state.Pods)
	for _, k := range state.memory.kills {
		if r, ok := mem.reported[k.pod]; ok && r.at.Equal(&k.at) {
			continue // one kill: the container's state, then its last state once restarted
		}
		mem.reported[k.pod] = k
		state.Recorder.Eventf(rc, state.PodNamed(k.pod), corev1.EventTypeWarning, cachev1.EventOOMKilled, "Memory", "%s", oomKilledMessage(rc, k, mem.last[k.pod]))
		metrics.OOMKilled(rc)
	}
	for _, p := range state.Pods {
		if s := mem.last[p.Name]; mem.refusing[p.Name] {
			state.memory.full = append(state.memory.full, fmt.Sprintf("%s (maxmemory %s, %s)", p.Name, bytesOf(s.MaxMemory), s.MaxMemoryPolicy))
		}
	}
	return nil
}

// refusesWrites is true when a node that evicts nothing refused writes for its maxmemory since
// its reading before (seen: there was one), or its data is past maxmemory now. Not its data
// near maxmemory alone: Redis refuses a write when the memory it uses as the write arrives,
// the write's own buffer with it, is over maxmemory, and the buffer is freed with the refusal
// (a refused 10 KB SET left used_memory 368 bytes under maxmemory, Redis 7.0.15).
func refusesWrites(before topology.Stats, seen bool, now topology.Stats) bool {
	if now.MaxMemory == 0 || now.MaxMemoryPolicy != "noeviction" {
		return false
	}
	return now.UsedMemory > now.MaxMemory || (seen && now.RefusedForMemory > before.RefusedForMemory)
}

// memoryLimitOf says the Redis container's memory limit, for the condition and the Event: "a
// memory limit of 48Mi", or "no memory limit".
func memoryLimitOf(rc *cachev1.RedisCluster) string {
	if l, ok := resources.MemoryLimit(rc); ok {
		return "a memory limit of " + bytesOf(l)
	}
	return "no memory limit"
}

func oomKilledMessage(rc *cachev1.RedisCluster, k oomKill, last topology.Stats) string {
	used := "no reading of its memory before"
	if last.UsedMemory > 0 {
		used = fmt.Sprintf("Redis used %s of data at the operator's last reading, maxmemory %s", bytesOf(last.UsedMemory), bytesOf(last.MaxMemory))
	}
	return fmt.Sprintf("Redis on %s was killed by the kernel out of memory (OOMKilled; the container has restarted %d times): its container had %s; %s. Lower spec.config.maxmemory or raise spec.resources.limits.memory",
		k.pod, k.restarts, memoryLimitOf(rc), used)
}

// bytesOf writes a size as Kubernetes does when it is whole (48Mi), else in MiB (32.4MiB).
func bytesOf(n int64) string {
	if n == 0 {
		return "0 (no limit)"
	}
	if n%1024 == 0 {
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
}

// outOfMemoryCondition is True while a node's Redis was last ended by the kernel out of memory,
// or while a node's data fills its maxmemory and it refuses writes.
func outOfMemoryCondition(rc *cachev1.RedisCluster, state *reconcileState) *metav1.Condition {
	if len(state.Pods) == 0 {
		return nil // not observed this reconcile: the condition stands
	}
	if k := state.memory.kills; len(k) > 0 {
		return scope.Condition(cachev1.ConditionOutOfMemory, metav1.ConditionTrue, cachev1.ReasonOOMKilled,
			fmt.Sprintf("Redis on %s was killed by the kernel out of memory at %s, with %s: lower spec.config.maxmemory or raise the limit",
				k[0].pod, k[0].at.UTC().Format("2006-01-02T15:04:05Z"), memoryLimitOf(rc)))
	}
	if full := state.memory.full; len(full) > 0 {
		return scope.Condition(cachev1.ConditionOutOfMemory, metav1.ConditionTrue, cachev1.ReasonMaxMemoryReached,
			"The data fills maxmemory and writes are refused (OOM errors) on "+strings.Join(full, ", ")+
				": raise spec.resources.limits.memory (or spec.config.maxmemory), delete keys, or choose a maxmemory-policy that evicts")
	}
	return scope.Condition(cachev1.ConditionOutOfMemory, metav1.ConditionFalse, cachev1.ReasonAsExpected,
		"No node was killed out of memory, and none refuses writes at maxmemory")
}
