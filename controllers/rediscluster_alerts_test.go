package controllers_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

// The alerts are those of config/prometheus/rules.yaml, the file users apply: parsed by
// Prometheus's own rule parser and evaluated by its PromQL engine against the series this
// operator produces while real redis-server processes fail under it.

const rulesFile = "../config/prometheus/rules.yaml" // a copy of internal/monitoring/prometheusrule.yaml

// alertRules are the PrometheusRule's alerting rules by name, as Prometheus parses and
// validates them.
func alertRules(t *testing.T) map[string]rulefmt.Rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var prometheusRule struct {
		Kind string `json:"kind"`
		Spec any    `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prometheusRule))
	require.Equal(t, "PrometheusRule", prometheusRule.Kind)
	groups, err := yaml.Marshal(prometheusRule.Spec)
	require.NoError(t, err)
	parsed, errs := rulefmt.Parse(groups, false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	require.Empty(t, errs, "Prometheus's rule parser")
	out := map[string]rulefmt.Rule{}
	for _, g := range parsed.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r
			}
		}
	}
	return out
}

func TestAlertRulesParseAndEachHasItsRunbookInTheDocs(t *testing.T) {
	rules := alertRules(t)
	page, err := os.ReadFile("../docs/metrics-and-alerts.md")
	require.NoError(t, err)
	names := make([]string, 0, len(rules))
	for name, r := range rules {
		names = append(names, name)
		assert.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], name)
		assert.NotEmpty(t, r.Annotations["summary"], name)
		assert.NotEmpty(t, r.Annotations["description"], name)
		anchor := strings.ToLower(name)
		assert.Equal(t, "https://github.com/org/redis-operator/blob/main/docs/metrics-and-alerts.md#"+anchor, r.Annotations["runbook_url"], name)
		assert.Regexp(t, regexp.MustCompile(`(?m)^#+ `+name+`$`), string(page), "docs/metrics-and-alerts.md has the runbook of %s", name)
	}
	assert.ElementsMatch(t, []string{
		"RedisClusterNoWritablePrimary", "RedisClusterFailover", "RedisReplicaLagging", "RedisNodeNotServing",
		"RedisMemoryNearMax", "RedisEvictingKeys", "RedisClusterPasswordRejected", "RedisClusterDegraded",
		"RedisClusterDown", "RedisClusterSlotsWithoutPrimary", "RedisRefusingWrites", "RedisOOMKilled",
	}, names)
}

// seriesRecorder scrapes the registry the manager serves, as Prometheus would, and keeps the
// series of one namespace in a TSDB (under t.TempDir()), for the alerts' expressions.
type seriesRecorder struct {
	db     *tsdb.DB
	engine *promql.Engine
	rules  map[string]rulefmt.Rule
}

// scrapeInterval is short so that a test need not wait for minutes; the engine's lookback is a
// few intervals, so that a series that is gone stops matching, as Prometheus's staleness does.
const scrapeInterval = 200 * time.Millisecond

func recordSeries(t *testing.T, namespace string) *seriesRecorder {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = 0
	db, err := tsdb.Open(t.TempDir(), nil, nil, opts, nil)
	require.NoError(t, err)
	r := &seriesRecorder{db: db, rules: alertRules(t), engine: promql.NewEngine(promql.EngineOpts{
		MaxSamples: 10_000_000, Timeout: 10 * time.Second, LookbackDelta: 5 * scrapeInterval,
	})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(scrapeInterval)
		defer ticker.Stop()
		for {
			r.scrape(t, namespace)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = db.Close()
	})
	return r
}

func (r *seriesRecorder) scrape(t *testing.T, namespace string) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Errorf("gathering metrics: %v", err)
		return
	}
	now := time.Now().UnixMilli()
	app := r.db.Appender(context.Background())
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var value float64
			switch {
			case m.Gauge != nil:
				value = m.GetGauge().GetValue()
			case m.Counter != nil:
				value = m.GetCounter().GetValue()
			default:
				continue
			}
			ls := map[string]string{model.MetricNameLabel: f.GetName()}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["namespace"] != namespace {
				continue
			}
			if _, err := app.Append(0, labels.FromMap(ls), now, value); err != nil {
				t.Errorf("appending %s: %v", f.GetName(), err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Errorf("committing samples: %v", err)
	}
}

