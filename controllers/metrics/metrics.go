// Package metrics is the RedisCluster's Prometheus series: what the health check already sees
// of each node (no exporter sidecar), cluster mode's slots, the conditions, and the changes of
// primary, data lost and OOM kills the phases report. Memory is what they need of one
// RedisCluster from one check to the next.
package metrics

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/internal/topology"
)

// The metrics come from what the health check already sees (no exporter sidecar): each node's
// part in replication at every check, and the changes of primary the operator makes. Every
// series is labelled with the RedisCluster's namespace and name; a node's with its pod too.
var (
	nodeLabels    = []string{"namespace", "rediscluster", "pod"}
	clusterLabels = []string{"namespace", "rediscluster"}

	nodeUp = nodeGauge("redis_operator_node_up",
		"1 when the node answered the operator's last check, 0 when it did not.")
	nodePrimary = nodeGauge("redis_operator_node_primary",
		"1 for the node that is the recorded primary and answers as one, 0 for every other node.")
	nodeServing = nodeGauge("redis_operator_node_serving",
		"1 when the node does its job: the primary answering as primary, or a replica of it with its link up (it is in the Services).")
	nodeOffset = nodeGauge("redis_operator_node_replication_offset_bytes",
		"How much of the replication stream the node holds (master_repl_offset), at the last check it answered.")
	replicaLag = nodeGauge("redis_operator_replica_lag_bytes",
		"How far a replica is behind its primary's replication stream, at the last check both answered.")
	replicaLagSeconds = nodeGauge("redis_operator_replica_lag_seconds",
		"Seconds since a replica last acknowledged its primary's stream, as the primary tells it (it holds when the replica does not answer).")
	lastCheck = nodeGauge("redis_operator_node_last_successful_check_timestamp_seconds",
		"When the node last answered a check (Unix time).")
	primaryChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redis_operator_primary_changes_total",
		Help: "Changes of primary the operator carried out, by reason: Failover (the primary failed) or Switchover (planned).",
	}, append(clusterLabels, "reason"))
	primaryChangeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "redis_operator_primary_change_duration_seconds",
		Help:    "From the decision to change the primary until the new one takes writes, by reason.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, append(clusterLabels, "reason"))
	nodeClients = nodeGauge("redis_operator_node_connected_clients",
		"Client connections to the node (connected_clients), at its last load reading.")
	nodeMemoryUsed = nodeGauge("redis_operator_node_memory_used_bytes",
		"Memory the node's data uses (used_memory), at its last load reading.")
	nodeMemoryMax = nodeGauge("redis_operator_node_memory_max_bytes",
		"The node's maxmemory; 0 when unlimited.")
	nodeOps = nodeGauge("redis_operator_node_ops_per_second",
		"Commands per second the node processes (instantaneous_ops_per_sec), at its last load reading.")
	// The keys Redis evicted and expired are its own counters, since it started: they are
	// served as counters with Redis's values (a restart resets them, as rate() expects).
	nodeKeyCounters = newNodeCounters(
		prometheus.NewDesc("redis_operator_node_evicted_keys_total", "Keys the node evicted for maxmemory, since it started.", nodeLabels, nil),
		prometheus.NewDesc("redis_operator_node_expired_keys_total", "Keys that expired on the node, since it started.", nodeLabels, nil),
	)
	writablePrimary = clusterGauge("redis_operator_writable_primary",
		"1 when the recorded primary answered the last check as a primary, 0 when the RedisCluster has no writable primary.")
	conditionStatus = clusterGauge("redis_operator_rediscluster_condition",
		"Each condition of the RedisCluster's status with its reason: 1 when True, 0 when False or Unknown.", "type", "reason")
	dataLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redis_operator_data_lost_total",
		Help: "Times a node holding no data was made primary while the primary before it held some: every node that answered had restarted without its data (the DataLost condition).",
	}, clusterLabels)
	oomKillsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redis_operator_oom_kills_total",
		Help: "Times the kernel killed a node's Redis out of memory (its container's termination said OOMKilled), as the operator saw them (the OutOfMemory condition).",
	}, clusterLabels)
	noWritablePrimary = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redis_operator_no_writable_primary_seconds_total",
		Help: "Time the RedisCluster's checks found no writable primary, summed between checks.",
	}, clusterLabels)

	// Cluster mode's own series, from what its nodes say of the cluster (CLUSTER INFO and
	// CLUSTER NODES).
	clusterStateOK = clusterGauge("redis_operator_cluster_state",
		"Cluster mode: 1 when the nodes that answered all say cluster_state:ok (every slot served), 0 when one says fail or none answered.")
	shardSlotsAssigned = clusterGauge("redis_operator_shard_slots_assigned",
		"Cluster mode: the hash slots the shard's primary serves (16384 across the shards when every slot is assigned).", "shard")
	shardSlotsFailing = clusterGauge("redis_operator_shard_slots_failing",
		"Cluster mode: the shard's slots whose primary the cluster flags as failed, which nobody serves until a replica takes over.", "shard")
	openSlots = clusterGauge("redis_operator_cluster_open_slots",
		"Cluster mode: slots some node imports or migrates (a slot move under way, or one left half done).")
)

