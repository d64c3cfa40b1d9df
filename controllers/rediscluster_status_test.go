package controllers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/org/redis-operator/test/fixtures"
	"github.com/org/redis-operator/test/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/replication"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// The condition functions are pure: each takes what the phases recorded and says one condition.

// setReplicatedStatus is replication mode's part of the status, as the reconciler's mode gives it.
func setReplicatedStatus(rc *cachev1.RedisCluster, state *reconcileState) []*metav1.Condition {
	return replication.Status(rc, &state.Cluster, &state.replication)
}

func TestSetStatusMovesObservedGenerationOnlyWhenTheSpecWasCarriedOut(t *testing.T) {
	rc := fixtures.Cluster(1, "")
	setStatus(rc, &reconcileState{Cluster: scope.Cluster{Failed: &outcome.Failure{Reason: cachev1.ReasonApplyFailed, Err: errors.New("forbidden")}}}, setReplicatedStatus)
	assert.Zero(t, rc.Status.ObservedGeneration)
	for _, c := range rc.Status.Conditions {
		assert.Equal(t, rc.Generation, c.ObservedGeneration, c.Type)
	}

	setStatus(rc, &reconcileState{replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(1)}}, setReplicatedStatus)
	assert.Equal(t, rc.Generation, rc.Status.ObservedGeneration)
}

func TestAContainerThatKeepsExitingIsReportedWithWhatRedisSaid(t *testing.T) {
	crashing := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sessions-1"}, Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
				Message: "*** FATAL CONFIG FILE ERROR ***\n>>> 'maxmemory-policy \"sometimes\"'\nargument(s) must be one of the following"}},
		}},
	}}
	running := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sessions-0"}, Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}}

	exited := exitedNode([]corev1.Pod{running, crashing})

	require.NotNil(t, exited)
	assert.Equal(t, `Redis on sessions-1 keeps exiting: *** FATAL CONFIG FILE ERROR *** | >>> 'maxmemory-policy "sometimes"' | argument(s) must be one of the following`, exited.Message)
	assert.Nil(t, exitedNode([]corev1.Pod{running}))

	rc := fixtures.Cluster(2, "sessions-0")
	state := &reconcileState{Cluster: scope.Cluster{Exited: exited}, replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(2)}}
	setStatus(rc, state, setReplicatedStatus)
	degraded := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDegraded)
	assert.Equal(t, cachev1.ReasonRedisFailedToStart, degraded.Reason)
	ready := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, cachev1.ReasonRedisFailedToStart, ready.Reason)
}

// A node killed by a signal or out of memory, waiting out its back-off, is not a Redis that
// refuses to start: the last lines Redis wrote ("Replication backlog created") say nothing of
// why. The status gives the container's own termination reason, exit code, restarts and back-off.
func TestAKilledNodeIsReportedWithItsTerminationNotItsLog(t *testing.T) {
	for _, c := range []struct {
		name       string
		terminated corev1.ContainerStateTerminated
		says       string
	}{
		{"SIGKILL", corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: "* Replication backlog created, my new replication IDs are ..."},
			"Redis on sessions-1 was killed (Error, exit code 137) and has restarted 4 times; the kubelet starts it again after its restart back-off (back-off 40s)"},
		{"out of memory", corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"},
			"Redis on sessions-1 was killed (OOMKilled, exit code 137) and has restarted 4 times; the kubelet starts it again after its restart back-off (back-off 40s)"},
	} {
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sessions-1"}, Status: corev1.PodStatus{
			ContainerStatuses: []corev1.ContainerStatus{{RestartCount: 4,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: "back-off 40s restarting failed container=redis pod=sessions-1_team-a(0f9c)"}},
				LastTerminationState: corev1.ContainerState{Terminated: &c.terminated},
			}},
		}}
		exited := exitedNode([]corev1.Pod{pod})
		require.NotNil(t, exited, c.name)
		assert.Equal(t, cachev1.ReasonRedisKilled, exited.Reason, c.name)
		assert.Equal(t, c.says, exited.Message, c.name)

		state := &reconcileState{Cluster: scope.Cluster{Exited: exited}, replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(2)}}
		rc := fixtures.Cluster(2, "sessions-0")
		setStatus(rc, state, setReplicatedStatus)
		assert.Equal(t, cachev1.ReasonRedisKilled, meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDegraded).Reason, c.name)
		assert.Equal(t, cachev1.ReasonRedisKilled, meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionReady).Reason, c.name)
	}
}

