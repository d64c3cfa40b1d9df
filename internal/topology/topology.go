// Package topology decides and carries out who is the primary of a Redis cluster, from what
// each node says of itself over the Redis protocol. Decide is pure; Observe and the Executor do
// the I/O through internal/redis, the same way whether the nodes are pods or local processes.
//
// Every node starts fenced: as a replica of an address where nothing listens. A node that
// restarts therefore can never take writes until the operator points it at the primary, and a
// primary that restarts empty never becomes the source its replicas sync from.
package topology

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/org/redis-operator/internal/redis"
)

// FenceAddr is where every node's redis.conf points its replication at start: a loopback port
// where nothing listens, so the connection is refused at once and the node stays a read-only
// replica until the operator decides.
const FenceAddr = "127.0.0.1:1"

// Member is one Redis node as the cluster manager knows it.
type Member struct {
	Name    string
	Ordinal int
	// Addr is ip:port; empty when the node has no address yet.
	Addr string
}

// Observed is a member and what it said of itself.
type Observed struct {
	Member
	Info redis.ReplicationInfo
	// Err is why it could not be asked; nil when it answered.
	Err error
}

// Reachable is true when the node answered.
func (o Observed) Reachable() bool { return o.Err == nil }

func (o Observed) isPrimary() bool { return o.Reachable() && o.Info.Role == redis.RolePrimary }

// Observe asks every member for its replication state, all at once.
func Observe(ctx context.Context, dial redis.Dialer, members []Member) []Observed {
	out := make([]Observed, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		if m.Addr == "" {
			out[i].Err = errors.New("no address yet")
			continue
		}
		wg.Go(func() {
			n := dial(m.Addr)
			defer n.Close()
			out[i].Info, out[i].Err = n.Replication(ctx)
		})
	}
	wg.Wait()
	return out
}

// Policy is how eager failover is.
type Policy struct {
	// FailoverTimeout is how long a primary may not answer before a replica replaces it. A
	// primary whose port refuses connections while every replica has lost its link is gone,
	// and is replaced without waiting.
	FailoverTimeout time.Duration
}

// Plan is what Decide wants done.
type Plan struct {
	// Primary is the node that is primary once the plan is carried out; empty when none can be.
	Primary string
	// Promote is true when Primary is not a primary yet.
	Promote bool
	// Previous is the primary being replaced, when the primary changes.
	Previous string
	// Repoint are the nodes to make replicas of Primary.
	Repoint []string
	// Wait is how long to wait before the unreachable primary may be replaced.
	Wait time.Duration
	// Reason says why, in words for an Event.
	Reason string
}

// Failover is true when the plan replaces a primary.
func (p Plan) Failover() bool { return p.Previous != "" && p.Previous != p.Primary }

// Decide chooses the primary and the replicas to repoint. current is the primary the operator
// last recorded; downFor is how long it has been unreachable (0 when it answers).
func Decide(observed []Observed, current string, downFor time.Duration, policy Policy) Plan {
	var reachable []Observed
	var cur *Observed
	for i := range observed {
		if observed[i].Reachable() {
			reachable = append(reachable, observed[i])
		}
		if observed[i].Name == current {
			cur = &observed[i]
		}
	}

	var plan Plan
	switch {
	case cur == nil:
		if len(reachable) == 0 {
			return Plan{Reason: "no Redis node answers yet"}
		}
		target := elect(reachable, "")
		plan = Plan{Primary: target.Name, Promote: !target.isPrimary(), Reason: "bootstrap: " + target.Name + " holds the most data"}
	case cur.isPrimary():
		plan = Plan{Primary: current}
	case cur.Reachable():
		// The primary answers as a replica: it restarted behind the fence, maybe empty.
		target := elect(reachable, current)
		plan = Plan{Primary: target.Name, Promote: !target.isPrimary(), Previous: current,
			Reason: fmt.Sprintf("%s restarted as a replica; %s holds the most data", current, target.Name)}
	default:
		gone := primaryGone(*cur, reachable)
		if !gone && downFor < policy.FailoverTimeout {
			return Plan{Primary: current, Wait: policy.FailoverTimeout - downFor,
				Reason: fmt.Sprintf("primary %s does not answer", current)}
		}
		if len(reachable) == 0 {
			return Plan{Primary: current, Reason: fmt.Sprintf("primary %s does not answer and no replica does", current)}
		}
		target := elect(reachable, "")
		why := fmt.Sprintf("primary %s did not answer for %s", current, policy.FailoverTimeout)
		if gone {
			why = fmt.Sprintf("primary %s is down (connection refused, replicas lost their link)", current)
		}
		plan = Plan{Primary: target.Name, Promote: !target.isPrimary(), Previous: current,
			Reason: why + "; " + target.Name + " holds the most data"}
	}

	primaryAddr := ""
	for _, o := range observed {
		if o.Name == plan.Primary {
			primaryAddr = o.Addr
		}
	}
	for _, o := range reachable {
		if o.Name == plan.Primary {
			continue
		}
		if o.Info.Role != redis.RoleReplica || o.Info.PrimaryAddr() != primaryAddr {
			plan.Repoint = append(plan.Repoint, o.Name)
		}
	}
	return plan
}

// primaryGone is true when the primary's port refuses connections and every replica that
// answers has lost its link: the process is gone, not merely slow or cut off from us.
func primaryGone(primary Observed, reachable []Observed) bool {
	if !errors.Is(primary.Err, redis.ErrRefused) || len(reachable) == 0 {
		return false
	}
	for _, o := range reachable {
		if o.Info.Role == redis.RoleReplica && o.Info.PrimaryAddr() == primary.Addr && o.Info.LinkUp {
			return false
		}
	}
	return true
}

// elect picks the node to be primary: one that already is, then the most data (replication
// offset), then prefer, then the lowest ordinal.
func elect(candidates []Observed, prefer string) Observed {
	sorted := append([]Observed(nil), candidates...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.isPrimary() != b.isPrimary() {
			return a.isPrimary()
		}
		if a.Info.Offset != b.Info.Offset {
			return a.Info.Offset > b.Info.Offset
		}
		if (a.Name == prefer) != (b.Name == prefer) {
			return a.Name == prefer
		}
		return a.Ordinal < b.Ordinal
	})
	return sorted[0]
}