// Collectors are the collectors this package fills, for the manager to serve.
func Collectors() []prometheus.Collector {
	out := []prometheus.Collector{nodeKeyCounters, primaryChanges, primaryChangeDuration, noWritablePrimary, dataLost, oomKillsTotal}
	for _, g := range slices.Concat(nodeGauges, clusterGauges) {
		out = append(out, g)
	}
	return out
}

// clusterGauges are every gauge of a RedisCluster as a whole, which go with it: clusterGauge
// lists them.
var clusterGauges []*prometheus.GaugeVec

// clusterGauge is a gauge labelled with a RedisCluster, and the labels extra.
func clusterGauge(name, help string, extra ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, slices.Concat(clusterLabels, extra))
	clusterGauges = append(clusterGauges, g)
	return g
}

// nodeGauges are every gauge of a node, which go with its pod: nodeGauge lists them.
var nodeGauges []*prometheus.GaugeVec

// nodeGauge is a gauge labelled with a node's RedisCluster and pod.
func nodeGauge(name, help string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, nodeLabels)
	nodeGauges = append(nodeGauges, g)
	return g
}

// statsInterval is how often the nodes' load is read for the metrics: a larger INFO than the
// check's, so not at every check.
const statsInterval = 10 * time.Second

// ReadStats reads the load of the nodes of views whose last reading is statsInterval old or
// more.
func ReadStats(ctx context.Context, m *Memory, dial topology.Dialer, views []topology.View) map[string]topology.Stats {
	now := time.Now()
	m.mu.Lock()
	due := map[string]bool{}
	for _, v := range views {
		for _, o := range v.Nodes {
			due[o.Name] = now.Sub(m.statsAt[o.Name]) >= statsInterval
		}
	}
	m.mu.Unlock()
	stats := map[string]topology.Stats{}
	for _, v := range views {
		maps.Copy(stats, topology.ObserveStats(ctx, dial, v, func(name string) bool { return due[name] }))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.statsAt == nil {
		m.statsAt = map[string]time.Time{}
	}
	for name := range stats {
		m.statsAt[name] = now
	}
	return stats
}

// nodeCounters serves counters whose values Redis keeps (evicted and expired keys), as read at
// each node's last load reading.
type nodeCounters struct {
	evicted, expired *prometheus.Desc
	mu               sync.Mutex
	values           map[[3]string]topology.Stats // namespace, rediscluster, pod
}

func newNodeCounters(evicted, expired *prometheus.Desc) *nodeCounters {
	return &nodeCounters{evicted: evicted, expired: expired, values: map[[3]string]topology.Stats{}}
}

func (c *nodeCounters) Describe(ch chan<- *prometheus.Desc) { ch <- c.evicted; ch <- c.expired }

func (c *nodeCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, s := range c.values {
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.EvictedKeys), k[0], k[1], k[2])
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(s.ExpiredKeys), k[0], k[1], k[2])
	}
}

func (c *nodeCounters) set(namespace, name, pod string, s topology.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[[3]string{namespace, name, pod}] = s
}

// forget removes the series of one pod, or of every pod of the RedisCluster when pod is "".
func (c *nodeCounters) forget(namespace, name, pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.values {
		if k[0] == namespace && k[1] == name && (pod == "" || k[2] == pod) {
			delete(c.values, k)
		}
	}
}

