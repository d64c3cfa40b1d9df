package redisbackup

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	cachev1 "github.com/org/redis-operator/api/v1"
)

func TestABackupOfShardsCountsOnlyWhenItsSnapshotsHoldEverySlotOnce(t *testing.T) {
	shards := func(slots ...[]string) []cachev1.ShardBackup {
		var out []cachev1.ShardBackup
		for i, s := range slots {
			out = append(out, cachev1.ShardBackup{Name: fmt.Sprintf("c-shard%d", i), Slots: s})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		stored []cachev1.ShardBackup
		want   bool
	}{
		{"three even shards", shards([]string{"0-5460"}, []string{"5461-10922"}, []string{"10923-16383"}), true},
		{"shares in pieces", shards([]string{"0-100", "200-5460"}, []string{"101-199", "5461-10922"}, []string{"10923-16383"}), true},
		// Slot 5461 moved from the second shard to the first after the first's snapshot: in neither.
		{"a slot in no snapshot", shards([]string{"0-5460"}, []string{"5462-10922"}, []string{"10923-16383"}), false},
		// Slot 5460 moved from the first shard to the second after the first's snapshot: in both.
		{"a slot in two snapshots", shards([]string{"0-5460"}, []string{"5460-10922"}, []string{"10923-16383"}), false},
		{"a slot range the operator never writes", shards([]string{"0-5460"}, []string{"five"}, []string{"10923-16383"}), false},
		{"nothing stored", nil, false},
	} {
		assert.Equal(t, c.want, everySlotOnce(c.stored), c.name)
	}
}
