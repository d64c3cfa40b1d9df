//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/partition"
	"github.com/org/redis-operator/test/testenv"
)

// e2eNodes is how many real nodes the e2e cluster runs, each in a zone of its own.
const e2eNodes = 3

// needsNodes skips a test on a cluster of fewer than n nodes of the harness's own.
func needsNodes(t *testing.T, n int) {
	t.Helper()
	needsLocalNode(t, "powers nodes off")
	if got := len(cluster.Nodes()); got < n {
		t.Skipf("needs %d nodes, the cluster has %d", n, got)
	}
}

// nodeOf is the node a pod runs on.
func nodeOf(t require.TestingT, namespace, pod string) string {
	p := &corev1.Pod{}
	require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: pod}, p))
	require.NotEmpty(t, p.Spec.NodeName, "%s has a node", pod)
	return p.Spec.NodeName
}

// operatorOffNode moves the operator off node when it runs there (cordon, delete its pod, wait
// for the new one to lead, uncordon): the scenario loses a Redis node's machine, not the
// operator's. (Losing both at once waits for Kubernetes to give the operator's pod up, 5
// minutes: docs/replication.md says why the operator should run with two replicas.)
func operatorOffNode(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	pod, err := cluster.OperatorPod(ctx)
	require.NoError(t, err)
	if nodeOf(t, localcluster.OperatorNamespace, pod) != node {
		return
	}
	cluster.MustKubectl(t, "cordon", node)
	defer cluster.MustKubectl(t, "uncordon", node)
	deleted := time.Now()
	cluster.MustKubectl(t, "-n", localcluster.OperatorNamespace, "delete", "pod", pod, "--wait=true")
	cluster.MustKubectl(t, "-n", localcluster.OperatorNamespace, "rollout", "status", "deployment/redis-operator-controller-manager", "--timeout=120s")
	moved, err := cluster.OperatorPod(ctx)
	require.NoError(t, err)
	require.NotEqual(t, node, nodeOf(t, localcluster.OperatorNamespace, moved))
	// The deleted pod gave its lease up as it stopped, so the new one leads at once, well before
	// the old lease would have run out (CI run 66 lost its machine 54.8s before a promotion:
	// the rollout had been waited for, not the lead).
	lease := &coordinationv1.Lease{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, cluster.Client.Get(ctx, leaseKey, lease))
		assert.Equal(c, moved, ptr.Deref(lease.Spec.HolderIdentity, ""), "the moved operator leads")
	}, operator.DefaultLeaseDuration/2, tick)
	t.Logf("the operator moved off %s: %s leads %.1fs after the old pod's delete", node, moved, time.Since(deleted).Seconds())
}

// The machine of the primary loses power under a workload (three clients through the primary
// Service, each write acknowledged by a replica with WAIT 1): the operator finds the primary
// unreachable, fences nothing it cannot reach, and promotes a replica on another node within
// unreachableTimeout and its check; the clients reconnect through the Service; nothing
// acknowledged is lost. The node comes back with the old primary's pod: it rejoins as a
// replica of the new primary, and acknowledges nothing of its own (no split brain). The
// RedisCluster is Resilient before and after (its pods on three nodes).
func TestNodeLossThePrimarysMachineLosesPower(t *testing.T) {
	needsNodes(t, 3)
	for i, setting := range settings {
		t.Run(setting.name, func(t *testing.T) {
			rc := readyCluster(t, fmt.Sprintf("power-%d", i), setting.minReplicasToWrite)
			t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), rc) })
			resilient := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionResilient)
			require.NotNil(t, resilient)
			assert.Equal(t, metav1.ConditionTrue, resilient.Status, "three pods on three nodes: %s", resilient.Message)
			losePrimarysMachine(t, rc, "off", cluster.PowerOff, cluster.PowerOn)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.True(c, meta.IsStatusConditionTrue(redisClusterNamed(c, rc.Name).Status.Conditions, cachev1.ConditionResilient))
			}, waitFor, tick, "Resilient again, the pod back on its node")
		})
	}
	// With storage on local volumes, the old primary powers on with its data, writes nobody
	// acknowledged included: it comes back fenced and becomes a replica of the new primary.
	t.Run("async with storage", func(t *testing.T) {
		rc := sharedStoredCluster(t)
		readyOnEveryNode(t, rc)
		losePrimarysMachine(t, redisClusterNamed(t, rc.Name), "off (storage)", cluster.PowerOff, cluster.PowerOn)
	})
}

