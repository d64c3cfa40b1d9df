package clustermode

import (
	"testing"

	"github.com/org/redis-operator/test/fixtures"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
)

func TestShardsReadyAndDegradedConditions(t *testing.T) {
	rc := &cachev1.RedisCluster{Spec: cachev1.RedisClusterSpec{Replicas: 2, Cluster: &cachev1.ClusterSpec{Shards: 3}}}
	formed := shards.Plan{}
	for i := range 3 {
		formed.Shards = append(formed.Shards, shards.Shard{Index: i, Primary: "p", Replicas: []string{"r"},
			Slots: []redis.SlotRange{shards.SlotsOf(i, 3)}})
	}
	oneReplicaShort := formed
	oneReplicaShort.Shards = append([]shards.Shard{{Index: 0, Primary: "p"}}, formed.Shards[1:]...)
	forming := shards.Plan{Waiting: "nodes are meeting"}
	told := formed
	told.Actions = []shards.Action{{Kind: shards.Forget, On: "a", NodeID: "x"}, {Kind: shards.Replicate, On: "b", NodeID: "p"},
		{Kind: shards.Forget, On: "b", NodeID: "x"}}
	tests := []struct {
		name        string
		ready       int32
		plan        *shards.Plan
		down        string
		wasReady    bool
		wantReady   string
		wantDegrade string
		wantMessage string // checked when set
	}{
		{"formed", 6, &formed, "", false, cachev1.ReasonAllReplicasReady, cachev1.ReasonAsExpected, ""},
		{"pods not ready", 4, &formed, "", false, cachev1.ReasonReplicasNotReady, cachev1.ReasonAsExpected, ""},
		{"forming", 6, &forming, "", false, cachev1.ReasonShardsForming, cachev1.ReasonAsExpected, ""},
		{"a shard without its replica", 6, &oneReplicaShort, "", false, cachev1.ReasonShardsForming, cachev1.ReasonAsExpected, ""},
		{"commands sent: it says which", 6, &told, "", false, cachev1.ReasonShardsForming, cachev1.ReasonAsExpected,
			"cluster commands were sent (Forget x2, Replicate x1); the nodes are agreeing"},
		{"a new cluster says fail while it forms: not degraded", 6, &formed, "n-0", false, cachev1.ReasonShardsForming, cachev1.ReasonAsExpected,
			"n-0 says the cluster does not serve every slot yet"},
		{"a formed cluster says fail: down", 6, &formed, "n-0", true, cachev1.ReasonClusterDown, cachev1.ReasonClusterDown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := rc.DeepCopy()
			rc.Status.ReadyReplicas = tt.ready
			rc.Status.Shards = []cachev1.ShardStatus{{Name: "s"}}
			if tt.wasReady {
				rc.Status.Conditions = []metav1.Condition{{Type: cachev1.ConditionReady, Status: metav1.ConditionTrue}}
			}
			c := &scope.Cluster{}
			s := &State{Plan: tt.plan, ClusterDown: tt.down, StatefulSets: statefulSets(3)}
			degraded := shardsDegradedCondition(rc, c, s)
			assert.Equal(t, tt.wantDegrade, degraded.Reason)
			ready := shardsReadyCondition(rc, c, s, degraded)
			assert.Equal(t, tt.wantReady, ready.Reason, ready.Message)
			if tt.wantMessage != "" {
				assert.Equal(t, tt.wantMessage, ready.Message)
			}
			assert.Equal(t, tt.wantReady == cachev1.ReasonAllReplicasReady, ready.Status == metav1.ConditionTrue)
		})
	}
}

func statefulSets(n int) []*appsv1.StatefulSet {
	var out []*appsv1.StatefulSet
	for range n {
		out = append(out, fixtures.RolledOutStatefulSet(2))
	}
	return out
}
