package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/redistest"
)

// The dataset of the shards' benchmark: 384 MiB of incompressible values of 64 KiB.
var shardedBackupKeys = sized(6<<10, 1<<10)

// BenchmarkBackupShardsAgainstOne backs up the same data held by one node, as in replication
// mode, and by the three primaries of a cluster-mode cluster (a third each), as the operator
// does: one snapshot, or one per shard one after the other; then restores them as the restore
// init containers do, the three shards' at once (each shard's first node has its own). Same
// run, same S3 server (the Versity S3 Gateway), same values. It prints both MB/s and the ratios.
func BenchmarkBackupShardsAgainstOne(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		dir := b.TempDir()
		// As the operator configures its nodes: a snapshot is streamed at once (no 5s wait
		// for other replicas to join the sync).
		base := "appendonly no\nsave \"\"\nprotected-mode no\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n"
		one, err := redistest.StartIn(filepath.Join(dir, "one"), "one", base)
		require.NoError(b, err)
		defer one.Kill()
		var nodes []*redistest.Server
		for i := range 3 {
			n, err := redistest.StartIn(filepath.Join(dir, "shard"+strconv.Itoa(i)), "shard"+strconv.Itoa(i),
				base+"cluster-enabled yes\ncluster-config-file nodes.conf\n")
			require.NoError(b, err)
			defer n.Kill()
			nodes = append(nodes, n)
		}
		formCluster(ctx, b, nodes)

		oc := goredis.NewClient(&goredis.Options{Addr: one.Addr()})
		defer oc.Close()
		var addrs []string
		for _, n := range nodes {
			addrs = append(addrs, n.Addr())
		}
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
		defer cc.Close()
		writeRandomValues(ctx, b, 2, shardedBackupKeys, oc, cc)

		st := startBenchStore(b, dir)
		snapshots := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}

		// Backups: one snapshot; then one per shard, one after the other, as takeShards does.
		start := time.Now()
		res, err := snapshots.Take(ctx, one.Addr(), redis.Login{}, st, "bench/one.rdb")
		require.NoError(b, err)
		oneBackup, oneSize := time.Since(start), res.Size
		start = time.Now()
		var shardSize int64
		checksums := make([]string, len(nodes))
		for i, n := range nodes {
			res, err := snapshots.Take(ctx, n.Addr(), redis.Login{}, st, fmt.Sprintf("bench/shard%d.rdb", i))
			require.NoError(b, err)
			shardSize += res.Size
			checksums[i] = res.Checksum
		}
		shardsBackup := time.Since(start)

		// Restores: one; then the three at once, as three pods' init containers run.
		start = time.Now()
		_, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "bench/one.rdb", Checksum: res.Checksum, DataDir: mkdir(b, dir, "restored-one")})
		require.NoError(b, err)
		oneRestore := time.Since(start)
		start = time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(nodes))
		for i := range nodes {
			wg.Go(func() {
				_, errs[i] = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: fmt.Sprintf("bench/shard%d.rdb", i), Checksum: checksums[i],
					DataDir: mkdir(b, dir, fmt.Sprintf("restored-shard%d", i))})
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(b, err)
		}
		shardsRestore := time.Since(start)

		mbps := func(size int64, d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
		b.ReportMetric(mbps(oneSize, oneBackup), "one-backup-MB/s")
		b.ReportMetric(mbps(shardSize, shardsBackup), "shards-backup-MB/s")
		b.ReportMetric(mbps(oneSize, oneRestore), "one-restore-MB/s")
		b.ReportMetric(mbps(shardSize, shardsRestore), "shards-restore-MB/s")
		fmt.Printf("\n| %d keys of 64 KiB | one node (replication mode) | 3 shards (cluster mode) | 3 shards / one |\n|---|---|---|---|\n", shardedBackupKeys)
		fmt.Printf("| backup | %.0f MB in %.1fs, %.0f MB/s | %.0f MB in %.1fs, %.0f MB/s (one shard after another) | %.2fx |\n",
			float64(oneSize)/1e6, oneBackup.Seconds(), mbps(oneSize, oneBackup), float64(shardSize)/1e6, shardsBackup.Seconds(), mbps(shardSize, shardsBackup),
			mbps(shardSize, shardsBackup)/mbps(oneSize, oneBackup))
		fmt.Printf("| restore | %.1fs, %.0f MB/s | %.1fs, %.0f MB/s (the shards at once) | %.2fx |\n",
			oneRestore.Seconds(), mbps(oneSize, oneRestore), shardsRestore.Seconds(), mbps(shardSize, shardsRestore),
			mbps(shardSize, shardsRestore)/mbps(oneSize, oneRestore))
	}
}

// formCluster makes the nodes one Redis Cluster, each serving an even third of the slots (the
// operator's first assignment), and waits until every node says the cluster is ok.
func formCluster(ctx context.Context, b *testing.B, nodes []*redistest.Server) {
	b.Helper()
	var clients []*goredis.Client
	for i, n := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
		defer c.Close()
		r := shards.SlotsOf(i, len(nodes))
		require.NoError(b, c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r.Start, r.End).Err())
		clients = append(clients, c)
	}
	for _, n := range nodes[1:] {
		require.NoError(b, clients[0].ClusterMeet(ctx, n.IP, strconv.Itoa(redistest.Port)).Err())
	}
	require.Eventually(b, func() bool {
		for _, c := range clients {
			if info, err := c.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "the cluster forms")
}
