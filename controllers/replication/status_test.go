package replication

import (
	"errors"
	"testing"

	"github.com/org/redis-operator/test/fixtures"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/topology"
)

// The condition functions are pure: each takes what the phases recorded and says one condition.

func TestFailingOverCondition(t *testing.T) {
	idle := topology.Round{Plan: topology.Plan{Primary: "r-1"}}
	tests := []struct {
		name       string
		existing   *metav1.Condition
		state      State
		wantNil    bool
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{name: "first status: stable", wantStatus: metav1.ConditionFalse, wantReason: cachev1.ReasonStable},
		{name: "announced", state: State{Move: &Move{Reason: cachev1.ReasonFailover, From: "r-0", To: "r-1"}},
			wantStatus: metav1.ConditionTrue, wantReason: cachev1.ReasonFailover},
		{name: "done", state: State{Move: &Move{Reason: cachev1.ReasonSwitchover, From: "r-0", To: "r-1", Done: true}},
			wantStatus: metav1.ConditionFalse, wantReason: cachev1.ReasonFailoverComplete},
		{name: "cut short, finished by a later idle reconcile", existing: scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionTrue, cachev1.ReasonFailover, ""),
			state: State{Round: idle}, wantStatus: metav1.ConditionFalse, wantReason: cachev1.ReasonFailoverComplete},
		{name: "cut short, still moving", existing: scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionTrue, cachev1.ReasonFailover, ""),
			state: State{Round: topology.Round{Plan: topology.Plan{Primary: "r-1", Repoint: []string{"r-0"}}}}, wantNil: true},
		{name: "stable stays", existing: scope.Condition(cachev1.ConditionFailingOver, metav1.ConditionFalse, cachev1.ReasonStable, ""),
			state: State{Round: idle}, wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := fixtures.Cluster(2, "r-1")
			scope.SetCondition(rc, tt.existing)
			got := failingOverCondition(rc, &tt.state)
			if tt.wantNil {
				assert.Nil(t, got)
				return
			}
			assert.Equal(t, tt.wantStatus, got.Status)
			assert.Equal(t, tt.wantReason, got.Reason)
		})
	}
}

func TestDegradedAndReadyConditions(t *testing.T) {
	servingView := topology.View{Primary: "r-0"}
	tests := []struct {
		name                string
		cluster             scope.Cluster
		state               State
		nodes               []cachev1.NodeStatus
		wantDegraded        metav1.ConditionStatus
		wantReason          string
		wantReady           metav1.ConditionStatus
		wantReadyReason     string
		wantProgressingKept bool
	}{
		{
			name:         "a failed phase carries its reason to both",
			cluster:      scope.Cluster{Failed: &outcome.Failure{Phase: "Failover", Reason: cachev1.ReasonTopologyFailed, Err: errors.New("promoting r-1: i/o timeout")}},
			wantDegraded: metav1.ConditionTrue, wantReason: cachev1.ReasonTopologyFailed,
			wantReady: metav1.ConditionFalse, wantReadyReason: cachev1.ReasonTopologyFailed, wantProgressingKept: true,
		},
		{
			name:         "no node answers",
			state:        State{StatefulSet: fixtures.RolledOutStatefulSet(2), View: topology.View{Nodes: []topology.Observed{{Member: topology.Member{Name: "r-0"}, Err: errors.New("down")}}}},
			wantDegraded: metav1.ConditionTrue, wantReason: cachev1.ReasonNoPrimary,
			wantReady: metav1.ConditionFalse, wantReadyReason: cachev1.ReasonNoPrimary,
		},
		{
			name:         "the primary does not answer yet",
			state:        State{StatefulSet: fixtures.RolledOutStatefulSet(2), Round: topology.Round{Plan: topology.Plan{Primary: "r-0", Wait: 1}}},
			wantDegraded: metav1.ConditionTrue, wantReason: cachev1.ReasonPrimaryUnreachable,
			wantReady: metav1.ConditionFalse, wantReadyReason: cachev1.ReasonPrimaryUnreachable,
		},
		{
			name:         "pods not ready",
			state:        State{StatefulSet: fixtures.RolledOutStatefulSet(1), View: servingView},
			wantDegraded: metav1.ConditionFalse, wantReason: cachev1.ReasonAsExpected,
			wantReady: metav1.ConditionFalse, wantReadyReason: cachev1.ReasonReplicasNotReady,
		},
		{
			name:         "a replica still syncing",
			state:        State{StatefulSet: fixtures.RolledOutStatefulSet(2), View: servingView},
			nodes:        []cachev1.NodeStatus{{Name: "r-0", State: cachev1.NodeServing}, {Name: "r-1", State: cachev1.NodeSyncing}},
			wantDegraded: metav1.ConditionFalse, wantReason: cachev1.ReasonAsExpected,
			wantReady: metav1.ConditionFalse, wantReadyReason: cachev1.ReasonReplicationNotReady,
		},
		{
			name:         "every node serves",
			state:        State{StatefulSet: fixtures.RolledOutStatefulSet(2), View: servingView},
			nodes:        []cachev1.NodeStatus{{Name: "r-0", State: cachev1.NodeServing}, {Name: "r-1", State: cachev1.NodeServing}},
			wantDegraded: metav1.ConditionFalse, wantReason: cachev1.ReasonAsExpected,
			wantReady: metav1.ConditionTrue, wantReadyReason: cachev1.ReasonAllReplicasReady,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := fixtures.Cluster(2, "r-0")
			rc.Status.Nodes = tt.nodes
			if tt.state.StatefulSet != nil {
				rc.Status.ReadyReplicas = tt.state.StatefulSet.Status.ReadyReplicas
			}
			degraded := degradedCondition(rc, &tt.cluster, &tt.state)
			assert.Equal(t, tt.wantDegraded, degraded.Status)
			assert.Equal(t, tt.wantReason, degraded.Reason)
			ready := readyCondition(rc, &tt.cluster, &tt.state, degraded)
			assert.Equal(t, tt.wantReady, ready.Status)
			assert.Equal(t, tt.wantReadyReason, ready.Reason)
			assert.Equal(t, tt.wantProgressingKept, progressingCondition(&tt.cluster, &tt.state) == nil)
		})
	}
}