// losePrimarysMachine does lose to the node of rc's primary under three clients through the
// primary Service (WAIT 1), waits for a replica's promotion, lets the writes go on to it for 2 s,
// then does regain. Nothing acknowledged is lost, nothing is acknowledged by a node that was not
// the primary of record, the promotion comes within unreachableTimeout and a few checks, and the
// old primary is a replica of the new one once it is back.
func losePrimarysMachine(t *testing.T, rc *cachev1.RedisCluster, what string, lose, regain func(node string) error) {
	t.Helper()
	primary := rc.Status.Primary
	node := nodeOf(t, ns, primary)
	operatorOffNode(t, node)

	var lost, promoted time.Time
	outcome := scenario{partition: func(t *testing.T, _ *partition.Net, _ map[string]partition.Member, primary string, _ partition.Member) {
		lost = time.Now()
		require.NoError(t, lose(node))
		t.Cleanup(func() { _ = regain(node) }) // a no-op once it is back
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := redisClusterNamed(c, rc.Name)
			assert.NotEqual(c, primary, got.Status.Primary, "a replica is promoted")
			assert.NotEmpty(c, got.Status.Primary)
		}, waitFor, 50*time.Millisecond)
		promoted = time.Now()
		// Writes go on to the new primary for a while before the machine comes back.
		time.Sleep(2 * time.Second)
		require.NoError(t, regain(node))
	}}.run(t, rc)

	t.Logf("node %s (primary %s) %s: a new primary on record %.1fs later; longest without an acknowledged write %s",
		node, primary, what, promoted.Sub(lost).Seconds(), outcome.NoWritablePrimary.Round(time.Millisecond))
	assert.Empty(t, outcome.Lost, "acknowledged writes lost")
	assert.Empty(t, outcome.ByNonPrimary, "writes acknowledged by a node that was not the primary of record")
	assert.Less(t, promoted.Sub(lost), unreachableTimeout+5*time.Second, "promoted within unreachableTimeout and a few checks")

	// The old primary's pod answers again on its node, as a replica of the new primary.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady))
		assert.NotEqual(c, primary, got.Status.Primary)
		for _, n := range got.Status.Nodes {
			if n.Name == primary {
				assert.Equal(c, cachev1.RoleReplica, n.Role, "the old primary is back as a replica")
			}
		}
	}, 2*waitFor, tick)
}

// redisClusterNamed reads a RedisCluster of the e2e namespace.
func redisClusterNamed(c require.TestingT, name string) *cachev1.RedisCluster {
	rc := &cachev1.RedisCluster{}
	require.NoError(c, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, rc))
	return rc
}

