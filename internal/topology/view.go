package topology

import (
	"context"
	"errors"
	"sync"

	"github.com/org/redis-operator/internal/redis"
)

// Dialer opens a connection to the Redis node at addr (host:port). It is the one way the
// operator reaches Redis. Only the packages that act on nodes speak the protocol through it:
// this one (replication), internal/shards (cluster mode), internal/auth (credentials) and
// internal/backup (snapshots); the controllers hand a Dialer to them and never send a command.
type Dialer = redis.Dialer

// Node is a connection to one Redis node, as a Dialer gives it.
type Node = redis.Node

// ErrNoPermission is a node that refused the operator's user a command (NOPERM): its user is an
// earlier build's, and is given again.
var ErrNoPermission = redis.ErrNoPermission

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

// IsPrimary is true when the node answered as a primary.
func (o Observed) IsPrimary() bool { return o.Reachable() && o.Info.Role == redis.RolePrimary }

// IsReplica is true when the node answered as a replica (of anyone, or of the fence).
func (o Observed) IsReplica() bool { return o.Reachable() && o.Info.Role == redis.RoleReplica }

// AuthRefused is true when the node refused the password: neither up nor down.
func (o Observed) AuthRefused() bool { return errors.Is(o.Err, redis.ErrAuth) }

// TLSRefused is true when the TLS handshake with the node failed: neither up nor down.
func (o Observed) TLSRefused() bool { return errors.Is(o.Err, redis.ErrTLS) }

// replicates is true when o is a replica pointed at primary, whether or not its link is up.
func (o Observed) replicates(primary Observed) bool {
	return o.IsReplica() && primary.Addr != "" && o.Info.PrimaryAddr() == primary.Addr
}

// View is one observation of every node, together with the primary the operator recorded. It
// is the one place that says who is primary, which replica has caught up with it and who
// serves; the controller, the status and the decisions ask it and never read Redis's INFO
// fields themselves.
type View struct {
	// Nodes are the members in ordinal order, each with what it said.
	Nodes []Observed
	// Primary is the primary the operator recorded; empty before the first one is chosen.
	Primary string
	// HeardWithin is how recently, in whole seconds, a replica must have heard from the recorded
	// primary to vouch that it lives while the operator cannot reach it: the primary's ping
	// period (repl-ping-replica-period). 0: no replica vouches.
	HeardWithin int64
	// PrimaryHeld is how many keys the recorded primary held when the operator last saw it
	// serve (Downtime); 0 when it has not since it started.
	PrimaryHeld int64
}

// Observe asks every member for its replication state, all at once. primary is the primary
// the operator recorded.
func Observe(ctx context.Context, dial Dialer, members []Member, primary string) View {
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
	return View{Nodes: out, Primary: primary}
}

// Stats is what a node says of its load (clients, memory, keys, evictions): the metrics'
// source.
type Stats = redis.Stats