// firing is the label sets the alert's expression returns now (its "for" aside: that is
// Prometheus's part), each as its pod, or its rediscluster for a cluster-wide alert.
func (r *seriesRecorder) firing(c require.TestingT, alert string) []string {
	return r.firedSince(c, alert, time.Now())
}

// firedSince is the label sets the alert's expression returned at any scrape since from.
func (r *seriesRecorder) firedSince(c require.TestingT, alert string, from time.Time) []string {
	rule, ok := r.rules[alert]
	require.True(c, ok, "no alert %s", alert)
	q, err := r.engine.NewRangeQuery(context.Background(), r.db, nil, rule.Expr, from, time.Now(), scrapeInterval)
	require.NoError(c, err)
	defer q.Close()
	res := q.Exec(context.Background())
	require.NoError(c, res.Err, alert)
	matrix, err := res.Matrix()
	require.NoError(c, err)
	var out []string
	for _, s := range matrix {
		who := s.Metric.Get("pod")
		if who == "" {
			who = s.Metric.Get("rediscluster")
		}
		out = append(out, who)
	}
	slices.Sort(out)
	return out
}

// values are the values an expression returns now, one per series, sorted.
func (r *seriesRecorder) values(c require.TestingT, expr string) []float64 {
	q, err := r.engine.NewInstantQuery(context.Background(), r.db, nil, expr, time.Now())
	require.NoError(c, err)
	defer q.Close()
	res := q.Exec(context.Background())
	require.NoError(c, res.Err, expr)
	vector, err := res.Vector()
	require.NoError(c, err)
	var out []float64
	for _, s := range vector {
		out = append(out, s.F)
	}
	slices.Sort(out)
	return out
}

// quiet asserts that none of the alerts' expressions returned anything since from.
func (r *seriesRecorder) quiet(t *testing.T, from time.Time, except ...string) {
	t.Helper()
	for name := range r.rules {
		if !slices.Contains(except, name) {
			assert.Empty(t, r.firedSince(t, name, from), "%s fired on a healthy cluster", name)
		}
	}
}

