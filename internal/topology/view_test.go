package topology

import (
	"time"

	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
)

func TestViewJudgesEveryNodeAgainstTheRecordedPrimary(t *testing.T) {
	v := View{Primary: "r-0", Nodes: []Observed{
		primaryNode("r-0", 0, 100),
		replicaNode("r-1", 1, "r-0", true, 100),
		replicaNode("r-2", 2, "r-0", false, 90), // its link is down
		replicaNode("r-3", 3, "r-9", true, 100), // caught up, but with another primary
		replicaNode("r-4", 4, "", false, 0),     // fenced
		primaryNode("r-5", 5, 100),              // a second primary: not ours
		downNode("r-6", 6, errTimeout),
	}}
	tests := []struct {
		node              string
		caughtUp, serving bool
	}{
		{"r-0", false, true},
		{"r-1", true, true},
		{"r-2", false, false},
		{"r-3", false, false},
		{"r-4", false, false},
		{"r-5", false, false},
		{"r-6", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			o, ok := v.Find(tt.node)
			assert.True(t, ok)
			assert.Equal(t, tt.caughtUp, v.CaughtUp(o), "caught up")
			assert.Equal(t, tt.serving, v.Serving(o), "serving")
		})
	}
	assert.False(t, v.AllServing())
	assert.True(t, View{Primary: "r-0", Nodes: v.Nodes[:2]}.AllServing())
	assert.False(t, View{Primary: "", Nodes: v.Nodes[:2]}.AllServing(), "no recorded primary: nothing serves yet")
}

func TestLagIsMeasuredAgainstTheRecordedPrimaryOnly(t *testing.T) {
	v := View{Primary: "r-0", Nodes: []Observed{
		primaryNode("r-0", 0, 100),
		replicaNode("r-1", 1, "r-0", true, 100),
		replicaNode("r-2", 2, "r-0", false, 90),
		replicaNode("r-3", 3, "r-9", true, 40),
		downNode("r-4", 4, errTimeout),
	}}
	for node, want := range map[string]struct {
		lag   int64
		known bool
	}{"r-0": {0, false}, "r-1": {0, true}, "r-2": {10, true}, "r-3": {0, false}, "r-4": {0, false}} {
		o, _ := v.Find(node)
		lag, known := v.LagBytes(o)
		assert.Equal(t, want.known, known, node)
		assert.Equal(t, want.lag, lag, node)
	}
	assert.True(t, v.WritablePrimary())
	assert.False(t, v.WithPrimary("r-1").WritablePrimary(), "a replica is not a writable primary")
	assert.False(t, v.WithPrimary("r-4").WritablePrimary(), "a node that does not answer")
	_, known := v.WithPrimary("r-4").LagBytes(v.Nodes[1])
	assert.False(t, known, "no lag against a primary that does not answer")
}

func TestLagInSecondsIsThePrimarysWordEvenForAReplicaThatDoesNotAnswer(t *testing.T) {
	p := primaryNode("r-0", 0, 100)
	p.Info.Replicas = []redis.ReplicaLink{{Addr: addrOf("r-1"), Offset: 100, LagSeconds: 0}, {Addr: addrOf("r-2"), Offset: 60, LagSeconds: 7}}
	v := View{Primary: "r-0", Nodes: []Observed{
		p,
		replicaNode("r-1", 1, "r-0", true, 100),
		downNode("r-2", 2, errTimeout), // stopped: its primary still lists it
		replicaNode("r-3", 3, "r-0", false, 0),
	}}
	for node, want := range map[string]struct {
		lag   int64
		known bool
	}{"r-0": {0, false}, "r-1": {0, true}, "r-2": {7, true}, "r-3": {0, false}} {
		o, _ := v.Find(node)
		lag, known := v.LagSeconds(o)
		assert.Equal(t, want.known, known, node)
		assert.Equal(t, want.lag, lag, node)
	}
	_, known := v.WithPrimary("r-1").LagSeconds(v.Nodes[2])
	assert.False(t, known, "only the recorded primary's word counts")
}

func TestBestReplicaIsACaughtUpReplicaOfTheCurrentPrimary(t *testing.T) {
	v := View{Primary: "r-0", Nodes: []Observed{
		primaryNode("r-0", 0, 100),
		replicaNode("r-1", 1, "r-0", true, 80),
		replicaNode("r-2", 2, "r-9", true, 500),  // more data, but from another primary
		replicaNode("r-3", 3, "r-0", false, 400), // more data, but its link is down
		replicaNode("r-4", 4, "r-0", true, 90),
	}}
	best, ok := v.BestReplica(func(Observed) bool { return true })
	assert.True(t, ok)
	assert.Equal(t, "r-4", best.Name)

	best, ok = v.BestReplica(func(o Observed) bool { return o.Ordinal < 4 })
	assert.True(t, ok)
	assert.Equal(t, "r-1", best.Name)

	_, ok = v.BestReplica(func(o Observed) bool { return o.Ordinal == 2 })
	assert.False(t, ok)
}

