package auth

import (
	"context"
	"errors"
	"sync"

	"github.com/org/redis-operator/internal/topology"
)

// Gift is one thing every node is given, live: the default user's password, the operator's own
// user, the application users, the TLS certificate, the live settings, the removal of a
// password whose time is up. Give is the one loop they all go through: each node that answers
// is given it once (Given remembers), and again when the thing changes (Sum) or is forgotten.
type Gift struct {
	// Sum names what is given (a hash, never a password): a node that Given says took this Sum
	// is left alone.
	Sum string
	// Given remembers what each node took; nil gives it to every node each time.
	Given *Given
	// Reach says which nodes are given it now: those that answer when nil.
	Reach func(topology.Observed) bool
	// Dial reaches a node; DialNode, when set, instead reaches each node with a login of its
	// own (a configuration that checks no name, for a node whose certificate is refused).
	Dial     topology.Dialer
	DialNode func(topology.Observed) topology.Node
	// Send gives it to one node. kept is false when the node took it only in part (a user it
	// refused): it is given it again next time.
	Send func(ctx context.Context, o topology.Observed, n topology.Node) (kept bool, err error)
	// EachNode goes on past a node that fails (the errors are joined); otherwise the first
	// failure stops the loop.
	EachNode bool
	// AllOrNone gives it only once every node answers: a password removed from some nodes would
	// still let a client in through another.
	AllOrNone bool
}

// Give gives g to each node of nodes that needs it, and says which nodes took it.
func Give(ctx context.Context, nodes []topology.Observed, g Gift) (took []string, err error) {
	reach := g.Reach
	if reach == nil {
		reach = topology.Observed.Reachable
	}
	if g.AllOrNone {
		for _, o := range nodes {
			if !reach(o) {
				return nil, nil // a node that comes back must take it too: wait for it
			}
		}
	}
	var errs []error
	for _, o := range nodes {
		if !reach(o) || (g.Given != nil && g.Given.To(o.Name) == g.Sum) {
			continue
		}
		var n topology.Node
		if g.DialNode != nil {
			n = g.DialNode(o)
		} else {
			n = g.Dial(o.Addr)
		}
		kept, err := g.Send(ctx, o, n)
		_ = n.Close()
		if err != nil {
			if !g.EachNode {
				return took, err
			}
			errs = append(errs, err)
			continue
		}
		took = append(took, o.Name)
		if kept && g.Given != nil {
			g.Given.Gave(o.Name, g.Sum)
		}
	}
	return took, errors.Join(errs...)
}

// Given is, by node, the Sum of what each node last took of one Gift, as this operator process
// gave it: kept between reconciles by the controller that gives it.
type Given struct {
	mu sync.Mutex
	to map[string]string
}

// To is the Sum the node last took; empty when it took none.
func (g *Given) To(node string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.to[node]
}

// Gave records that the node took sum.
func (g *Given) Gave(node, sum string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.to == nil {
		g.to = map[string]string{}
	}
	g.to[node] = sum
}

// Forget makes every node be given it again.
func (g *Given) Forget() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.to = nil
}

// SettingsNode is what the live settings need of a node (redis.Node has it).
type SettingsNode interface {
	SetConfig(ctx context.Context, pairs ...string) error
}

// SetSettings gives the node settings (directive, value pairs) live: CONFIG SET.
func SetSettings(ctx context.Context, n SettingsNode, pairs ...string) error {
	return n.SetConfig(ctx, pairs...)
}
