package topology

import (
	"context"
	"sync"
	"time"
)

// Downtime remembers since when a cluster's primary has not answered, and how many keys it
// held when it last answered as primary. It lives in the operator's
// memory: after an operator restart the count starts again, which only delays a failover,
// never hastens one, and a loss of data goes unseen until the primary has served once more.
type Downtime struct {
	mu      sync.Mutex
	primary string
	since   time.Time
	held    int64
}

// Observe records whether v's recorded primary answered now, and says for how long it has not,
// and how many keys it held when it last served.
func (d *Downtime) Observe(v View, now time.Time) (downFor time.Duration, held int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	answered := v.PrimaryAnswers()
	if v.Primary != d.primary {
		d.primary, d.since, d.held = v.Primary, time.Time{}, 0
	}
	if p, ok := v.Find(v.Primary); ok && p.IsPrimary() {
		d.held = p.Info.Keys
	}
	if answered {
		d.since = time.Time{}
		return 0, d.held
	}
	if d.since.IsZero() {
		d.since = now
	}
	return now.Sub(d.since), d.held
}

// Promoted records that primary became the primary holding held keys: what a loss of it loses,
// until it is seen serving.
func (d *Downtime) Promoted(primary string, held int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.primary, d.since, d.held = primary, time.Time{}, held
}

// Round is one decide-and-act pass over an observation: what was seen, what was decided and
// what was done.
type Round struct {
	View  View
	Plan  Plan
	Steps []Step
}

// NextCheck is when to look at the cluster again, at most interval from now: sooner when the
// plan waits out a primary's timeout that ends earlier, or expects the view to change at once.
func (r Round) NextCheck(interval time.Duration) time.Duration {
	next := interval
	for _, d := range []time.Duration{r.Plan.Wait, r.Plan.Recheck} {
		if d > 0 && d < next {
			next = d
		}
	}
	return next
}

// Settled is true when the round found nothing to do and every node serves the primary.
func (r Round) Settled() bool { return r.View.Settled(r.Plan) }

// Primary is the primary to record after the round: the plan's, once its promotion happened
// (or was not needed); otherwise the one recorded before.
func (r Round) Primary() string {
	if r.Plan.Primary == "" {
		return r.View.Primary
	}
	if !r.Plan.Promote {
		return r.Plan.Primary
	}
	for _, s := range r.Steps {
		if s.Action == ActionPromoted && s.Node == r.Plan.Primary {
			return r.Plan.Primary
		}
	}
	return r.View.Primary
}

// Changed is true when the round changed a node's role or replication source.
func (r Round) Changed() bool { return len(r.Steps) > 0 }

// Reconcile decides who is primary from the view and carries the plan out: the failure
// detector and failover of the operator, and of every test and benchmark that runs it.
// announce, when not nil, runs before a plan that replaces the primary changes anything; an
// error from it stops the round. The returned round says what was done, even with an error.
func (e Executor) Reconcile(ctx context.Context, v View, downtime *Downtime, policy Policy, announce func(Plan) error) (Round, error) {
	var downFor time.Duration
	downFor, v.PrimaryHeld = downtime.Observe(v, time.Now())
	r := Round{View: v, Plan: Decide(v, downFor, policy)}
	if r.Plan.Primary == "" || (!r.Plan.Promote && len(r.Plan.Repoint) == 0) {
		return r, nil
	}
	if announce != nil && r.Plan.Failover() {
		if err := announce(r.Plan); err != nil {
			return r, err
		}
	}
	var err error
	r.Steps, err = e.Apply(ctx, r.Plan, v)
	if p := r.Primary(); p != v.Primary {
		target, _ := v.Find(p)
		downtime.Promoted(p, target.Info.Keys)
	}
	return r, err
}
