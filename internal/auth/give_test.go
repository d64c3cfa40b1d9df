package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/topology"
	"github.com/org/redis-operator/test/redistest"
)

// Against two real redis-servers (and one name that answers nothing): each node is given a
// setting once per Sum, again once it is forgotten or changes, and a node that took it only in
// part is given it again.
func TestEachNodeIsGivenAThingOnceUntilItChanges(t *testing.T) {
	ctx := context.Background()
	a, b := startServer(t, "node-0"), startServer(t, "node-1")
	dial := redis.NewDialer(redis.Options{Password: "pw", Timeout: time.Second})
	nodes := observe(ctx, t, dial, a, b)
	nodes = append(nodes, topology.Observed{Member: topology.Member{Name: "node-2"}, Err: errors.New("no answer")})

	var given auth.Given
	var sent []string
	setting := func(value string, kept map[string]bool) auth.Gift {
		return auth.Gift{Sum: value, Given: &given, Dial: dial,
			Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
				sent = append(sent, o.Name)
				return kept == nil || kept[o.Name], auth.SetSettings(ctx, n, "maxmemory", value)
			}}
	}
	took, err := auth.Give(ctx, nodes, setting("1000000", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"node-0", "node-1"}, took, "the nodes that answer")
	assert.Equal(t, int64(1000000), maxMemoryOf(ctx, t, dial, a))

	sent = nil
	_, err = auth.Give(ctx, nodes, setting("1000000", nil))
	require.NoError(t, err)
	assert.Empty(t, sent, "taken already: nothing is sent")

	_, err = auth.Give(ctx, nodes, setting("2000000", map[string]bool{"node-0": true}))
	require.NoError(t, err)
	assert.Equal(t, []string{"node-0", "node-1"}, sent, "a new value goes to every node")
	sent = nil
	_, err = auth.Give(ctx, nodes, setting("2000000", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"node-1"}, sent, "node-1 took it only in part: given again")

	given.Forget()
	sent = nil
	_, err = auth.Give(ctx, nodes, setting("2000000", nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"node-0", "node-1"}, sent, "forgotten: every node again")
}

func TestAFailureStopsTheLoopUnlessEachNodeGoesOnAndAllOrNoneWaitsForEveryNode(t *testing.T) {
	ctx := context.Background()
	a, b := startServer(t, "node-0"), startServer(t, "node-1")
	dial := redis.NewDialer(redis.Options{Password: "pw", Timeout: time.Second})
	nodes := observe(ctx, t, dial, a, b)
	refused := func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
		return false, auth.SetSettings(ctx, n, "no-such-directive", "1")
	}

	took, err := auth.Give(ctx, nodes, auth.Gift{Dial: dial, Send: refused})
	require.Error(t, err)
	assert.Empty(t, took)
	var sent []string
	counting := func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
		sent = append(sent, o.Name)
		return refused(ctx, o, n)
	}
	_, err = auth.Give(ctx, nodes, auth.Gift{Dial: dial, Send: counting})
	require.Error(t, err)
	assert.Equal(t, []string{"node-0"}, sent, "the first failure stops the loop")
	sent = nil
	_, err = auth.Give(ctx, nodes, auth.Gift{Dial: dial, Send: counting, EachNode: true})
	require.Error(t, err)
	assert.Equal(t, []string{"node-0", "node-1"}, sent, "each node is tried")

	b.Kill()
	nodes = observe(ctx, t, dial, a, b)
	sent = nil
	took, err = auth.Give(ctx, nodes, auth.Gift{Dial: dial, AllOrNone: true,
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			sent = append(sent, o.Name)
			return true, nil
		}})
	require.NoError(t, err)
	assert.Empty(t, took)
	assert.Empty(t, sent, "node-1 does not answer: no node is given it")
}

// startServer runs a redis-server whose default user has the password pw, until the test ends.
func startServer(t *testing.T, name string) *redistest.Server {
	t.Helper()
	s, err := redistest.StartIn(t.TempDir(), name, "requirepass pw\n")
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	return s
}

// observe asks the servers what they are, as the reconciler would.
func observe(ctx context.Context, t *testing.T, dial topology.Dialer, servers ...*redistest.Server) []topology.Observed {
	t.Helper()
	var members []topology.Member
	for i, s := range servers {
		members = append(members, topology.Member{Name: s.Name, Ordinal: i, Addr: s.Addr()})
	}
	return topology.Observe(ctx, dial, members, "").Nodes
}

func maxMemoryOf(ctx context.Context, t *testing.T, dial topology.Dialer, s *redistest.Server) int64 {
	t.Helper()
	n := dial(s.Addr())
	defer n.Close()
	stats, err := n.Stats(ctx)
	require.NoError(t, err)
	return stats.MaxMemory
}