// Memory is what the metrics of one RedisCluster need from one check to the next.
type Memory struct {
	mu sync.Mutex
	// pods are the pods that have series, so that a pod that goes loses them.
	pods map[string]bool
	// checkedAt is when the last check with nodes ran.
	checkedAt time.Time
	// statsAt is when each node's load was last read.
	statsAt map[string]time.Time
	// conditions are the conditions' reasons and statuses as their series show them.
	conditions map[string]metav1.Condition
	// shards are the shards that have series (cluster mode), so that a shard removed loses them.
	shards map[int]bool
}

// RecordNodes sets the RedisCluster's series from this reconcile's views of its nodes (one in
// replication mode, one per shard in cluster mode, each judged against its primary) and the
// load readings taken. A reconcile that did not observe them (views nil) leaves the series as
// they were.
func RecordNodes(rc *cachev1.RedisCluster, m *Memory, views []topology.View, stats map[string]topology.Stats, now time.Time) {
	if views == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	nodes, writable := 0, true
	for _, v := range views {
		nodes += len(v.Nodes)
		writable = writable && v.WritablePrimary()
		recordViewMetrics(rc, v, stats, seen, now)
	}
	for pod := range m.pods {
		if !seen[pod] {
			deleteNodeSeries(rc.Namespace, rc.Name, pod)
			delete(m.statsAt, pod)
		}
	}
	if m.pods == nil {
		for _, reason := range primaryChangeReasons {
			primaryChanges.WithLabelValues(rc.Namespace, rc.Name, reason)
		}
	}
	m.pods = seen
	if nodes > 0 {
		writablePrimary.WithLabelValues(rc.Namespace, rc.Name).Set(boolValue(writable))
	}
	if nodes > 0 && !m.checkedAt.IsZero() && !writable {
		noWritablePrimary.WithLabelValues(rc.Namespace, rc.Name).Add(now.Sub(m.checkedAt).Seconds())
	}
	m.checkedAt = now
	if nodes == 0 {
		m.checkedAt = time.Time{}
	}
}

// recordViewMetrics sets the series of the nodes of one view, and marks them seen.
func recordViewMetrics(rc *cachev1.RedisCluster, v topology.View, stats map[string]topology.Stats, seen map[string]bool, now time.Time) {
	for _, o := range v.Nodes {
		seen[o.Name] = true
		labels := prometheus.Labels{"namespace": rc.Namespace, "rediscluster": rc.Name, "pod": o.Name}
		nodeUp.With(labels).Set(boolValue(o.Reachable()))
		nodePrimary.With(labels).Set(boolValue(o.Name == v.Primary && o.IsPrimary()))
		nodeServing.With(labels).Set(boolValue(v.Serving(o)))
		if o.Reachable() {
			nodeOffset.With(labels).Set(float64(o.Info.Offset))
			lastCheck.With(labels).Set(float64(now.UnixNano()) / 1e9)
		}
		if st, ok := stats[o.Name]; ok {
			nodeClients.With(labels).Set(float64(st.ConnectedClients))
			nodeMemoryUsed.With(labels).Set(float64(st.UsedMemory))
			nodeMemoryMax.With(labels).Set(float64(st.MaxMemory))
			nodeOps.With(labels).Set(float64(st.OpsPerSecond))
			nodeKeyCounters.set(rc.Namespace, rc.Name, o.Name, st)
		}
		if lag, ok := v.LagBytes(o); ok {
			replicaLag.With(labels).Set(float64(lag))
		} else {
			replicaLag.Delete(labels)
		}
		if lag, ok := v.LagSeconds(o); ok {
			replicaLagSeconds.With(labels).Set(float64(lag))
		} else {
			replicaLagSeconds.Delete(labels)
		}
	}
}