// ObserveStats asks the nodes of v that answered and that due takes for their load (clients,
// memory, keys), all at once: for the metrics, less often than the replication state. A node
// that does not answer now is left out.
func ObserveStats(ctx context.Context, dial Dialer, v View, due func(name string) bool) map[string]Stats {
	var mu sync.Mutex
	out := map[string]Stats{}
	var wg sync.WaitGroup
	for _, o := range v.reachable() {
		if !due(o.Name) {
			continue
		}
		wg.Go(func() {
			n := dial(o.Addr)
			defer n.Close()
			if s, err := n.Stats(ctx); err == nil {
				mu.Lock()
				out[o.Name] = s
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// WithPrimary is the same observation with another recorded primary: what the nodes said,
// judged against the primary a decision just chose.
func (v View) WithPrimary(name string) View {
	v.Primary = name
	return v
}

// Find returns the node called name.
func (v View) Find(name string) (Observed, bool) {
	for _, o := range v.Nodes {
		if o.Name == name {
			return o, true
		}
	}
	return Observed{}, false
}

// PrimaryAnswers is true when the recorded primary answered at all, in whatever role.
func (v View) PrimaryAnswers() bool {
	p, ok := v.Find(v.Primary)
	return ok && p.Reachable()
}

// CaughtUp is true when o is a replica of the recorded primary with its link up: it receives
// the primary's stream, and a client reading from it sees the primary's data.
func (v View) CaughtUp(o Observed) bool {
	p, ok := v.Find(v.Primary)
	return ok && o.Name != p.Name && o.replicates(p) && o.Info.LinkUp
}

// heardFromPrimary is a replica of primary that heard from it within HeardWithin seconds, if
// one answers: a witness that it lives. None for a primary whose port refuses connections: its
// process is gone, whatever its replicas have not noticed yet.
func (v View) heardFromPrimary(primary Observed) (string, bool) {
	if errors.Is(primary.Err, redis.ErrRefused) {
		return "", false
	}
	for _, o := range v.reachable() {
		if v.HeardWithin > 0 && o.replicates(primary) && o.Info.LinkUp && o.Info.LastIOSeconds <= v.HeardWithin {
			return o.Name, true
		}
	}
	return "", false
}

// Serving is true when o does its job: the recorded primary answering as primary (or, when
// it does not answer the operator, heard from by a replica), or a caught-up replica of it.
func (v View) Serving(o Observed) bool {
	if o.Name == v.Primary {
		// One the operator cannot reach still serves while a replica hears from it: its
		// clients reach it (the Service keeps it), and it is not replaced (Decide).
		if o.IsPrimary() {
			return true
		}
		_, heard := v.heardFromPrimary(o)
		return heard
	}
	return v.CaughtUp(o)
}

// LagBytes is how far o is behind the recorded primary's replication stream, for a replica of
// it; false when that cannot be told (o is not its replica, or either did not answer).
func (v View) LagBytes(o Observed) (int64, bool) {
	p, ok := v.Find(v.Primary)
	if !ok || !p.IsPrimary() || o.Name == p.Name || !o.replicates(p) {
		return 0, false
	}
	return max(p.Info.Offset-o.Info.Offset, 0), true
}

// LagSeconds is the time since o last acknowledged the recorded primary's stream, as the
// primary tells it; it holds when o itself does not answer. False when the primary did not
// answer or does not list o.
func (v View) LagSeconds(o Observed) (int64, bool) {
	p, ok := v.Find(v.Primary)
	if !ok || !p.IsPrimary() || o.Name == p.Name || o.Addr == "" {
		return 0, false
	}
	for _, r := range p.Info.Replicas {
		if r.Addr == o.Addr {
			return r.LagSeconds, true
		}
	}
	return 0, false
}

// WritablePrimary is true when the recorded primary answers as a primary.
func (v View) WritablePrimary() bool {
	p, ok := v.Find(v.Primary)
	return ok && v.Serving(p)
}

// AllServing is true when there is a recorded primary and every node serves.
func (v View) AllServing() bool {
	if _, ok := v.Find(v.Primary); !ok {
		return false
	}
	for _, o := range v.Nodes {
		if !v.Serving(o) {
			return false
		}
	}
	return true
}

// BestReplica is the caught-up replica holding the most data among those accept takes: the
// target of a switchover.
func (v View) BestReplica(accept func(Observed) bool) (Observed, bool) {
	var best Observed
	found := false
	for _, o := range v.Nodes {
		if !v.CaughtUp(o) || !accept(o) {
			continue
		}
		if !found || o.Info.Offset > best.Info.Offset {
			best, found = o, true
		}
	}
	return best, found
}

// SnapshotSource is the node a backup is taken from: the caught-up replica holding the most
// data, so that the primary does not fork for it; the primary only when no replica is caught
// up. False when neither answers.
func (v View) SnapshotSource() (Observed, bool) {
	if o, ok := v.BestReplica(func(Observed) bool { return true }); ok {
		return o, true
	}
	if p, ok := v.Find(v.Primary); ok && p.IsPrimary() {
		return p, true
	}
	return Observed{}, false
}

// AuthRefused are the nodes that refused the password.
func (v View) AuthRefused() []Observed { return v.nodesWhere(Observed.AuthRefused) }

// TLSRefused are the nodes whose TLS handshake failed.
func (v View) TLSRefused() []Observed { return v.nodesWhere(Observed.TLSRefused) }

// Settled is true when plan changes nothing and every node serves the primary it keeps.
func (v View) Settled(plan Plan) bool {
	return plan.Idle() && v.WithPrimary(plan.Primary).AllServing()
}

// reachable are the nodes that answered.
func (v View) reachable() []Observed { return v.nodesWhere(Observed.Reachable) }

func (v View) nodesWhere(keep func(Observed) bool) []Observed {
	var out []Observed
	for _, o := range v.Nodes {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}
