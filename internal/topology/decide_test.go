package topology

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/org/redis-operator/internal/redis"
)

func primaryNode(name string, ordinal int, offset int64) Observed {
	return Observed{Member: Member{Name: name, Ordinal: ordinal, Addr: addrOf(name)},
		Info: redis.ReplicationInfo{Role: redis.RolePrimary, Offset: offset}}
}

func replicaNode(name string, ordinal int, of string, linkUp bool, offset int64) Observed {
	host, port := "127.0.0.1", 1 // fenced
	if of != "" {
		host, port = hostOf(of), 6379
	}
	return Observed{Member: Member{Name: name, Ordinal: ordinal, Addr: addrOf(name)},
		Info: redis.ReplicationInfo{Role: redis.RoleReplica, PrimaryHost: host, PrimaryPort: port, LinkUp: linkUp, Offset: offset}}
}

// silent is a replica whose primary last spoke to it seconds ago: a primary gone or hung, or cut
// off from it (a live one pings every second).
func silent(o Observed, seconds int64) Observed {
	o.Info.LastIOSeconds = seconds
	return o
}

func downNode(name string, ordinal int, err error) Observed {
	return Observed{Member: Member{Name: name, Ordinal: ordinal, Addr: addrOf(name)}, Err: err}
}

func hostOf(name string) string { return fmt.Sprintf("10.0.0.%d", name[len(name)-1]-'0'+1) }
func addrOf(name string) string { return hostOf(name) + ":6379" }

var (
	errRefused = fmt.Errorf("%w: dial tcp", redis.ErrRefused)
	errTimeout = errors.New("i/o timeout")
	policy     = Policy{FailoverTimeout: 5 * time.Second}
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		observed    []Observed
		current     string
		downFor     time.Duration
		wantPrimary string
		wantPromote bool
		wantRepoint []string
		wantWait    bool
		// wantRecheck: look again soon, the view is about to change
		wantRecheck bool
	}{
		{
			name:        "bootstrap: all fenced and empty, the first ordinal leads",
			observed:    []Observed{replicaNode("r-1", 1, "", false, 0), replicaNode("r-0", 0, "", false, 0), replicaNode("r-2", 2, "", false, 0)},
			wantPrimary: "r-0", wantPromote: true, wantRepoint: []string{"r-1", "r-2"},
		},
		{
			name:        "bootstrap with nothing recorded adopts the node holding the most data",
			observed:    []Observed{replicaNode("r-0", 0, "", false, 10), replicaNode("r-1", 1, "", false, 99)},
			wantPrimary: "r-1", wantPromote: true, wantRepoint: []string{"r-0"},
		},
		{
			name:        "bootstrap waits for a node to answer",
			observed:    []Observed{downNode("r-0", 0, errRefused)},
			wantPrimary: "",
		},
		{
			name:        "healthy: nothing to do",
			observed:    []Observed{primaryNode("r-0", 0, 50), replicaNode("r-1", 1, "r-0", true, 50)},
			current:     "r-0",
			wantPrimary: "r-0",
		},
		{
			name:        "a new or restarted replica is pointed at the primary",
			observed:    []Observed{primaryNode("r-0", 0, 50), replicaNode("r-1", 1, "r-0", true, 50), replicaNode("r-2", 2, "", false, 0)},
			current:     "r-0",
			wantPrimary: "r-0", wantRepoint: []string{"r-2"},
		},
		{
			name:        "a stale primary is demoted to a replica",
			observed:    []Observed{primaryNode("r-0", 0, 80), primaryNode("r-1", 1, 50)},
			current:     "r-1",
			wantPrimary: "r-1", wantRepoint: []string{"r-0"},
		},
		{
			name:     "primary unanswering but not for long: wait",
			observed: []Observed{downNode("r-0", 0, errTimeout), replicaNode("r-1", 1, "r-0", false, 50)},
			current:  "r-0", downFor: time.Second,
			wantPrimary: "r-0", wantWait: true,
		},
		{
			name: "primary unanswering past the timeout, its replicas not hearing from it: the replica with the most data takes over",
			observed: []Observed{downNode("r-0", 0, errTimeout), silent(replicaNode("r-1", 1, "r-0", true, 40), 5),
				silent(replicaNode("r-2", 2, "r-0", true, 50), 5)},
			current: "r-0", downFor: 6 * time.Second,
			wantPrimary: "r-2", wantPromote: true, wantRepoint: []string{"r-1"},
		},
		{
			name: "primary unanswering past the timeout, but a replica heard from it a second ago: the operator is cut off, no failover",
			observed: []Observed{downNode("r-0", 0, errTimeout), silent(replicaNode("r-1", 1, "r-0", true, 40), 5),
				silent(replicaNode("r-2", 2, "r-0", true, 50), 1)},
			current: "r-0", downFor: time.Minute,
			wantPrimary: "r-0", wantWait: true,
		},
		{
			name:        "primary process gone (refused, every link down): no wait",
			observed:    []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "r-0", false, 50), replicaNode("r-2", 2, "r-0", false, 40)},
			current:     "r-0",
			wantPrimary: "r-1", wantPromote: true, wantRepoint: []string{"r-2"},
		},
		{
			name:        "refused but a replica still has its link: wait, and look again soon",
			observed:    []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "r-0", true, 50)},
			current:     "r-0",
			wantPrimary: "r-0", wantWait: true, wantRecheck: true,
		},
		{
			name:        "primary restarted empty behind the fence: a replica with the data takes over",
			observed:    []Observed{replicaNode("r-0", 0, "", false, 0), replicaNode("r-1", 1, "r-0", false, 70)},
			current:     "r-0",
			wantPrimary: "r-1", wantPromote: true, wantRepoint: []string{"r-0"},
		},
		{
			// r-1 still points at r-0 and reconnects by itself.
			name:        "primary restarted with all its data: it leads again",
			observed:    []Observed{replicaNode("r-0", 0, "", false, 70), replicaNode("r-1", 1, "r-0", false, 70)},
			current:     "r-0",
			wantPrimary: "r-0", wantPromote: true,
		},
		{
			name:        "an interrupted failover is finished, not redone",
			observed:    []Observed{downNode("r-0", 0, errRefused), primaryNode("r-1", 1, 60), replicaNode("r-2", 2, "r-0", false, 60)},
			current:     "r-0",
			wantPrimary: "r-1", wantRepoint: []string{"r-2"},
		},
		{
			name:     "no replica answers: keep the primary",
			observed: []Observed{downNode("r-0", 0, errTimeout), downNode("r-1", 1, errTimeout)},
			current:  "r-0", downFor: time.Minute,
			wantPrimary: "r-0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Decide(View{Nodes: tt.observed, Primary: tt.current, HeardWithin: 1}, tt.downFor, policy)

			assert.Equal(t, tt.wantPrimary, plan.Primary)
			assert.Equal(t, tt.wantPromote, plan.Promote)
			assert.Equal(t, tt.wantRepoint, plan.Repoint)
			assert.Equal(t, tt.wantWait, plan.Wait > 0)
			assert.Equal(t, tt.wantRecheck, plan.Recheck > 0)
			if plan.Primary != "" {
				assert.NotEmpty(t, plan.Reason+tt.current, "a change says why")
			}
		})
	}
}

