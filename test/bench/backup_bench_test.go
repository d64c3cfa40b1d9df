package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/s3server"
)

// The dataset: 1 GiB of random (incompressible) values of 64 KiB, so that the RDB is 1 GiB too.
const (
	backupKeys      = 1 << 14
	backupValueSize = 64 << 10
)

// BenchmarkBackup1GiB backs up 1 GiB of data from a real replica to a real S3 server (the Versity S3 Gateway)
// as the operator does (internal/backup: the replication handshake, streamed into multipart
// parts), restores it into a data directory as the restore init container does, and measures a
// writer's latency on the primary without and during the backup. It prints MB/s and the p99s.
func BenchmarkBackup1GiB(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		dir := b.TempDir()
		conf := "appendonly no\nsave \"\"\nprotected-mode no\n"
		primary, err := redistest.StartIn(filepath.Join(dir, "primary"), "primary", conf)
		require.NoError(b, err)
		defer primary.Kill()
		replica, err := redistest.StartIn(filepath.Join(dir, "replica"), "replica", conf+"repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n")
		require.NoError(b, err)
		defer replica.Kill()
		pc := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
		defer pc.Close()
		rcl := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
		defer rcl.Close()

		// 1 GiB of values on the primary, copied to its replica.
		writeRandomValues(ctx, b, 1, backupKeys, pc)
		require.NoError(b, rcl.Do(ctx, "REPLICAOF", primary.IP, "6379").Err())
		require.Eventually(b, func() bool {
			info, err := rcl.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up") && rcl.DBSize(ctx).Val() == backupKeys
		}, 5*time.Minute, 200*time.Millisecond, "replica: %s", replica.LogTail(1500))

		st := startBenchStore(b, dir)

		quiet := writeLatencies(ctx, pc, 5*time.Second, nil)

		done := make(chan struct{})
		var during []time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { during = writeLatencies(ctx, pc, time.Hour, done) })
		start := time.Now()
		res, err := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, replica.Addr(), redis.Login{}, st, "bench/1gib.rdb")
		backupTime := time.Since(start)
		close(done)
		wg.Wait()
		require.NoError(b, err)

		restoreDir := mkdir(b, dir, "restored")
		start = time.Now()
		_, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "bench/1gib.rdb", Checksum: res.Checksum, DataDir: restoreDir})
		restoreTime := time.Since(start)
		require.NoError(b, err)

		mb := float64(res.Size) / 1e6
		b.ReportMetric(mb/backupTime.Seconds(), "backup-MB/s")
		b.ReportMetric(mb/restoreTime.Seconds(), "restore-MB/s")
		b.ReportMetric(p99(quiet).Seconds()*1000, "write-p99-ms")
		b.ReportMetric(p99(during).Seconds()*1000, "write-p99-during-backup-ms")
		fmt.Printf("\nbackup of %d keys (RDB %.0f MB) from a replica to the Versity S3 Gateway: %.1fs, %.0f MB/s; restore (download, SHA-256, lay out): %.1fs, %.0f MB/s\n",
			backupKeys, mb, backupTime.Seconds(), mb/backupTime.Seconds(), restoreTime.Seconds(), mb/restoreTime.Seconds())
		fmt.Printf("primary's SET latency: p99 %.2fms without a backup (%d writes), %.2fms during it (%d writes)\n",
			p99(quiet).Seconds()*1000, len(quiet), p99(during).Seconds()*1000, len(during))
	}
}

// writeLatencies sets keys on c one at a time until d passed or done closed, and returns each
// write's latency.
func writeLatencies(ctx context.Context, c goredis.Cmdable, d time.Duration, done chan struct{}) []time.Duration {
	return writeRunOf(ctx, c, d, done).latencies
}

// writeRun is what a writer saw: each acknowledged write's latency, and how many failed.
type writeRun struct {
	latencies []time.Duration
	errors    int
}

// writeRunOf sets keys on c one at a time, a millisecond apart, until d passed or done closed.
func writeRunOf(ctx context.Context, c goredis.Cmdable, d time.Duration, done chan struct{}) writeRun {
	var out writeRun
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-done:
			return out
		default:
		}
		start := time.Now()
		if err := c.Set(ctx, fmt.Sprintf("w:%d", i%10000), "0123456789012345678901234567890123456789", 0).Err(); err == nil {
			out.latencies = append(out.latencies, time.Since(start))
		} else {
			out.errors++
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return percentile(s, 99)
}

// startBenchStore starts a real S3 server (the Versity S3 Gateway) under dir, stopped when the
// benchmark ends, and returns its bucket "bench" as the operator's backups use it.
func startBenchStore(b *testing.B, dir string) *backup.Store {
	b.Helper()
	require.NoError(b, os.MkdirAll(filepath.Join(dir, "s3"), 0o755))
	store, err := s3server.StartIn(filepath.Join(dir, "s3"))
	require.NoError(b, err)
	b.Cleanup(store.Stop)
	store.CreateBucket(b, "bench")
	st, err := backup.NewStore(*store.Destination("bench", "").S3, backup.Credentials{AccessKeyID: s3server.AccessKeyID, SecretAccessKey: s3server.SecretAccessKey}, nil)
	require.NoError(b, err)
	return st
}

// writeRandomValues sets key:0..key:<keys-1> to incompressible values of backupValueSize, drawn
// from seed, on each of clients (the same values on each), 64 keys to a pipeline.
func writeRandomValues(ctx context.Context, b *testing.B, seed byte, keys int, clients ...goredis.Cmdable) {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{seed})
	values := make([]string, 64)
	value := make([]byte, backupValueSize)
	for i := 0; i < keys; i += len(values) {
		for k := range values {
			_, _ = rng.Read(value)
			values[k] = string(value)
		}
		for _, c := range clients {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for k, v := range values {
					p.Set(ctx, fmt.Sprintf("key:%d", i+k), v, 0)
				}
				return nil
			})
			require.NoError(b, err)
		}
	}
}

// mkdir makes the directory name in dir, and returns its path.
func mkdir(b *testing.B, dir, name string) string {
	b.Helper()
	p := filepath.Join(dir, name)
	require.NoError(b, os.MkdirAll(p, 0o755))
	return p
}