// A promotion that lost data says so in a condition that stays, with the time of the last loss.
func TestADataLossIsAConditionThatStays(t *testing.T) {
	rc := fixtures.Cluster(2, "sessions-0")
	lost := &reconcileState{Cluster: scope.Cluster{Lost: "sessions-0 was made primary holding no data"}, replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(2)}}
	setStatus(rc, lost, setReplicatedStatus)
	cond := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDataLost)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, cachev1.ReasonNodesRestartedWithoutData, cond.Reason)

	setStatus(rc, &reconcileState{replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(2)}}, setReplicatedStatus)
	kept := meta.FindStatusCondition(rc.Status.Conditions, cachev1.ConditionDataLost)
	require.NotNil(t, kept, "a later reconcile that lost nothing keeps it")
	assert.Equal(t, *cond, *kept)

	healthy := fixtures.Cluster(2, "sessions-0")
	setStatus(healthy, &reconcileState{replication: replication.State{StatefulSet: fixtures.RolledOutStatefulSet(2)}}, setReplicatedStatus)
	assert.Nil(t, meta.FindStatusCondition(healthy.Status.Conditions, cachev1.ConditionDataLost), "never said of a cluster that lost nothing")
}

// A phase that waits is progress: Progressing and Ready say what for, Degraded stays False,
// and observedGeneration moves (the spec is being carried out); a failure after it still
// counts as a failure.
func TestAWaitIsProgressNotDegraded(t *testing.T) {
	wait := &outcome.Waiting{Phase: "RestoreSource", Reason: cachev1.ReasonBackupNotReady, Message: "waiting for the backup"}
	rc := fixtures.Cluster(1, "")
	rc.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "b"}
	setStatus(rc, &reconcileState{Cluster: scope.Cluster{Waiting: wait}}, setReplicatedStatus)
	for _, want := range []struct {
		condition string
		status    metav1.ConditionStatus
		reason    string
	}{
		{cachev1.ConditionProgressing, metav1.ConditionTrue, cachev1.ReasonBackupNotReady},
		{cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonBackupNotReady},
		{cachev1.ConditionRestored, metav1.ConditionFalse, cachev1.ReasonBackupNotReady},
		{cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected},
	} {
		c := meta.FindStatusCondition(rc.Status.Conditions, want.condition)
		if assert.NotNil(t, c, want.condition) {
			assert.Equal(t, want.status, c.Status, want.condition)
			assert.Equal(t, want.reason, c.Reason, want.condition)
		}
	}
	assert.Equal(t, rc.Generation, rc.Status.ObservedGeneration)

	failed := fixtures.Cluster(1, "")
	failed.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "b"}
	setStatus(failed, &reconcileState{Cluster: scope.Cluster{Waiting: wait, Failed: &outcome.Failure{Phase: "Users", Reason: cachev1.ReasonUserRejected, Err: errors.New("no")}}}, setReplicatedStatus)
	assert.True(t, meta.IsStatusConditionTrue(failed.Status.Conditions, cachev1.ConditionDegraded))
	assert.Zero(t, failed.Status.ObservedGeneration)
}

func TestRequeueAfterIsTheSoonerOfTheHealthCheckAndAWait(t *testing.T) {
	r := &RedisClusterReconciler{CheckInterval: 2 * time.Second}
	serving := topology.View{Nodes: []topology.Observed{{Member: topology.Member{Name: "r-0"}}}}
	requeue := func(s *reconcileState) (time.Duration, int) {
		s.mode = replicationMode()
		return r.requeueAfter(s)
	}

	next, _ := requeue(&reconcileState{Cluster: scope.Cluster{Waiting: &outcome.Waiting{}}})
	assert.Zero(t, next, "no nodes, and a wait a watch ends")
	next, priority := requeue(&reconcileState{Cluster: scope.Cluster{Waiting: &outcome.Waiting{After: 5 * time.Second}}})
	assert.Equal(t, 5*time.Second, next)
	assert.Equal(t, eventPriority, priority)
	next, priority = requeue(&reconcileState{Cluster: scope.Cluster{Waiting: &outcome.Waiting{After: 5 * time.Second}}, replication: replication.State{View: serving}})
	assert.Positive(t, next, "the health check, on its tick")
	assert.LessOrEqual(t, next, 2*time.Second)
	assert.Equal(t, healthCheckPriority, priority, "a check goes after what else is queued")
	next, priority = requeue(&reconcileState{Cluster: scope.Cluster{Waiting: &outcome.Waiting{After: 100 * time.Millisecond}}, replication: replication.State{View: serving}})
	assert.Equal(t, 100*time.Millisecond, next)
	assert.Equal(t, eventPriority, priority, "a phase's wait goes before the checks")
	next, priority = requeue(&reconcileState{replication: replication.State{View: serving, Round: topology.Round{Plan: topology.Plan{Recheck: 50 * time.Millisecond}}}})
	assert.Equal(t, 50*time.Millisecond, next)
	assert.Equal(t, eventPriority, priority, "a plan that expects the view to change at once")
}