// Pods a user pinned to one node (spec.nodeSelector): Ready, for Redis serves, and not
// Resilient, the status and a Warning Event naming the node and what losing it loses. Once the
// pin goes, the pods move apart (the operator replaces them, replicas first) and the
// RedisCluster is Resilient.
func TestPlacementSaysWhenOneNodeHoldsEveryCopy(t *testing.T) {
	needsNodes(t, 2)
	ctx := context.Background()
	rc := testenv.RedisCluster(ns, "pinned", 2)
	rc.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-2"}
	require.NoError(t, cluster.Client.Create(ctx, rc))
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), rc) })
	rc = readyAgain(t, rc)
	var message string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		resilient := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionResilient)
		require.NotNil(c, resilient)
		assert.Equal(c, metav1.ConditionFalse, resilient.Status)
		assert.Equal(c, cachev1.ReasonNodesShared, resilient.Reason)
		assert.Equal(c, "pinned-0 and pinned-1 are all on node-2: losing node-2 loses the primary and its only replica", resilient.Message)
		message = resilient.Message
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady), "Ready stays about serving")
	}, waitFor, tick)
	events := eventMessages(t, "involvedObject.name=pinned,reason="+cachev1.EventNodesShared)
	assert.Equal(t, message, events, "one Warning Event says it")

	require.NoError(t, cluster.Client.Patch(ctx, rc, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodeSelector":null}}`))))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionResilient), "%+v", got.Status.Conditions)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady))
		assert.NotEqual(c, nodeOf(c, ns, "pinned-0"), nodeOf(c, ns, "pinned-1"), "the pods moved apart")
	}, 3*waitFor, tick)
}

// primariesByNode counts each node's shard primaries, as the status names them.
func primariesByNode(c require.TestingT, rc *cachev1.RedisCluster) map[string]int {
	out := map[string]int{}
	for _, s := range rc.Status.Shards {
		out[nodeOf(c, ns, s.Primary)]++
	}
	return out
}

// Cluster mode, three shards of two on three nodes: each node holds one shard's primary (the
// operator hands a shard to its replica when two primaries share a machine), and the
// RedisCluster is Resilient. A node holding a primary loses power under three cluster clients
// (each write acknowledged by a replica, WAIT 1): Redis Cluster promotes the shard's replica on
// another node, every slot is served again, nothing acknowledged is lost; the new primary now
// shares a machine with another shard's, which the status says (Resilient False). When the node
// powers on, its pod rejoins as a replica (without storage, empty, as a new node of its shard;
// with storage on local volumes, with its data and its identity, on the node its volume is on),
// and the operator hands the shard back to it (CLUSTER FAILOVER, once the cluster is whole): one
// primary per machine again, Resilient.
func TestNodeLossAShardPrimarysMachineLosesPower(t *testing.T) {
	needsNodes(t, 3)
	t.Run("without storage", func(t *testing.T) {
		shardPrimarysMachineLosesPower(t, shardedCluster(t, "sharded-power"))
	})
	t.Run("with storage", func(t *testing.T) {
		shardPrimarysMachineLosesPower(t, shardedCluster(t, "sharded-kept", withStorage))
	})
}

func shardPrimarysMachineLosesPower(t *testing.T, rc *cachev1.RedisCluster) {
	t.Helper()
	onePerNode := func(c *assert.CollectT) *cachev1.RedisCluster {
		got := redisClusterNamed(c, rc.Name)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady), "Ready")
		assert.Equal(c, map[string]int{"node-1": 1, "node-2": 1, "node-3": 1}, primariesByNode(c, got), "a primary per node")
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionResilient), "Resilient: %+v", got.Status.Conditions)
		return got
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { rc = onePerNode(c) }, 2*waitFor, tick)
	victim := rc.Status.Shards[0].Primary
	node := nodeOf(t, ns, victim)
	operatorOffNode(t, node)

	var off time.Time
	report, after := shardedScenario{partition: func(t *testing.T, _ *partition.Net) {
		off = time.Now()
		require.NoError(t, cluster.PowerOff(node))
		t.Cleanup(func() { _ = cluster.PowerOn(node) })
		replaced(t, rc, victim)
		t.Logf("%s (shard 0's primary) off with %s: its replica took over %.1fs later", node, victim, time.Since(off).Seconds())
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := redisClusterNamed(c, rc.Name)
			resilient := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionResilient)
			require.NotNil(c, resilient)
			assert.Equal(c, metav1.ConditionFalse, resilient.Status, "two primaries on one node: %s", resilient.Message)
		}, waitFor, tick)
		require.NoError(t, cluster.PowerOn(node))
	}}.run(t, rc)
	t.Logf("longest without an acknowledged write %s", report.NoWritablePrimary.Round(time.Millisecond))
	assert.Empty(t, report.Lost, "acknowledged writes lost")
	assert.Positive(t, report.Acknowledged)
	t.Logf("after power on: primaries %v", primariesOf(after))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := onePerNode(c)
		assert.Equal(c, victim, got.Status.Shards[0].Primary, "the old primary rejoined, and was handed its shard back on its machine")
	}, 3*waitFor, tick, "the operator gives each node one primary again")
	events := eventMessages(t, "involvedObject.name="+rc.Name+",reason="+cachev1.EventClusterChanged)
	assert.Contains(t, events, "to keep each primary on a machine of its own", "an Event says why a shard changed hands")
}

