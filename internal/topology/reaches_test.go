package topology_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/topology"
	"github.com/org/redis-operator/test/redistest"
)

// A snapshot of a replica holds what the primary took before it was asked for once the replica
// reaches the primary's offset of that moment; a node that does not replicate never does.
func TestAReplicaReachesThePrimarysOffsetAndANodeThatDoesNotReplicateNever(t *testing.T) {
	ctx := context.Background()
	var addrs []string
	for i := range 3 {
		// No password here: protected mode would refuse the replica's connection.
		s, err := redistest.StartIn(t.TempDir(), fmt.Sprintf("node-%d", i), "protected-mode no\n")
		require.NoError(t, err)
		t.Cleanup(s.Kill)
		addrs = append(addrs, s.Addr())
	}
	dial := redis.NewDialer(redis.Options{Timeout: time.Second})
	primary, replica, alone := dial(addrs[0]), dial(addrs[1]), dial(addrs[2])
	defer primary.Close()
	defer replica.Close()
	defer alone.Close()
	require.NoError(t, replica.ReplicaOf(ctx, addrs[0]))
	writer := goredis.NewClient(&goredis.Options{Addr: addrs[0], Protocol: 2, DisableIdentity: true})
	defer writer.Close()
	for i := range 200 {
		require.NoError(t, writer.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err())
	}

	require.NoError(t, topology.ReplicaReaches(ctx, primary, replica, 10*time.Second))
	before, err := primary.Replication(ctx)
	require.NoError(t, err)
	after, err := replica.Replication(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, after.Offset, before.Offset)

	start := time.Now()
	err = topology.ReplicaReaches(ctx, primary, alone, 300*time.Millisecond)
	assert.ErrorContains(t, err, "did not catch up")
	assert.Less(t, time.Since(start), 5*time.Second, "gives up at its deadline")
}
