package shards_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/redistest"
)

// twoNodes is a cluster of two real redis-server primaries: giver serves every slot, receiver
// none, and each knows the other.
func twoNodes(t *testing.T) (giver, receiver *redistest.Server, ids map[*redistest.Server]string) {
	t.Helper()
	ctx := context.Background()
	conf := "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 2000\n"
	dir := t.TempDir()
	ids = map[*redistest.Server]string{}
	var servers []*redistest.Server
	for _, name := range []string{"giver", "receiver"} {
		s, err := redistest.StartIn(filepath.Join(dir, name), name, conf)
		require.NoError(t, err)
		t.Cleanup(s.Kill)
		ids[s], err = client(s).ClusterMyID(ctx).Result()
		require.NoError(t, err)
		servers = append(servers, s)
	}
	giver, receiver = servers[0], servers[1]
	require.NoError(t, client(giver).ClusterAddSlotsRange(ctx, 0, redis.SlotCount-1).Err())
	require.NoError(t, client(giver).ClusterMeet(ctx, receiver.IP, fmt.Sprint(redistest.Port)).Err())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		view, err := redis.NewDialer(redis.Options{})(receiver.Addr()).ClusterNodes(ctx)
		require.NoError(c, err)
		require.Len(c, view, 2)
		assert.True(c, sees(view, ids[giver], 0), "the receiver sees the giver serve the slots")
		for _, s := range servers {
			info, err := redis.NewDialer(redis.Options{})(s.Addr()).ClusterInfo(ctx)
			require.NoError(c, err)
			assert.Equal(c, "ok", info.State, s.Name)
		}
	}, 20*time.Second, 50*time.Millisecond)
	return giver, receiver, ids
}

func client(s *redistest.Server) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
}

func sees(view []redis.ClusterNode, id string, slot int) bool {
	i := slices.IndexFunc(view, func(n redis.ClusterNode) bool { return n.ID == id })
	return i >= 0 && view[i].Serves(slot)
}

func TestAMoveWhoseReceiverSeesNobodyServeTheSlotTellsItTheOwnerFirst(t *testing.T) {
	// Given a slot with 150 keys, that the receiver imports from the giver but sees nobody
	// serve: what a receiver sees once the primary it imported from failed over and turned
	// replica (it ignores claims to a slot it imports, and drops a replica's slots)
	ctx := context.Background()
	giver, receiver, ids := twoNodes(t)
	const tag = "{orders}"
	keySlot, err := client(giver).ClusterKeySlot(ctx, tag).Result()
	require.NoError(t, err)
	slot := int(keySlot)
	for i := range 150 {
		require.NoError(t, client(giver).Set(ctx, fmt.Sprintf("%s:%d", tag, i), i, 0).Err())
	}
	// (DELSLOTS drops the importing state: both in one transaction, before any gossip binds it again)
	_, err = client(receiver).TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Do(ctx, "CLUSTER", "DELSLOTS", slot)
		p.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[giver])
		return nil
	})
	require.NoError(t, err)
	dial := redis.NewDialer(redis.Options{Timeout: time.Second})
	addrs := map[string]string{"giver": giver.Addr(), "receiver": receiver.Addr()}
	// The giver's gossip does not bind it again while the receiver imports it.
	time.Sleep(time.Second)
	view, err := dial(receiver.Addr()).ClusterNodes(ctx)
	require.NoError(t, err)
	require.False(t, sees(view, ids[giver], slot), "the receiver sees nobody serve the slot")
	move := shards.Move{Slot: slot, From: "giver", To: "receiver", FromID: ids[giver], ToID: ids[receiver], Importing: true}

	// Were it taken to see the giver serve it, the receiver would refuse the keys for ever
	blind := move
	blind.ToSeesFrom = true
	_, err = shards.MoveSlots(ctx, dial, []shards.Move{blind}, addrs, []string{"giver", "receiver"}, shards.DefaultPace, time.Minute)
	require.ErrorContains(t, err, "Hash slot not served")
	require.NoError(t, client(giver).Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err())

	// When the move is made as Decide makes it, knowing the receiver does not see the giver serve the slot
	// (40 keys a MIGRATE, resting as long as each took)
	moved, err := shards.MoveSlots(ctx, dial, []shards.Move{move}, addrs, []string{"giver", "receiver"},
		shards.Pace{KeysPerMigrate: 40, Share: 0.5}, time.Minute)

	// Then every key moved, and the receiver serves the slot, no longer importing it
	require.NoError(t, err)
	assert.Equal(t, 150, moved.Keys)
	assert.Equal(t, int64(150), client(receiver).ClusterCountKeysInSlot(ctx, slot).Val())
	view, err = dial(receiver.Addr()).ClusterNodes(ctx)
	require.NoError(t, err)
	assert.True(t, sees(view, ids[receiver], slot))
	self, _ := (shards.Member{Nodes: view}).Self()
	assert.False(t, self.OpenSlot(slot))
}