// Every RedisCluster's health check falls on the interval's ticks.
func TestHealthChecksFallOnTheIntervalsTicks(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 2 * time.Second} {
		for _, nanos := range []int64{0, 1, int64(300 * time.Millisecond), int64(999 * time.Millisecond)} {
			at := time.Unix(2001, nanos)
			next := untilCheckTick(at, interval)
			assert.Positive(t, next)
			assert.LessOrEqual(t, next, interval)
			assert.Zero(t, at.Add(next).UnixNano()%int64(interval), "%s at %s: on a tick", interval, at)
		}
	}
	assert.Equal(t, 700*time.Millisecond, untilCheckTick(time.Unix(10, int64(300*time.Millisecond)), time.Second))
	assert.Equal(t, time.Second, untilCheckTick(time.Unix(10, 0), time.Second), "on a tick: the next one")
}

func TestReadyNamesThePodsOnMachinesThatAreNotReady(t *testing.T) {
	tests := []struct {
		name         string
		stranded     []scope.StrandedPod
		reason, says string
	}{
		{"no machine lost: the count", nil, cachev1.ReasonReplicasNotReady, "2 of 3 Redis nodes are ready"},
		{"a pod on a machine that is not ready", []scope.StrandedPod{{Pod: "sessions-0", Node: "node-2"}}, cachev1.ReasonNodeNotReady,
			"2 of 3 Redis nodes are ready: sessions-0 is on node node-2, which is not ready"},
		{"its pod being deleted: what lets it go", []scope.StrandedPod{{Pod: "sessions-0", Node: "node-2", Terminating: true}}, cachev1.ReasonNodeNotReady,
			"2 of 3 Redis nodes are ready: sessions-0 is on node node-2, which is not ready; its pod is being deleted, and stays until node-2 comes back or is marked out of service (taint node.kubernetes.io/out-of-service), when it starts again on another node"},
		{"its volume on a drained Node: what it waits for", []scope.StrandedPod{{Pod: "sessions-0", Node: "node-2", Claim: "data-sessions-0", Cordoned: true}}, cachev1.ReasonNodeCordoned,
			"2 of 3 Redis nodes are ready: sessions-0 waits for its volume (claim data-sessions-0) on node node-2, which is cordoned: it starts when node-2 is uncordoned, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted"},
		{"a machine not ready names the reason before a cordoned one", []scope.StrandedPod{{Pod: "sessions-0", Node: "node-2", Claim: "data-sessions-0", Cordoned: true}, {Pod: "sessions-1", Node: "node-3"}}, cachev1.ReasonNodeNotReady,
			"2 of 3 Redis nodes are ready: sessions-0 waits for its volume (claim data-sessions-0) on node node-2, which is cordoned: it starts when node-2 is uncordoned, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted; sessions-1 is on node node-3, which is not ready"},
		{"started again, its volume on that machine: what it waits for", []scope.StrandedPod{{Pod: "sessions-0", Node: "node-2", Claim: "data-sessions-0"}}, cachev1.ReasonNodeNotReady,
			"2 of 3 Redis nodes are ready: sessions-0 waits for its volume (claim data-sessions-0) on node node-2, which is not ready: it starts when node-2 comes back, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := scope.ReplicasNotReady(2, 3, tc.stranded)
			assert.Equal(t, metav1.ConditionFalse, c.Status)
			assert.Equal(t, tc.reason, c.Reason)
			assert.Equal(t, tc.says, c.Message)
		})
	}
}

