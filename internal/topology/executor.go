package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/org/redis-operator/internal/redis"
)

// Action is what a step did to a node.
type Action string

const (
	ActionPromoted  Action = "Promoted"
	ActionRepointed Action = "Repointed"
	ActionPaused    Action = "Paused"
)

// Step is one change made to a node, for the Event that tells the user.
type Step struct {
	Node    string
	Action  Action
	Message string
}

// Executor carries out plans over the Redis protocol.
type Executor struct {
	Dial redis.Dialer
}

// Apply promotes the plan's primary, then points the other nodes at it. It stops at the first
// error, returning the steps done so far: a later reconcile observes and decides again.
func (e Executor) Apply(ctx context.Context, plan Plan, v View) ([]Step, error) {
	primary, ok := v.Find(plan.Primary)
	if !ok {
		return nil, fmt.Errorf("primary %q is not a member", plan.Primary)
	}
	var steps []Step
	if plan.Promote {
		if err := e.do(primary.Addr, func(n redis.Node) error { return n.Promote(ctx) }); err != nil {
			return steps, fmt.Errorf("promoting %s: %w", plan.Primary, err)
		}
		steps = append(steps, Step{Node: plan.Primary, Action: ActionPromoted, Message: fmt.Sprintf("Promoted %s to primary: %s", plan.Primary, plan.Reason)})
	}
	for _, name := range plan.Repoint {
		o, _ := v.Find(name)
		repoint := func(n redis.Node) error {
			if o.IsPrimary() {
				// A primary that came back (woken from a hang, say) may still hold clients.
				return demote(ctx, n, primary.Addr)
			}
			return n.ReplicaOf(ctx, primary.Addr)
		}
		if err := e.do(o.Addr, repoint); err != nil {
			return steps, fmt.Errorf("pointing %s at %s: %w", name, plan.Primary, err)
		}
		what := "replica"
		if o.IsPrimary() {
			what = "primary, now demoted"
		}
		steps = append(steps, Step{Node: name, Action: ActionRepointed, Message: fmt.Sprintf("%s (%s) replicates from %s", name, what, plan.Primary)})
	}
	return steps, nil
}

// Switchover moves the primary role from a healthy primary to a replica without losing a write
// and without two primaries at any moment: it holds the primary's writes, waits until the target
// has every byte of the replication stream, demotes the old primary, promotes the target and
// points the other nodes at it. Writes held during the switch fail on the demoted primary
// (READONLY) and are retried by clients on the new one; none that was acknowledged is lost.
//
// Once started, it runs to its end (at most maxPause) even when ctx ends: an operator that shuts
// down (its pod evicted by the same drain that evicts the primary's) and stopped between the
// demotion and the promotion would leave no primary until a failover.
func (e Executor) Switchover(ctx context.Context, from, to Observed, v View, maxPause time.Duration) ([]Step, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxPause)
	defer cancel()
	old := e.Dial(from.Addr)
	defer old.Close()
	target := e.Dial(to.Addr)
	defer target.Close()

	if err := old.PauseWrites(ctx, maxPause); err != nil {
		return nil, fmt.Errorf("holding writes on %s: %w", from.Name, err)
	}
	steps := []Step{{Node: from.Name, Action: ActionPaused, Message: fmt.Sprintf("Holding writes on %s for the switchover to %s", from.Name, to.Name)}}
	defer func() { _ = old.Unpause(context.WithoutCancel(ctx)) }()

	if err := waitInSync(ctx, old, target, from.Name, to.Name, time.Now().Add(maxPause/2)); err != nil {
		return steps, err
	}
	if err := demote(ctx, old, to.Addr); err != nil {
		return steps, fmt.Errorf("demoting %s: %w", from.Name, err)
	}
	steps = append(steps, Step{Node: from.Name, Action: ActionRepointed, Message: fmt.Sprintf("%s (old primary) replicates from %s", from.Name, to.Name)})
	if err := target.Promote(ctx); err != nil {
		// Nobody is primary now; the next reconcile elects one from what the nodes hold.
		return steps, fmt.Errorf("promoting %s: %w", to.Name, err)
	}
	steps = append(steps, Step{Node: to.Name, Action: ActionPromoted, Message: fmt.Sprintf("Promoted %s to primary: switchover from %s", to.Name, from.Name)})
	var errs []error
	for _, o := range v.Nodes {
		if o.Name == from.Name || o.Name == to.Name || !o.Reachable() {
			continue
		}
		if err := e.do(o.Addr, func(n redis.Node) error { return n.ReplicaOf(ctx, to.Addr) }); err != nil {
			errs = append(errs, fmt.Errorf("pointing %s at %s: %w", o.Name, to.Name, err))
			continue
		}
		steps = append(steps, Step{Node: o.Name, Action: ActionRepointed, Message: fmt.Sprintf("%s replicates from %s", o.Name, to.Name)})
	}
	return steps, errors.Join(errs...)
}

// ReplicationReader is what the waits for a replica need of a node (redis.Node has it).
type ReplicationReader interface {
	Replication(ctx context.Context) (redis.ReplicationInfo, error)
}

// demoter is what demote needs of a node.
type demoter interface {
	ReplicaOf(ctx context.Context, addr string) error
	DisconnectClients(ctx context.Context) error
}

// demote makes a primary a replica of the primary at addr and closes its clients'
// connections, so that clients holding one reconnect, through the Service, to the new primary
// instead of failing every write with READONLY. None of their writes was acknowledged after
// the demotion.
func demote(ctx context.Context, n demoter, addr string) error {
	if err := n.ReplicaOf(ctx, addr); err != nil {
		return err
	}
	if err := n.DisconnectClients(ctx); err != nil {
		return fmt.Errorf("disconnecting its clients: %w", err)
	}
	return nil
}

// waitInSync waits until the target replica holds all of the (paused) primary's stream.
func waitInSync(ctx context.Context, primary, target ReplicationReader, from, to string, deadline time.Time) error {
	return waitReaches(ctx, primary, target, from, to, deadline, false)
}

// ReplicaReaches waits, for up to within, until the replica has received the primary's stream
// up to the offset the primary has now: the primary goes on taking writes, and what a snapshot
// of the replica then holds is every write the primary took before the call.
func ReplicaReaches(ctx context.Context, primary, replica ReplicationReader, within time.Duration) error {
	return waitReaches(ctx, primary, replica, "the primary", "the replica", time.Now().Add(within), true)
}

// waitReaches waits until target is a replica with its link up and the primary's offset: read
// once (fixed, a point in the stream) or at each look (the end of a paused primary's stream).
func waitReaches(ctx context.Context, primary, target ReplicationReader, from, to string, deadline time.Time, fixed bool) error {
	var src redis.ReplicationInfo
	for read := true; ; read = !fixed {
		if read {
			var err error
			if src, err = primary.Replication(ctx); err != nil {
				return fmt.Errorf("reading %s: %w", from, err)
			}
		}
		dst, err := target.Replication(ctx)
		if err != nil {
			return fmt.Errorf("reading %s: %w", to, err)
		}
		if dst.Role == redis.RoleReplica && dst.LinkUp && dst.Offset >= src.Offset {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not catch up with %s (offset %d of %d)", to, from, dst.Offset, src.Offset)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (e Executor) do(addr string, fn func(redis.Node) error) error {
	n := e.Dial(addr)
	defer n.Close()
	return fn(n)
}
