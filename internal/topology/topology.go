// Package topology owns the operator's view of Redis and every decision about it: who is the
// primary, which replica has caught up (View), whom to promote and repoint (Decide), which pod a
// rollout moves next (DecideRollout). The decisions are pure; Observe and the Executor do the
// I/O through internal/redis, the same way whether the nodes are pods or local processes.
//
// Every node starts fenced: as a replica of an address where nothing listens. A node that
// restarts therefore can never take writes until the operator points it at the primary, and a
// primary that restarts empty never becomes the source its replicas sync from.
package topology

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/org/redis-operator/internal/redis"
)

// FenceAddr is where every node's redis.conf points its replication at start: a loopback port
// where nothing listens, so the connection is refused at once and the node stays a read-only
// replica until the operator decides.
const FenceAddr = "127.0.0.1:1"

// Policy is how eager failover is.
type Policy struct {
	// FailoverTimeout is how long a primary may not answer before a replica replaces it. A
	// primary whose port refuses connections while every replica has lost its link is gone,
	// and is replaced without waiting.
	FailoverTimeout time.Duration
	// Bootstrap, when set, is the only node that may be the first primary: the one holding a
	// restored backup's data. Until it answers, no primary is chosen.
	Bootstrap string
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
	// Recheck, when not zero, is how soon to look again because the view is about to change:
	// the primary's port refuses connections but a replica has not yet seen its link drop.
	Recheck time.Duration
	// Reason says why, in words for an Event.
	Reason string
	// Witness, while the primary does not answer the operator, is a replica that still hears
	// from it: the primary lives, and is not replaced.
	Witness string
	// Lost is, when the new primary holds no key while the recorded primary held some (every
	// node that answers restarted without data), how many keys that primary held; 0 otherwise. Nothing can keep data no node holds: the plan still promotes, and says so.
	Lost int64
}

// Failover is true when the plan replaces a primary.
func (p Plan) Failover() bool { return p.Previous != "" && p.Previous != p.Primary }

// Idle is true when the plan keeps a primary and changes nothing.
func (p Plan) Idle() bool {
	return p.Primary != "" && !p.Promote && len(p.Repoint) == 0 && p.Wait == 0
}

// RefusedRecheck is how soon a primary that refuses connections is looked at again while a
// replica still reports its link up.
const RefusedRecheck = 50 * time.Millisecond

// Decide chooses the primary and the replicas to repoint, from the view and its recorded
// primary; downFor is how long that primary has been unreachable (0 when it answers).
//
// Safety: a primary that answers as primary is never replaced here, so there are never two
// primaries by our hand; an unreachable one is replaced only when it is gone or the timeout
// passed, and by the node holding the most data; never while a replica still hears from it
// (its link up, the primary's last ping a second or two old): then it is the operator that is
// cut off, and a replacement would be a second primary for the clients that still reach the first. The first primary of a restored cluster is
// the node holding the restored data (Policy.Bootstrap), never an empty one that answered
// first: its replicas would copy its emptiness. When every node that answers holds nothing
// while the recorded primary held data (View.PrimaryHeld), no choice keeps it: the plan
// promotes all the same, for the cluster to serve, and says what is lost (Plan.Lost).
func Decide(v View, downFor time.Duration, policy Policy) Plan {
	current := v.Primary
	reachable := v.reachable()
	cur, known := v.Find(current)

	var plan Plan
	switch {
	case !known:
		if len(reachable) == 0 {
			return Plan{Reason: "no Redis node answers yet"}
		}
		target := elect(reachable, "")
		reason := "bootstrap: " + target.Name + " holds the most data"
		if policy.Bootstrap != "" {
			var ok bool
			if target, ok = v.Find(policy.Bootstrap); !ok || !target.Reachable() {
				return Plan{Reason: "waiting for " + policy.Bootstrap + ", which holds the restored data"}
			}
			reason = "bootstrap: " + target.Name + " holds the restored data"
		}
		plan = Plan{Primary: target.Name, Promote: !target.IsPrimary(), Reason: reason}
	case cur.IsPrimary():
		plan = Plan{Primary: current}
	case cur.Reachable():
		// The primary answers as a replica: it restarted behind the fence, maybe empty.
		target := elect(reachable, current)
		plan = Plan{Primary: target.Name, Promote: !target.IsPrimary(), Previous: current,
			Reason: fmt.Sprintf("%s restarted as a replica; %s holds the most data", current, target.Name)}
	default:
		gone := primaryGone(v, cur, reachable)
		if witness, ok := v.heardFromPrimary(cur); ok {
			// The operator's own link is cut, not the primary's: replacing a primary that its
			// replicas (and maybe its clients) still reach would make two.
			return Plan{Primary: current, Wait: policy.FailoverTimeout, Witness: witness,
				Reason: fmt.Sprintf("primary %s does not answer, but %s heard from it within the last seconds", current, witness)}
		}
		if !gone && downFor < policy.FailoverTimeout {
			plan := Plan{Primary: current, Wait: policy.FailoverTimeout - downFor,
				Reason: fmt.Sprintf("primary %s does not answer", current)}
			if errors.Is(cur.Err, redis.ErrRefused) {
				// Its process is gone, most likely, and its replicas learn it within moments:
				// a watch that saw the primary's connection break wakes us before they do.
				plan.Recheck = RefusedRecheck
			}
			return plan
		}
		if len(reachable) == 0 {
			return Plan{Primary: current, Reason: fmt.Sprintf("primary %s does not answer and no replica does", current)}
		}
		target := elect(reachable, "")
		why := fmt.Sprintf("primary %s did not answer for %s", current, policy.FailoverTimeout)
		if gone {
			why = fmt.Sprintf("primary %s is down (connection refused, replicas lost their link)", current)
		}
		plan = Plan{Primary: target.Name, Promote: !target.IsPrimary(), Previous: current,
			Reason: why + "; " + target.Name + " holds the most data"}
	}

	primary, _ := v.Find(plan.Primary)
	if plan.Promote && primary.Info.Keys == 0 && v.PrimaryHeld > 0 {
		// elect chose the node holding the most: every node that answers holds nothing.
		plan.Lost = v.PrimaryHeld
		plan.Reason += fmt.Sprintf(", but every node that answers is empty: the %d keys %s held are lost", v.PrimaryHeld, current)
	}
	for _, o := range reachable {
		if o.Name != plan.Primary && !o.replicates(primary) {
			plan.Repoint = append(plan.Repoint, o.Name)
		}
	}
	return plan
}

// primaryGone is true when the primary's port refuses connections and every replica that
// answers has lost its link: the process is gone, not merely slow or cut off from us.
func primaryGone(v View, primary Observed, reachable []Observed) bool {
	if !errors.Is(primary.Err, redis.ErrRefused) || len(reachable) == 0 {
		return false
	}
	for _, o := range reachable {
		if v.CaughtUp(o) {
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
		if a.IsPrimary() != b.IsPrimary() {
			return a.IsPrimary()
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
