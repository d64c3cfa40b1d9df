package redis_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
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

func TestAPrimarySaysWhereEachReplicaIsEvenWhenTheReplicaDoesNotAnswer(t *testing.T) {
	// No password here: protected mode would refuse the replica's connection.
	primary, err := redistest.StartIn(t.TempDir(), "node-0", "protected-mode no\n")
	require.NoError(t, err)
	t.Cleanup(primary.Kill)
	replica, err := redistest.StartIn(t.TempDir(), "node-1", "protected-mode no\n")
	require.NoError(t, err)
	t.Cleanup(replica.Kill)
	dial := redis.NewDialer(redis.Options{Timeout: time.Second})
	p, r := dial(primary.Addr()), dial(replica.Addr())
	defer p.Close()
	defer r.Close()
	ctx := context.Background()
	require.NoError(t, r.ReplicaOf(ctx, primary.Addr()))

	// Given a replica in sync
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := p.Replication(ctx)
		require.NoError(c, err)
		require.Len(c, info.Replicas, 1)
		assert.Equal(c, replica.Addr(), info.Replicas[0].Addr, "the address the replica announced")
		assert.Equal(c, info.Offset, info.Replicas[0].Offset)
	}, 10*time.Second, 50*time.Millisecond)

	// When the replica stops answering, the primary still lists it, with the seconds since it
	// last acknowledged growing
	require.NoError(t, replica.Signal(syscall.SIGSTOP))
	defer func() { _ = replica.Signal(syscall.SIGCONT) }()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := p.Replication(ctx)
		require.NoError(c, err)
		require.Len(c, info.Replicas, 1)
		assert.GreaterOrEqual(c, info.Replicas[0].LagSeconds, int64(2))
	}, 10*time.Second, 100*time.Millisecond)
}

// A node's keys tell whether it holds data at all: a node that loaded its data from its volume
// at a restart holds no replication stream (offset 0), but holds its keys.
func TestReplicationSaysHowManyKeysTheNodeHolds(t *testing.T) {
	server, err := redistest.StartIn(t.TempDir(), "node-0", "")
	require.NoError(t, err)
	t.Cleanup(server.Kill)
	n := redis.NewDialer(redis.Options{Timeout: time.Second})(server.Addr())
	defer n.Close()
	ctx := context.Background()
	info, err := n.Replication(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.Keys, "empty")

	for db, keys := range map[int][]string{0: {"a"}, 3: {"b", "c"}} {
		raw := goredis.NewClient(&goredis.Options{Addr: server.Addr(), DB: db})
		for _, k := range keys {
			require.NoError(t, raw.Set(ctx, k, 1, 0).Err())
		}
		require.NoError(t, raw.Close())
	}
	info, err = n.Replication(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), info.Keys, "every database's keys")
}

func TestParseReplicationInfoRefusesAReplicaLineWithoutItsLag(t *testing.T) {
	_, err := redis.ParseReplicationInfo("role:master\r\nmaster_repl_offset:10\r\nslave0:ip=127.0.0.2,port=6379,state=online,offset=10\r\n")
	assert.ErrorContains(t, err, "slave0")
}

func TestParseClusterNodesReadsServedSlotsAndOpenOnesApart(t *testing.T) {
	raw := "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.30:6379@16379,host-a myself,master - 0 1426238317239 4 connected 0-5460 5462 [5461->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca] [9000-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 10.87.0.11:30001@30002 slave 07c37dfeb235213a872192d90877d0cd55635b91 0 1426238316232 4 connected\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca :0@0 master,fail,noaddr - 1426238316232 1426238316232 2 disconnected\n"
	nodes, err := redis.ParseClusterNodes(raw)
	require.NoError(t, err)
	require.Len(t, nodes, 3)
	assert.True(t, nodes[0].Myself())
	assert.True(t, nodes[0].IsPrimary())
	assert.Equal(t, "127.0.0.30:6379", nodes[0].Addr)
	assert.Equal(t, 16379, nodes[0].Bus, "the bus port, before the hostname")
	assert.Equal(t, "10.87.0.11:30001", nodes[1].Addr)
	assert.Equal(t, 30002, nodes[1].Bus, "an announced bus port")
	assert.Equal(t, []redis.SlotRange{{Start: 0, End: 5460}, {Start: 5462, End: 5462}}, nodes[0].Slots)
	assert.Equal(t, 5462, nodes[0].SlotCount())
	assert.Equal(t, map[int]string{5461: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"}, nodes[0].Migrating)
	assert.Equal(t, map[int]string{9000: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"}, nodes[0].Importing)
	assert.True(t, nodes[0].OpenSlot(9000))
	assert.False(t, nodes[0].Serves(5461), "a slot migrating away is still open, not a served range")
	assert.Equal(t, "07c37dfeb235213a872192d90877d0cd55635b91", nodes[1].PrimaryID)
	assert.True(t, nodes[2].Failed())
	assert.Empty(t, nodes[2].Addr)
	assert.False(t, nodes[2].Connected)
	_, err = redis.ParseClusterNodes("not a line")
	assert.Error(t, err)
	_, err = redis.ParseClusterNodes("a 127.0.0.1:6379@16379 myself,master - 0 0 1 connected [12-x]")
	assert.ErrorContains(t, err, "open slot")
}

// What a cluster node announces (spec.expose) is set live and read back, on a real redis-server
// in cluster mode; its own entry of CLUSTER NODES says it at once.
func TestAClusterNodeAnnouncesAnAddressLiveAndItsOwnAgain(t *testing.T) {
	s, err := redistest.StartIn(t.TempDir(), "node-0", "cluster-enabled yes\ncluster-config-file nodes.conf\n")
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	ctx := context.Background()
	// Not the operator's 500 ms: this test is about what a node announces, not how soon it answers,
	// and on a machine running every suite at once a CONFIG SET here once took longer (CI run 66:
	// i/o timeout).
	n := redis.NewDialer(redis.Options{Timeout: 5 * time.Second})(s.Addr())
	defer n.Close()
	own, err := n.ClusterAnnounced(ctx)
	require.NoError(t, err)
	assert.Equal(t, redis.Announced{IP: s.IP}, own, "started announcing its own IP, as a pod starts it")

	outside := redis.Announced{IP: "10.87.0.11", Port: 30001, BusPort: 30002}
	require.NoError(t, n.ClusterAnnounce(ctx, outside))
	got, err := n.ClusterAnnounced(ctx)
	require.NoError(t, err)
	assert.Equal(t, outside, got)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		nodes, err := n.ClusterNodes(ctx)
		require.NoError(c, err)
		require.Len(c, nodes, 1)
		assert.Equal(c, "10.87.0.11:30001", nodes[0].Addr, "its own entry (the cluster's cron takes the IP)")
		assert.Equal(c, 30002, nodes[0].Bus)
	}, 5*time.Second, 50*time.Millisecond)

	back := redis.Announced{IP: s.IP}
	require.NoError(t, n.ClusterAnnounce(ctx, back))
	got, err = n.ClusterAnnounced(ctx)
	require.NoError(t, err)
	assert.Equal(t, back, got, "its pod's address again, its own ports")
}
