//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/history"
	"github.com/org/redis-operator/test/partition"
)

// Planned maintenance: a node drained (kubectl drain: every pod evicted, the PodDisruptionBudget
// letting one Redis pod go at a time), a pod deleted, a rollout. The operator hands the primary
// role over before the primary's Redis stops (the pod's preStop hook holds its SIGTERM until the
// node is a replica), so clients through the Service see a short pause and lose nothing.

// drain drains node as a cluster upgrade does (DaemonSets stay, emptyDir data goes with its
// pod) and returns once every pod it evicted is gone; the node stays cordoned until uncordon.
func drain(t *testing.T, node string) {
	t.Helper()
	t.Cleanup(func() { _ = cluster.Kubectl("uncordon", node) }) // a no-op once uncordoned
	cluster.MustKubectl(t, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
}

// handedOver asserts that rc's primary changed by switchovers (the SwitchedOver Event) and never
// by a failover (FailedOver): the role moved while the old primary still answered.
func handedOver(t *testing.T, rc *cachev1.RedisCluster) {
	t.Helper()
	assert.Empty(t, eventMessages(t, "involvedObject.name="+rc.Name+",reason="+cachev1.EventFailedOver),
		"no failover: the primary was handed over before its Redis stopped")
	assert.Contains(t, eventMessages(t, "involvedObject.name="+rc.Name+",reason="+cachev1.EventSwitchedOver), "is being deleted", "switchovers")
	assert.Empty(t, eventMessages(t, "reason=FailedPreStopHook"), "every preStop hook ran to its end")
}

// eventMessages are the messages of the e2e namespace's Events that fieldSelector selects.
func eventMessages(t *testing.T, fieldSelector string) string {
	t.Helper()
	return cluster.MustKubectl(t, "get", "events", "-n", ns, "--field-selector", fieldSelector, "-o", "jsonpath={.items[*].message}")
}

// step is one disruption of a scenario, for its figures.
type step struct {
	what     string
	from, to time.Time
}

// logSteps prints each step's length and its longest time without an acknowledged write, with
// the clients' timeline around that gap.
func logSteps(t *testing.T, steps []step, gaps []history.Gap, ops []history.Op) {
	t.Helper()
	for _, s := range steps {
		longest := history.Gap{}
		for _, g := range gaps {
			if g.To.After(s.from) && g.From.Before(s.to) && g.Length() > longest.Length() {
				longest = g
			}
		}
		t.Logf("%s: %.1fs, longest without an acknowledged write %s", s.what, s.to.Sub(s.from).Seconds(), longest.Length().Round(time.Millisecond))
		if longest.Length() > 0 {
			t.Logf("clients from %s before that gap:\n%s", 200*time.Millisecond, history.Timeline(ops, longest.From.Add(-200*time.Millisecond), longest.To.Add(200*time.Millisecond)))
		}
	}
}

// readyOnEveryNode waits until rc is Ready with each pod on a node of its own (Resilient).
func readyOnEveryNode(t *testing.T, rc *cachev1.RedisCluster) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady), "Ready")
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionResilient), "Resilient: %+v", got.Status.Conditions)
	}, 2*waitFor, tick)
}

// The primary's pod deleted (kubectl delete pod, gracefully), then its node drained, then every
// node drained in turn (a cluster upgrade: drain, uncordon, the next), then a rolling upgrade to
// another version, all under one workload of three clients through the primary Service (WAIT 1).
// Each time the primary's pod goes, the
// operator switches the role over to a replica on another node while the old primary still
// answers: no failover, nothing acknowledged lost, and the longest time without an acknowledged
// write is printed for each.
func TestDrainsAndDeletesHandThePrimaryOverBeforeItsRedisStops(t *testing.T) {
	needsNodes(t, 3)
	rc := readyCluster(t, "drains", nil)
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), rc) })
	readyOnEveryNode(t, rc)

	var steps []step
	outcome := scenario{partition: func(t *testing.T, _ *partition.Net, _ map[string]partition.Member, primary string, _ partition.Member) {
		// The primary's pod deleted: the StatefulSet brings it back, as a replica.
		start := time.Now()
		cluster.MustKubectl(t, "-n", ns, "delete", "pod", primary, "--wait=true")
		steps = append(steps, step{fmt.Sprintf("delete pod %s", primary), start, time.Now()})
		readyOnEveryNode(t, rc)

		// Its node drained, then every node in turn.
		first := nodeOf(t, ns, redisClusterNamed(t, rc.Name).Status.Primary)
		order := []string{first}
		for _, n := range cluster.Nodes() {
			if n != first {
				order = append(order, n)
			}
		}
		for _, node := range order {
			before := redisClusterNamed(t, rc.Name).Status.Primary
			held := nodeOf(t, ns, before) == node
			start := time.Now()
			drain(t, node)
			readyAgain(t, rc)
			cluster.MustKubectl(t, "uncordon", node)
			steps = append(steps, step{fmt.Sprintf("drain %s (primary %s there: %t)", node, before, held), start, time.Now()})
			// The evicted pod came back on another node: the next drain may take two of them,
			// one at a time.
			readyAgain(t, rc)
		}

		// A rolling upgrade (a new version): the replicas replaced first, then the primary
		// handed over, then its pod replaced.
		start = time.Now()
		cluster.MustKubectl(t, "-n", ns, "patch", "rediscluster/"+rc.Name, "--type=merge", "-p", `{"spec":{"version":"7.0"}}`)
		eventuallyRolledOut(t, rc.Name, "redis:7.0", 3)
		readyAgain(t, rc)
		steps = append(steps, step{"rolling upgrade to 7.0", start, time.Now()})
	}}.run(t, rc)

	logSteps(t, steps, outcome.Gaps, outcome.ops)
	t.Logf("events:\n%s", cluster.MustKubectl(t, "get", "events.events.k8s.io", "-n", ns, "--field-selector", "regarding.name="+rc.Name,
		"--sort-by=.eventTime", "-o", "custom-columns=TIME:.eventTime,REASON:.reason,NOTE:.note"))
	assert.Empty(t, outcome.Lost, "acknowledged writes lost")
	assert.Empty(t, outcome.ByNonPrimary, "writes acknowledged by a node that was not the primary of record")
	assert.Positive(t, outcome.Acknowledged)
	// Handed over, not failed over: the Events say which (a failover waits out unreachableTimeout,
	// 3 s, and its check). The time without a writable primary is a figure, not a bound: 1.2-2.0 s
	// here alone, 2.65 s beside CI's envtest suites, 4.33 s beside them and a second cluster
	// (2026-12-06); docs/benchmarks.md has the measured figures.
	t.Logf("longest without a writable primary: %s", outcome.NoWritablePrimary)
	handedOver(t, rc)
}