func TestAKeyTheReceiverAlreadyHoldsIsReplacedByTheGiversCopy(t *testing.T) {
	// Given a slot the giver serves with 30 keys, and a receiver importing it that already holds
	// a copy of one of them, older than the giver's: what a MIGRATE leaves when its reply comes
	// after its timeout (the receiver restored the keys, the giver kept them and went on
	// serving their writes)
	ctx := context.Background()
	giver, receiver, ids := twoNodes(t)
	const tag = "{carts}"
	keySlot, err := client(giver).ClusterKeySlot(ctx, tag).Result()
	require.NoError(t, err)
	slot := int(keySlot)
	for i := range 30 {
		require.NoError(t, client(giver).Set(ctx, fmt.Sprintf("%s:%d", tag, i), "giver's", 0).Err())
	}
	require.NoError(t, client(receiver).Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[giver]).Err())
	_, err = client(receiver).Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		p.Set(ctx, tag+":7", "stale", 0)
		return nil
	})
	require.NoError(t, err)
	dial := redis.NewDialer(redis.Options{Timeout: time.Second})
	addrs := map[string]string{"giver": giver.Addr(), "receiver": receiver.Addr()}
	move := shards.Move{Slot: slot, From: "giver", To: "receiver", FromID: ids[giver], ToID: ids[receiver], Importing: true, ToSeesFrom: true}

	// When the slot moves, 10 keys a MIGRATE
	moved, err := shards.MoveSlots(ctx, dial, []shards.Move{move}, addrs, []string{"giver", "receiver"},
		shards.Pace{KeysPerMigrate: 10, Share: 1}, time.Minute)

	// Then the move ends (a refused key, BUSYKEY, stopped it for good), every key is the giver's,
	// on the receiver, and the receiver serves the slot
	require.NoError(t, err)
	assert.Equal(t, 30, moved.Keys)
	assert.Equal(t, int64(30), client(receiver).ClusterCountKeysInSlot(ctx, slot).Val())
	assert.Zero(t, client(giver).ClusterCountKeysInSlot(ctx, slot).Val())
	view, err := dial(receiver.Addr()).ClusterNodes(ctx)
	require.NoError(t, err)
	require.True(t, sees(view, ids[receiver], slot))
	assert.Equal(t, "giver's", client(receiver).Get(ctx, tag+":7").Val(), "the receiver's stale copy is replaced")
}

func TestAPaceSaysWhatIsWrongWithIt(t *testing.T) {
	require.NoError(t, shards.DefaultPace.Valid())
	require.NoError(t, shards.Pace{KeysPerMigrate: 1, Share: 0.1}.Valid())
	require.ErrorContains(t, shards.Pace{KeysPerMigrate: 0, Share: 1}.Valid(), "keys per MIGRATE 0")
	require.ErrorContains(t, shards.Pace{KeysPerMigrate: 100, Share: 0}.Valid(), "share 0")
	require.ErrorContains(t, shards.Pace{KeysPerMigrate: 100, Share: 1.5}.Valid(), "share 1.5")
}