func TestARestoredClusterBootstrapsOnTheNodeHoldingTheRestoredData(t *testing.T) {
	restoring := Policy{FailoverTimeout: 5 * time.Second, Bootstrap: "r-0"}
	tests := []struct {
		name        string
		observed    []Observed
		wantPrimary string
	}{
		{
			name:        "the restored node still restores: empty nodes that answer first are not made primary",
			observed:    []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "", false, 0), replicaNode("r-2", 2, "", false, 0)},
			wantPrimary: "",
		},
		{
			name:        "the restored node answers: it leads, even against a node with a higher offset",
			observed:    []Observed{replicaNode("r-0", 0, "", false, 0), replicaNode("r-1", 1, "", false, 99)},
			wantPrimary: "r-0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Decide(View{Nodes: tt.observed}, 0, restoring)
			assert.Equal(t, tt.wantPrimary, plan.Primary, plan.Reason)
			if tt.wantPrimary == "" {
				assert.Contains(t, plan.Reason, "holds the restored data")
				assert.Empty(t, plan.Repoint)
			}
		})
	}
	// Once a primary is recorded, the policy no longer matters: failover works as ever.
	plan := Decide(View{Nodes: []Observed{downNode("r-0", 0, errRefused), replicaNode("r-1", 1, "r-0", false, 50)}, Primary: "r-0"}, 10*time.Second, restoring)
	assert.Equal(t, "r-1", plan.Primary)
}

