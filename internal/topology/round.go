package topology

import (
	"context"
	"sync"
	"time"
)

// Downtime remembers since when a cluster's primary has not answered. It lives in the
// operator's memory: after an operator restart the count starts again, which only delays a
// failover, never hastens one.
type Downtime struct {
	mu      sync.Mutex
	primary string
	since   time.Time
}

// Observe records whether primary answered now, and says for how long it has not.
func (d *Downtime) Observe(primary string, answered bool, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if answered || primary != d.primary {
		d.primary, d.since = primary, time.Time{}
	}
	if answered {
		return 0
	}
	if d.since.IsZero() {
		d.since = now
	}
	return now.Sub(d.since)
}

// Round is one observe-decide-act pass.
type Round struct {
	Observed []Observed
	Plan     Plan
	Steps    []Step
}

// Settled is true when the round found nothing to do: a primary, and every other node answering
// as its replica with the link up.
func (r Round) Settled() bool {
	if r.Plan.Primary == "" || r.Plan.Promote || len(r.Plan.Repoint) > 0 || r.Plan.Wait > 0 {
		return false
	}
	for _, o := range r.Observed {
		if !o.Reachable() || (o.Name != r.Plan.Primary && !o.Info.LinkUp) {
			return false
		}
	}
	return true
}

// Reconcile observes every member, decides who is primary given the recorded one, and carries
// the plan out. Its result's Plan.Primary is the primary to record.
func (e Executor) Reconcile(ctx context.Context, members []Member, current string, downtime *Downtime, policy Policy) (Round, error) {
	r := Round{Observed: Observe(ctx, e.Dial, members)}
	answered := false
	for _, o := range r.Observed {
		if o.Name == current && o.Reachable() {
			answered = true
		}
	}
	downFor := downtime.Observe(current, answered, time.Now())
	r.Plan = Decide(r.Observed, current, downFor, policy)
	if r.Plan.Primary == "" || (!r.Plan.Promote && len(r.Plan.Repoint) == 0) {
		return r, nil
	}
	var err error
	r.Steps, err = e.Apply(ctx, r.Plan, r.Observed)
	return r, err
}