// The primary's machine hangs (every process of the node stopped: the kubelet, containerd and
// Redis), under three clients through the primary Service (WAIT 1): its Redis accepts
// connections and answers nothing, so the operator promotes a replica on another node within
// unreachableTimeout and its check, and the clients reconnect to it. The machine resumes before
// Kubernetes gives it up: the old primary, which believed itself primary throughout, is demoted
// to a replica of the new one, and acknowledges nothing of its own (no split brain); nothing
// acknowledged is lost.
func TestNodeLossThePrimarysMachineFreezesThenResumes(t *testing.T) {
	needsNodes(t, 3)
	for i, setting := range settings {
		t.Run(setting.name, func(t *testing.T) {
			losePrimarysMachine(t, sharedCluster(t, i), "frozen", cluster.FreezeNode, cluster.ThawNode)
		})
	}
	t.Run("async with storage", func(t *testing.T) {
		rc := sharedStoredCluster(t)
		readyOnEveryNode(t, rc)
		losePrimarysMachine(t, redisClusterNamed(t, rc.Name), "frozen (storage)", cluster.FreezeNode, cluster.ThawNode)
	})
}

// A machine lost for good (powered off, not coming back) under two RedisClusters: one without
// storage (a pod on every node) and one with storage on local volumes (local-path-provisioner's),
// whose replica was on that machine. The pods there stay on the lost node, their Redis out of
// reach: not counted, out of the Services, never promoted (a replica takes over if the primary
// was there), and named by the status once Kubernetes marks the node NotReady (Ready False,
// NodeNotReady: the pod and its node). Kubernetes does not let a StatefulSet's pod on a silent
// node go by itself (it cannot know the machine is off rather than cut off); once the
// administrator marks the node out of service (the taint of non-graceful node shutdown), it
// deletes the pods and the StatefulSets start them again. Without storage, the pod runs on
// another node, a new replica that syncs from the primary: Ready with every node. With storage,
// its claim's volume is on the lost machine and the scheduler finds it no node: the status names
// the pod, its claim and the node it waits for, and what lets it start, while the primary serves.
// The machine comes back: that pod starts where its volume is, and nothing acknowledged is lost.
func TestNodeLossOutOfServiceStartsAPodElsewhereOrWaitsForItsVolume(t *testing.T) {
	needsNodes(t, 3)
	ctx := context.Background()
	rc := sharedCluster(t, 1)
	anchored := sharedStoredCluster(t)
	var replica string // the one anchored to the lost machine: its pod waits for it
	for _, n := range anchored.Status.Nodes {
		if n.Role == cachev1.RoleReplica {
			replica = n.Name
		}
	}
	require.NotEmpty(t, replica)
	node := nodeOf(t, ns, replica)
	var stranded string // rc's pod on that node: every node holds one
	for _, n := range rc.Status.Nodes {
		if nodeOf(t, ns, n.Name) == node {
			stranded = n.Name
		}
	}
	require.NotEmpty(t, stranded)
	primary := rc.Status.Primary
	operatorOffNode(t, node)
	w := serviceClient(t, anchored.Name, 1, withPassword(t, anchored.Name+"-auth"))
	defer w.Close()
	require.NoError(t, w.Set(ctx, "kept", "on "+node, 0).Err())
	require.Equal(t, int64(2), w.Do(ctx, "WAIT", 2, 5000).Val(), "the replicas have it, the one on %s too", node)

	require.NoError(t, cluster.PowerOff(node))
	t.Cleanup(func() { _ = cluster.PowerOn(node) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		if stranded == primary {
			assert.NotEqual(c, primary, got.Status.Primary, "a replica is promoted")
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		require.NotNil(c, ready)
		assert.Equal(c, cachev1.ReasonNodeNotReady, ready.Reason)
		assert.Contains(c, ready.Message, fmt.Sprintf("%s is on node %s, which is not ready", stranded, node))
	}, 2*waitFor, tick, "the status names the pod and its lost node")
	pod := &corev1.Pod{}
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: stranded}, pod))
	assert.Empty(t, pod.Labels["cache.example.com/role"], "the stranded pod is in no Service")

	taint := "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
	marked := time.Now()
	cluster.MustKubectl(t, "taint", "node", node, taint)
	t.Cleanup(func() { _ = cluster.Kubectl("taint", "node", node, taint+"-") })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, rc.Name)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady), "Ready: %+v", got.Status.Conditions)
		assert.Len(c, got.Status.Nodes, 3)
		assert.NotEqual(c, node, nodeOf(c, ns, stranded), "the pod runs on another node")
	}, 3*waitFor, tick)
	t.Logf("node %s marked out of service: %s back on %s, Ready %.1fs later", node, stranded, nodeOf(t, ns, stranded), time.Since(marked).Seconds())

	claim := "data-" + replica
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := redisClusterNamed(c, anchored.Name)
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		require.NotNil(c, ready)
		assert.Equal(c, cachev1.ReasonNodeNotReady, ready.Reason)
		assert.Contains(c, ready.Message, fmt.Sprintf("%s waits for its volume (claim %s) on node %s, which is not ready", replica, claim, node))
	}, 2*waitFor, tick, "the status names the pod waiting for its volume on the lost node")
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: replica}, pod))
	assert.Empty(t, pod.Spec.NodeName, "the new pod has no node to run on")
	assert.NoError(t, w.Set(ctx, "meanwhile", "served", 0).Err(), "the primary serves")
	t.Logf("Ready says: %s", meta.FindStatusCondition(redisClusterNamed(t, anchored.Name).Status.Conditions, cachev1.ConditionReady).Message)

	back := time.Now()
	require.NoError(t, cluster.PowerOn(node))
	cluster.MustKubectl(t, "taint", "node", node, taint+"-")
	// The returned node registers again before its pod starts: 74.5 s alone on an idle machine,
	// past readyAgain's 90 s under CI's load (why it takes that long is not yet known).
	readyWithin(t, anchored, 2*waitFor)
	assert.Equal(t, node, nodeOf(t, ns, replica), "the pod runs where its volume is")
	t.Logf("%s powered on: %s Ready on it %.1fs later", node, replica, time.Since(back).Seconds())
	// Where the time after power-on goes (74.5 s alone, not yet explained): the node's and the
	// pod's conditions, each with when it last changed, and the pod's Events.
	t.Logf("powered on at %s; node: %s; pod: %s; events:\n%s", back.UTC().Format(time.RFC3339),
		cluster.MustKubectl(t, "get", "node", node, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status}@{.lastTransitionTime} {end}`),
		cluster.MustKubectl(t, "get", "pod", "-n", ns, replica, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status}@{.lastTransitionTime} {end}`),
		cluster.MustKubectl(t, "get", "events", "-n", ns, "--field-selector", "involvedObject.name="+replica, "--sort-by=.lastTimestamp",
			"-o", "custom-columns=FIRST:.firstTimestamp,LAST:.lastTimestamp,REASON:.reason,MESSAGE:.message"))
	for key, want := range map[string]string{"kept": "on " + node, "meanwhile": "served"} {
		assert.Equal(t, want, w.Get(ctx, key).Val(), key)
	}
}