// A reconcile goes on for its grace once the operator stops, then ends; one that returns first
// releases its timer.
func TestAReconcileRunsOnForItsGraceOnceTheOperatorStops(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel := withStopGrace(parent, 200*time.Millisecond)
	defer cancel()
	stop()
	time.Sleep(50 * time.Millisecond)
	assert.NoError(t, ctx.Err(), "still running just after the stop")
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not ended after its grace")
	}

	running, cancelRunning := withStopGrace(context.Background(), time.Hour)
	cancelRunning()
	assert.Error(t, running.Err(), "a reconcile that returned ends its context")
}

// Exposed says whether clients outside can use what spec.expose gives them: every address known,
// and with spec.tls one the certificate is valid for.
func TestExposedSaysWhetherClientsOutsideCanUseEveryAddress(t *testing.T) {
	ca, err := testenv.NewCA("ca")
	require.NoError(t, err)
	kp, err := ca.IssueFor([]string{"sessions.default.svc"}, []net.IP{net.ParseIP("192.0.2.10")})
	require.NoError(t, err)
	exposed := func(tls bool) *cachev1.RedisCluster {
		rc := fixtures.Cluster(3, "sessions-0")
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer}
		if tls {
			rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls"}
		}
		return rc
	}
	primary, replicas := resources.OutsideAddress{Service: "sessions-ext", Host: "192.0.2.10"}, resources.OutsideAddress{Service: "sessions-ext-ro", Host: "192.0.2.11"}
	for _, tc := range []struct {
		name    string
		tls     bool
		cert    *x509.Certificate
		outside []resources.OutsideAddress
		status  metav1.ConditionStatus // "": no condition this reconcile (it keeps what it said)
		reason  string
		says    string
	}{
		{"no phase read the Services: unchanged", false, nil, nil, "", "", ""},
		{"the Secret not read: unchanged", true, nil, []resources.OutsideAddress{primary}, "", "", ""},
		{"a load balancer that has not given its address", false, nil, []resources.OutsideAddress{primary, {Service: "sessions-ext-ro"}},
			metav1.ConditionFalse, cachev1.ReasonAddressPending, "No outside address yet for sessions-ext-ro: "},
		{"both addresses, no TLS", false, nil, []resources.OutsideAddress{primary, replicas},
			metav1.ConditionTrue, cachev1.ReasonAddressesAssigned, "Clients outside dial sessions-ext at 192.0.2.10, sessions-ext-ro at 192.0.2.11"},
		{"a certificate without the replicas' address", true, kp.Cert, []resources.OutsideAddress{primary, replicas},
			metav1.ConditionFalse, cachev1.ReasonCertificateMissesAddress, "tls.crt of Secret sessions-tls is not valid for 192.0.2.11, which clients outside dial"},
		{"a certificate with every address", true, kp.Cert, []resources.OutsideAddress{primary, {Service: "sessions-shard0-1-ext", Host: "192.0.2.10"}},
			metav1.ConditionTrue, cachev1.ReasonAddressesAssigned, "Clients outside dial sessions-ext at 192.0.2.10, sessions-shard0-1-ext at 192.0.2.10; tls.crt is valid for each address"},
		{"node ports: any node's address, nothing to check", true, kp.Cert, []resources.OutsideAddress{{Service: "sessions-ext", AnyNode: true}, {Service: "sessions-ext-ro", AnyNode: true}},
			metav1.ConditionTrue, cachev1.ReasonAddressesAssigned, "Clients outside dial sessions-ext, sessions-ext-ro at every Kubernetes node's address, on its node port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := exposedCondition(exposed(tc.tls), tc.outside, tc.cert)
			if tc.status == "" {
				assert.Nil(t, c)
				return
			}
			require.NotNil(t, c)
			assert.Equal(t, cachev1.ConditionExposed, c.Type)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.reason, c.Reason)
			assert.True(t, strings.HasPrefix(c.Message, tc.says), c.Message)
		})
	}
	var many []resources.OutsideAddress
	for i := range 10 {
		many = append(many, resources.OutsideAddress{Service: fmt.Sprintf("orders-shard%d-0-ext", i)})
	}
	c := exposedCondition(exposed(false), many, nil)
	assert.Contains(t, c.Message, "orders-shard7-0-ext and 2 more:", "a long list is cut")
}