// RecordShards sets cluster mode's own series from what the nodes said of the slots (h), for
// count shards: the cluster's state (down when a node says it does not serve every slot), each
// shard's slots and those without a primary, and the open slots.
func RecordShards(rc *cachev1.RedisCluster, m *Memory, h shards.Health, down bool, count int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clusterStateOK.WithLabelValues(rc.Namespace, rc.Name).Set(boolValue(h.Answered && !down))
	openSlots.WithLabelValues(rc.Namespace, rc.Name).Set(float64(h.Open))
	seen := map[int]bool{}
	for i := range count {
		seen[i] = true
		shard := strconv.Itoa(i)
		shardSlotsAssigned.WithLabelValues(rc.Namespace, rc.Name, shard).Set(float64(h.Assigned[i]))
		shardSlotsFailing.WithLabelValues(rc.Namespace, rc.Name, shard).Set(float64(h.Failing[i]))
	}
	for i := range m.shards {
		if !seen[i] {
			labels := prometheus.Labels{"namespace": rc.Namespace, "rediscluster": rc.Name, "shard": strconv.Itoa(i)}
			shardSlotsAssigned.Delete(labels)
			shardSlotsFailing.Delete(labels)
		}
	}
	m.shards = seen
}

// RecordConditions sets one series per condition of the status, with its current reason; a
// reason that changes replaces its series, so that an alert on a reason ends with it.
// Only a condition whose reason or status changed touches the series: the health check runs
// this every second for every RedisCluster.
func RecordConditions(rc *cachev1.RedisCluster, m *Memory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conditions == nil {
		m.conditions = map[string]metav1.Condition{}
	}
	for _, c := range rc.Status.Conditions {
		last, seen := m.conditions[c.Type]
		if seen && last.Reason == c.Reason && last.Status == c.Status {
			continue
		}
		if seen && last.Reason != c.Reason {
			conditionStatus.Delete(prometheus.Labels{"namespace": rc.Namespace, "rediscluster": rc.Name, "type": c.Type, "reason": last.Reason})
		}
		conditionStatus.With(prometheus.Labels{"namespace": rc.Namespace, "rediscluster": rc.Name, "type": c.Type, "reason": c.Reason}).
			Set(boolValue(c.Status == metav1.ConditionTrue))
		m.conditions[c.Type] = metav1.Condition{Reason: c.Reason, Status: c.Status}
	}
}

// primaryChangeReasons are the reasons a primary changes: their counters start at 0 with the
// RedisCluster, so that increase() sees the first change.
var primaryChangeReasons = []string{cachev1.ReasonFailover, cachev1.ReasonSwitchover}

// RecordPrimaryChange counts a change of primary for reason (Failover, Switchover) once it is
// done, with how long it took since it started.
func RecordPrimaryChange(rc *cachev1.RedisCluster, reason string, started, now time.Time) {
	primaryChanges.WithLabelValues(rc.Namespace, rc.Name, reason).Inc()
	primaryChangeDuration.WithLabelValues(rc.Namespace, rc.Name, reason).Observe(now.Sub(started).Seconds())
}

// DataLost counts a loss of data (the DataLost condition).
func DataLost(rc *cachev1.RedisCluster) { dataLost.WithLabelValues(rc.Namespace, rc.Name).Inc() }

// OOMKilled counts a kill of a node's Redis out of memory (the OutOfMemory condition).
func OOMKilled(rc *cachev1.RedisCluster) { oomKillsTotal.WithLabelValues(rc.Namespace, rc.Name).Inc() }

func deleteNodeSeries(namespace, name, pod string) {
	for _, g := range nodeGauges {
		g.Delete(prometheus.Labels{"namespace": namespace, "rediscluster": name, "pod": pod})
	}
	nodeKeyCounters.forget(namespace, name, pod)
}

// Forget removes every series of a RedisCluster that is gone.
func Forget(key types.NamespacedName) {
	labels := prometheus.Labels{"namespace": key.Namespace, "rediscluster": key.Name}
	for _, g := range nodeGauges {
		g.DeletePartialMatch(labels)
	}
	nodeKeyCounters.forget(key.Namespace, key.Name, "")
	primaryChanges.DeletePartialMatch(labels)
	primaryChangeDuration.DeletePartialMatch(labels)
	noWritablePrimary.DeletePartialMatch(labels)
	dataLost.DeletePartialMatch(labels)
	oomKillsTotal.DeletePartialMatch(labels)
	for _, g := range clusterGauges {
		g.DeletePartialMatch(labels)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