func TestSettledNeedsAnIdlePlanAndEveryNodeServing(t *testing.T) {
	serving := []Observed{primaryNode("r-0", 0, 10), replicaNode("r-1", 1, "r-0", true, 10)}
	linkDown := []Observed{primaryNode("r-0", 0, 10), replicaNode("r-1", 1, "r-0", false, 10)}
	otherPrimary := []Observed{primaryNode("r-0", 0, 10), replicaNode("r-1", 1, "r-7", true, 10)}

	assert.True(t, View{Nodes: serving}.Settled(Plan{Primary: "r-0"}), "judged against the plan's primary")
	assert.False(t, View{Nodes: serving}.Settled(Plan{Primary: "r-0", Repoint: []string{"r-1"}}))
	assert.False(t, View{Nodes: serving}.Settled(Plan{}))
	assert.False(t, View{Nodes: linkDown}.Settled(Plan{Primary: "r-0"}))
	assert.False(t, View{Nodes: otherPrimary}.Settled(Plan{Primary: "r-0"}))
}

func TestRoundRecordsAPromotionOnlyOnceItHappened(t *testing.T) {
	v := View{Primary: "r-0", Nodes: []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "", false, 10)}}
	plan := Plan{Primary: "r-1", Promote: true, Previous: "r-0"}

	assert.Equal(t, "r-0", Round{View: v, Plan: plan}.Primary(), "the promotion failed")
	assert.Equal(t, "r-1", Round{View: v, Plan: plan, Steps: []Step{{Node: "r-1", Action: ActionPromoted}}}.Primary())
	assert.Equal(t, "r-0", Round{View: v, Plan: Plan{}}.Primary(), "no node answers: keep the recorded one")
	assert.Equal(t, "r-1", Round{View: v.WithPrimary(""), Plan: Plan{Primary: "r-1"}}.Primary(), "adopt a primary that already is one")
}

func TestNextCheckIsTheSoonestOfTheIntervalAndWhatThePlanWaitsFor(t *testing.T) {
	for _, tt := range []struct {
		name string
		plan Plan
		want time.Duration
	}{
		{"nothing to wait for: the interval", Plan{Primary: "r-0"}, time.Second},
		{"a timeout that ends sooner", Plan{Wait: 300 * time.Millisecond}, 300 * time.Millisecond},
		{"a timeout that ends later", Plan{Wait: 4 * time.Second}, time.Second},
		{"a view about to change", Plan{Wait: 4 * time.Second, Recheck: RefusedRecheck}, RefusedRecheck},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Round{Plan: tt.plan}.NextCheck(time.Second))
		})
	}
}

// A primary the operator cannot reach serves while a replica heard from it within a second: the
// operator's link is cut, not the primary's, and the Service keeps sending clients to it. One
// whose replicas stopped hearing from it, or whose port refuses connections, does not.
func TestAPrimaryTheOperatorCannotReachServesWhileAReplicaHearsFromIt(t *testing.T) {
	heard := replicaNode("r-1", 1, "r-0", true, 50)
	cases := []struct {
		name    string
		primary Observed
		replica Observed
		serving bool
	}{
		{"cut off from the operator, heard a second ago", downNode("r-0", 0, errTimeout), silent(heard, 1), true},
		{"its replica has not heard from it for 3s", downNode("r-0", 0, errTimeout), silent(heard, 3), false},
		{"its replica's link is down", downNode("r-0", 0, errTimeout), replicaNode("r-1", 1, "r-0", false, 50), false},
		{"its port refuses connections: its process is gone", downNode("r-0", 0, errRefused), silent(heard, 0), false},
	}
	for _, c := range cases {
		v := View{Primary: "r-0", Nodes: []Observed{c.primary, c.replica}, HeardWithin: 1}
		assert.Equal(t, c.serving, v.Serving(c.primary), c.name)
	}
	unset := View{Primary: "r-0", Nodes: []Observed{downNode("r-0", 0, errTimeout), silent(heard, 0)}}
	assert.False(t, unset.Serving(unset.Nodes[0]), "no vouching without a ping period")
}