func TestSnapshotSourceIsACaughtUpReplicaNeverThePrimaryWhileOneServes(t *testing.T) {
	v := View{Primary: "r-0", Nodes: []Observed{primaryNode("r-0", 0, 100), replicaNode("r-1", 1, "r-0", true, 90), replicaNode("r-2", 2, "r-0", true, 100)}}
	o, ok := v.SnapshotSource()
	assert.True(t, ok)
	assert.Equal(t, "r-2", o.Name, "the replica holding the most data")

	v.Nodes[1].Info.LinkUp, v.Nodes[2].Info.LinkUp = false, false
	o, ok = v.SnapshotSource()
	assert.True(t, ok)
	assert.Equal(t, "r-0", o.Name, "the primary only when no replica is caught up")

	v.Nodes[0] = downNode("r-0", 0, errRefused)
	_, ok = v.SnapshotSource()
	assert.False(t, ok)
}

func TestAPromotionOfAnEmptyNodeSaysWhatTheRecordedPrimaryHeld(t *testing.T) {
	holding := func(o Observed, keys int64) Observed {
		o.Info.Keys = keys
		return o
	}
	tests := []struct {
		name     string
		observed []Observed
		held     int64
		downFor  time.Duration
		want     string
		wantLost int64
	}{
		{
			name: "every node restarted without data, the primary among them: what it held is lost",
			observed: []Observed{replicaNode("r-0", 0, "", false, 0), replicaNode("r-1", 1, "", false, 0),
				replicaNode("r-2", 2, "", false, 0)},
			held: 5000, want: "r-0", wantLost: 5000,
		},
		{
			name:     "the primary still down, the replicas back empty",
			observed: []Observed{downNode("r-0", 0, errTimeout), replicaNode("r-1", 1, "", false, 0), replicaNode("r-2", 2, "", false, 0)},
			held:     5000, downFor: time.Minute, want: "r-1", wantLost: 5000,
		},
		{
			name: "a replica kept the data: nothing is lost",
			observed: []Observed{replicaNode("r-0", 0, "", false, 0), holding(replicaNode("r-1", 1, "r-0", false, 4990), 4990),
				replicaNode("r-2", 2, "", false, 0)},
			held: 5000, want: "r-1",
		},
		{
			name:     "the operator has not seen the primary serve since it started: it cannot say",
			observed: []Observed{replicaNode("r-0", 0, "", false, 0), replicaNode("r-1", 1, "", false, 0)},
			want:     "r-0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Decide(View{Nodes: tt.observed, Primary: "r-0", PrimaryHeld: tt.held}, tt.downFor, policy)
			assert.Equal(t, tt.want, plan.Primary, plan.Reason)
			assert.True(t, plan.Promote, "the cluster serves again, even empty")
			assert.Equal(t, tt.wantLost, plan.Lost)
			if tt.wantLost > 0 {
				assert.Contains(t, plan.Reason, "every node that answers is empty: the 5000 keys r-0 held are lost")
			}
		})
	}
}

func TestDowntimeRemembersWhatThePrimaryHeldWhileItDoesNotServe(t *testing.T) {
	var d Downtime
	now := time.Now()
	serving := primaryNode("r-0", 0, 9000)
	serving.Info.Keys = 700
	down, held := d.Observe(View{Primary: "r-0", Nodes: []Observed{serving}}, now)
	assert.Zero(t, down)
	assert.Equal(t, int64(700), held)

	// Restarted empty, it answers as a fenced replica: it answers, and what it held is kept
	restarted := View{Primary: "r-0", Nodes: []Observed{replicaNode("r-0", 0, "", false, 0)}}
	down, held = d.Observe(restarted, now.Add(time.Second))
	assert.Zero(t, down)
	assert.Equal(t, int64(700), held)

	gone := View{Primary: "r-0", Nodes: []Observed{downNode("r-0", 0, errTimeout)}}
	_, _ = d.Observe(gone, now.Add(2*time.Second))
	down, held = d.Observe(gone, now.Add(5*time.Second))
	assert.Equal(t, 3*time.Second, down)
	assert.Equal(t, int64(700), held)

	// A replica promoted: what it held when promoted, before it is seen serving
	d.Promoted("r-1", 650)
	_, held = d.Observe(View{Primary: "r-1", Nodes: []Observed{downNode("r-1", 1, errTimeout)}}, now.Add(6*time.Second))
	assert.Equal(t, int64(650), held)

	// Another primary recorded: nothing known of it yet
	_, held = d.Observe(View{Primary: "r-2", Nodes: []Observed{replicaNode("r-2", 2, "", false, 0)}}, now.Add(7*time.Second))
	assert.Zero(t, held)
}
