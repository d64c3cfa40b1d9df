package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
)

func TestStatsAreWhatTheNodeSaysOfItsLoad(t *testing.T) {
	s, err := redistest.StartIn(t.TempDir(), "node-0", "maxmemory 64mb\n")
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	n := redis.NewDialer(redis.Options{Timeout: time.Second})(s.Addr())
	defer n.Close()

	got, err := n.Stats(context.Background())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, got.ConnectedClients, int64(1), "our own connection")
	assert.Positive(t, got.UsedMemory)
	assert.Equal(t, int64(64<<20), got.MaxMemory)
	assert.Zero(t, got.EvictedKeys)
}

func TestParseStatsRefusesAReplyWithoutTheFields(t *testing.T) {
	_, err := redis.ParseStats("# Clients\r\nconnected_clients:3\r\n")
	assert.ErrorContains(t, err, "used_memory")
}