func TestAlertsFireOnWhatTheyDescribe(t *testing.T) {
	t.Run("a failover, then a password Redis refuses", func(t *testing.T) {
		t.Parallel()
		ns, rc, node := readyCluster(t)
		series := recordSeries(t, ns)
		// Given a healthy cluster: no alert's expression returns anything
		healthy := time.Now()
		time.Sleep(2 * time.Second)
		series.quiet(t, healthy)

		// When the primary's Redis dies
		node.Server("sessions-0").Kill()

		// Then the failover alert fires; the replica that took over is writable (the gap, under
		// a second here, is shorter than a scrape: the no-writable-primary alert is tested
		// where no replica can take over)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions"}, series.firing(c, "RedisClusterFailover"))
		}, waitFor, tick)
		eventuallyReady(t, rc)
		// (the status may be written before the next scrape sees the new primary)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Empty(c, series.firing(c, "RedisClusterNoWritablePrimary"))
		}, 5*time.Second, scrapeInterval)

		// When every node's password is changed behind the operator's back, and its own user
		// deleted, at once
		password := secretValue(t, ns, "sessions-auth", "password")
		for _, pod := range []string{"sessions-0", "sessions-1", "sessions-2"} {
			_, err := redisClient(t, node, pod, password).TxPipelined(context.Background(), func(p goredis.Pipeliner) error {
				p.ConfigSet(context.Background(), "requirepass", "not-the-secret's")
				p.Do(context.Background(), "ACL", "DELUSER", "redis-operator")
				return nil
			})
			require.NoError(t, err)
		}

		// Then the password and the Degraded alerts fire for the cluster
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions"}, series.firing(c, "RedisClusterPasswordRejected"))
			assert.Equal(c, []string{"sessions"}, series.firing(c, "RedisClusterDegraded"))
		}, waitFor, tick)
	})

	t.Run("a replica that stops", func(t *testing.T) {
		t.Parallel()
		ns, rc, node := readyCluster(t)
		series := recordSeries(t, ns)
		require.Equal(t, "sessions-0", rc.Status.Primary)
		healthy := time.Now()
		time.Sleep(2 * time.Second)
		series.quiet(t, healthy)

		// When a replica's process is stopped (a hung node: its port open, nothing answers)
		require.NoError(t, node.Server("sessions-2").Signal(syscall.SIGSTOP))
		t.Cleanup(func() { _ = node.Server("sessions-2").Signal(syscall.SIGCONT) })
		stopped := time.Now()

		// Then it does not serve, and after 30s without acknowledging its primary it lags
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions-2"}, series.firing(c, "RedisNodeNotServing"))
		}, waitFor, tick)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions-2"}, series.firing(c, "RedisReplicaLagging"))
		}, 60*time.Second, time.Second)
		// Redis counts the lag from the replica's last acknowledgement (sent each second, so up to
		// a second before the stop) in whole seconds of its own clock (up to a second more): 30s
		// of lag can be reached 28s after the stop, and not sooner (29.87s seen in CI).
		assert.GreaterOrEqual(t, time.Since(stopped), 28*time.Second, "lagging only after the threshold")
		// and the primary was writable all along
		assert.Empty(t, series.firedSince(t, "RedisClusterNoWritablePrimary", healthy))
		assert.Empty(t, series.firedSince(t, "RedisClusterFailover", healthy))
	})

	t.Run("cluster mode: a shard whose nodes are all killed", func(t *testing.T) {
		t.Parallel()
		e := newShardedCluster(t, "sharded")
		series := recordSeries(t, e.ns)
		healthy := time.Now()
		time.Sleep(2 * time.Second)
		series.quiet(t, healthy)
		// (quiet, with the series there: the cluster is up, every slot assigned, each node serves)
		assert.Equal(t, []float64{1}, series.values(t, "redis_operator_cluster_state"))
		assert.Equal(t, []float64{16384}, series.values(t, "sum(redis_operator_shard_slots_assigned)"))
		assert.Equal(t, []float64{0, 0, 0}, series.values(t, "redis_operator_shard_slots_failing"))
		assert.Equal(t, []float64{6}, series.values(t, "sum(redis_operator_node_serving)"))
		assert.Equal(t, []float64{3}, series.values(t, "sum(redis_operator_node_primary)"))
		assert.Equal(t, []float64{1}, series.values(t, "redis_operator_writable_primary"))

		// When both nodes of shard 1 are killed and stay down
		victim := e.ready.Status.Shards[1]
		e.node.NoRestart.Store(true)
		e.node.Server(victim.Primary).Kill()
		e.node.Server(victim.Replicas[0]).Kill()

		// Then, once the other primaries flag its primary as failed (spec.cluster.nodeTimeout,
		// 1s), its slots have no primary, the cluster is down, the shard has no writable
		// primary, and its nodes do not serve
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sharded"}, series.firing(c, "RedisClusterSlotsWithoutPrimary"))
			assert.Equal(c, []string{"sharded"}, series.firing(c, "RedisClusterDown"))
			assert.Equal(c, []string{"sharded"}, series.firing(c, "RedisClusterNoWritablePrimary"))
			assert.Equal(c, slices.Sorted(slices.Values([]string{victim.Primary, victim.Replicas[0]})), series.firing(c, "RedisNodeNotServing"))
		}, waitFor, tick)
	})

	t.Run("a node that refuses writes at its maxmemory", func(t *testing.T) {
		t.Parallel()
		// Given a node with a memory limit and no maxmemory of the user's, that evicts nothing
		ns := newNamespace(t)
		startOperator(t, adminCfg, ns)
		rc := testenv.RedisCluster(ns, "sessions", 1)
		rc.Spec.Config = map[string]cachev1.ConfigValue{"maxmemory-policy": "noeviction"}
		rc.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")}}
		require.NoError(t, k8sClient.Create(context.Background(), rc))
		node := runLocalNode(t, ns)
		rc = eventuallyReady(t, rc)
		series := recordSeries(t, ns)
		healthy := time.Now()
		time.Sleep(2 * time.Second)
		series.quiet(t, healthy)
		c := redisClient(t, node, "sessions-0", secretValue(t, ns, "sessions-auth", "password"))
		require.EventuallyWithT(t, func(co *assert.CollectT) {
			got, err := c.ConfigGet(context.Background(), "maxmemory").Result()
			require.NoError(co, err)
			assert.Equal(co, fmt.Sprint(16*1024*1024/100*resources.MaxMemoryPercent), got["maxmemory"], "a share of the limit")
		}, waitFor, tick)

		// When more is written than maxmemory holds: Redis refuses the writes past it
		value := strings.Repeat("v", 10_000)
		var refused error
		for i := 0; i < 5000 && refused == nil; i++ {
			refused = c.Set(context.Background(), fmt.Sprintf("key-%d", i), value, 0).Err()
		}
		require.ErrorContains(t, refused, "OOM command not allowed when used memory > 'maxmemory'")

		// Then, at the next load reading, the status says the node refuses writes at maxmemory,
		// naming its policy, and the alert fires
		require.EventuallyWithT(t, func(co *assert.CollectT) {
			got := getRC(co, rc)
			cond := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionOutOfMemory)
			require.NotNil(co, cond)
			assert.Equal(co, cachev1.ReasonMaxMemoryReached, cond.Reason)
			assert.Contains(co, cond.Message, "sessions-0 (maxmemory ")
			assert.Contains(co, cond.Message, ", noeviction)")
			assert.Equal(co, []string{"sessions"}, series.firing(co, "RedisRefusingWrites"))
		}, 30*time.Second, time.Second)

		// When keys are deleted: writes are taken again, and the condition clears
		require.NoError(t, c.FlushAll(context.Background()).Err())
		require.EventuallyWithT(t, func(co *assert.CollectT) {
			cond := meta.FindStatusCondition(getRC(co, rc).Status.Conditions, cachev1.ConditionOutOfMemory)
			require.NotNil(co, cond)
			assert.Equal(co, metav1.ConditionFalse, cond.Status)
		}, 30*time.Second, time.Second)
	})

	t.Run("a node at its maxmemory, then stopped", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		startOperator(t, adminCfg, ns)
		rc := testenv.RedisCluster(ns, "sessions", 1)
		rc.Spec.Config = map[string]cachev1.ConfigValue{"maxmemory": "4mb", "maxmemory-policy": "allkeys-lru"}
		require.NoError(t, k8sClient.Create(context.Background(), rc))
		node := runLocalNode(t, ns)
		eventuallyReady(t, rc)
		series := recordSeries(t, ns)
		healthy := time.Now()
		time.Sleep(2 * time.Second)
		series.quiet(t, healthy)

		// When more is written than maxmemory holds
		c := redisClient(t, node, "sessions-0", secretValue(t, ns, "sessions-auth", "password"))
		value := strings.Repeat("v", 10_000)
		for i := range 1000 {
			require.NoError(t, c.Set(context.Background(), fmt.Sprintf("key-%d", i), value, 0).Err())
		}

		// Then, at the next load reading (every 10s), the node is near its maxmemory and evicts
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions-0"}, series.firing(c, "RedisMemoryNearMax"))
			assert.Equal(c, []string{"sessions-0"}, series.firing(c, "RedisEvictingKeys"))
		}, 30*time.Second, time.Second)

		// When the only node's process is stopped: no replica can take over
		require.NoError(t, node.Server("sessions-0").Signal(syscall.SIGSTOP))
		t.Cleanup(func() { _ = node.Server("sessions-0").Signal(syscall.SIGCONT) })

		// Then the cluster has no writable primary, and its node does not serve
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"sessions"}, series.firing(c, "RedisClusterNoWritablePrimary"))
			assert.Equal(c, []string{"sessions-0"}, series.firing(c, "RedisNodeNotServing"))
		}, waitFor, tick)
	})
}