// Cluster mode, three shards of two on three nodes: the node of shard 0's primary drained under
// three cluster clients (WAIT 1). The operator hands the shard to its replica with CLUSTER
// FAILOVER while the primary still answers (Redis waits until the replica has every write):
// every slot stays served, nothing acknowledged is lost.
func TestDrainAShardPrimarysNodeHandsTheShardOver(t *testing.T) {
	needsNodes(t, 3)
	rc := shardedCluster(t, "sharded-drain")
	require.EventuallyWithT(t, func(c *assert.CollectT) { rc = redisClusterNamed(c, rc.Name); assert.Len(c, primariesByNode(c, rc), 3) }, 2*waitFor, tick)
	victim := rc.Status.Shards[0].Primary
	node := nodeOf(t, ns, victim)

	var took time.Duration
	report, after := shardedScenario{partition: func(t *testing.T, _ *partition.Net) {
		start := time.Now()
		drain(t, node)
		took = time.Since(start)
		replaced(t, rc, victim)
		cluster.MustKubectl(t, "uncordon", node)
	}}.run(t, rc)
	t.Logf("drain %s (shard 0's primary %s): %.1fs; longest without an acknowledged write %s over %d acknowledged writes; primaries after %v",
		node, victim, took.Seconds(), report.NoWritablePrimary.Round(time.Millisecond), report.Acknowledged, primariesOf(after))
	assert.Empty(t, report.Lost, "acknowledged writes lost")
	assert.Positive(t, report.Acknowledged)
	events := eventMessages(t, "involvedObject.name="+rc.Name+",reason="+cachev1.EventClusterChanged)
	assert.Contains(t, events, "takes over shard 0 while its primary still answers: the pod of its primary "+victim+" is being deleted")
}

// A drain with storage on local volumes (local-path-provisioner's): the primary's node drained
// under the workload. The operator hands the primary over before its Redis stops, as without
// storage; the evicted pod cannot follow (its volume stays on the cordoned node), so it waits,
// and Ready says so (NodeCordoned: the pod, its claim, the node, what lets it start) while the
// other two serve. Uncordoned, the node takes the pod back. Nothing acknowledged is lost, and no
// failover.
func TestDrainWithLocalVolumesHandsOverAndThePodWaitsForItsNode(t *testing.T) {
	needsNodes(t, 3)
	rc := sharedStoredCluster(t)
	readyOnEveryNode(t, rc)

	var node, evicted string
	var waited time.Duration
	outcome := scenario{partition: func(t *testing.T, _ *partition.Net, _ map[string]partition.Member, primary string, _ partition.Member) {
		evicted, node = primary, nodeOf(t, ns, primary)
		// The operator elsewhere (the story is the volume's): evicted with the primary, its
		// switchover still ends (TestDrainsAndDeletes...), but its Event can be lost with it
		// (CI at 037c54f: no SwitchedOver Event recorded).
		operatorOffNode(t, node)
		drain(t, node)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			ready := meta.FindStatusCondition(redisClusterNamed(c, rc.Name).Status.Conditions, cachev1.ConditionReady)
			require.NotNil(c, ready)
			assert.Equal(c, cachev1.ReasonNodeCordoned, ready.Reason)
			assert.Contains(c, ready.Message, fmt.Sprintf("%s waits for its volume (claim data-%s) on node %s, which is cordoned", evicted, evicted, node))
		}, waitFor, tick, "Ready names the pod waiting for its volume on the drained node")
		uncordoned := time.Now()
		cluster.MustKubectl(t, "uncordon", node)
		readyAgain(t, rc)
		waited = time.Since(uncordoned)
	}}.run(t, rc)

	t.Logf("drain %s (primary %s there, its volume too): back on its node %.1fs after the uncordon; longest without an acknowledged write %s",
		node, evicted, waited.Seconds(), outcome.NoWritablePrimary.Round(time.Millisecond))
	assert.Equal(t, node, nodeOf(t, ns, evicted), "the pod runs where its volume is")
	assert.Empty(t, outcome.Lost, "acknowledged writes lost")
	assert.Empty(t, outcome.ByNonPrimary, "writes acknowledged by a node that was not the primary of record")
	assert.Positive(t, outcome.Acknowledged)
	handedOver(t, rc)
}
