package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
var backupKeys = sized(1<<14, 1<<10)

const backupValueSize = 64 << 10

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
			return err == nil && strings.Contains(info, "master_link_status:up") && rcl.DBSize(ctx).Val() == int64(backupKeys)
		}, 5*time.Minute, 200*time.Millisecond, "replica: %s", replica.LogTail(1500))

		st, endpoint := startBenchS3(b, dir)

		quiet := writeRunOf(ctx, pc, 5*time.Second, nil).latencies

		stopWriter := backgroundWriter(ctx, pc)
		start := time.Now()
		res, err := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, replica.Addr(), redis.Login{}, st, "bench/1gib.rdb")
		backupTime := time.Since(start)
		during := stopWriter().latencies
		require.NoError(b, err)

		restoreDir := mkdir(b, dir, "restored")
		start = time.Now()
		_, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "bench/1gib.rdb", Checksum: res.Checksum, DataDir: restoreDir})
		restoreTime := time.Since(start)
		require.NoError(b, err)

		// What users would otherwise run: redis-cli's own replication transfer piped to rclone,
		// into the same bucket; downloaded with rclone and checked with redis-check-rdb.
		pipe := referenceBackup(b, ctx, pc, replica.Addr(), endpoint, dir)

		mb := float64(res.Size) / 1e6
		b.ReportMetric(mb/backupTime.Seconds(), "backup-MB/s")
		b.ReportMetric(mb/restoreTime.Seconds(), "restore-MB/s")
		b.ReportMetric(p99(quiet).Seconds()*1000, "write-p99-ms")
		b.ReportMetric(p99(during).Seconds()*1000, "write-p99-during-backup-ms")
		b.ReportMetric(float64(pipe.size)/1e6/pipe.backup.Seconds(), "pipe-backup-MB/s")
		b.ReportMetric(float64(pipe.size)/1e6/pipe.restore.Seconds(), "pipe-restore-MB/s")
		b.ReportMetric(backupTime.Seconds()/pipe.backup.Seconds(), "backup-time-ratio")
		b.ReportMetric(restoreTime.Seconds()/pipe.restore.Seconds(), "restore-time-ratio")
		b.ReportMetric(restoreTime.Seconds()/pipe.restoreSynced.Seconds(), "restore-synced-time-ratio")
		fmt.Printf("\nbackup and restore of %d keys of %d KiB, random, from a replica to the Versity S3 Gateway (%s)\n", backupKeys, backupValueSize>>10,
			time.Now().Format(time.DateOnly))
		fmt.Printf("| %-64s | %6s | %9s | %7s | %16s |\n", "", "MB", "seconds", "MB/s", "primary p99 ms")
		row := func(name string, bytes int64, d time.Duration, lat []time.Duration) {
			p := "-"
			if lat != nil {
				p = fmt.Sprintf("%.2f", p99(lat).Seconds()*1000)
			}
			fmt.Printf("| %-64s | %6.0f | %9.2f | %7.0f | %16s |\n", name, float64(bytes)/1e6, d.Seconds(), float64(bytes)/1e6/d.Seconds(), p)
		}
		row("backup, operator (internal/backup: SYNC, SHA-256, multipart)", res.Size, backupTime, during)
		row("backup, redis-cli --rdb - | rclone rcat", pipe.size, pipe.backup, pipe.during)
		row("restore, operator (download, SHA-256, lay out)", res.Size, restoreTime, nil)
		row("restore, rclone cat > dump.rdb && redis-check-rdb", pipe.size, pipe.restore, nil)
		row("restore, the same && sync dump.rdb (durable, as the operator's)", pipe.size, pipe.restoreSynced, nil)
		fmt.Printf("operator / pipe, time: backup %.2f, restore %.2f (%.2f against the synced pipe) (goal: at most 1.10); primary's SET p99 with no backup: %.2f ms (%d writes)\n",
			backupTime.Seconds()/pipe.backup.Seconds(), restoreTime.Seconds()/pipe.restore.Seconds(), restoreTime.Seconds()/pipe.restoreSynced.Seconds(),
			p99(quiet).Seconds()*1000, len(quiet))
	}
}

// writeRun is what a writer saw: each acknowledged write's latency, and how many failed.
type writeRun struct {
	latencies []time.Duration
	errors    int
}

// backgroundWriter runs writeRunOf on c until the function it returns is called, which returns
// what the writer saw.
func backgroundWriter(ctx context.Context, c goredis.Cmdable) func() writeRun {
	done := make(chan struct{})
	run := make(chan writeRun, 1)
	go func() { run <- writeRunOf(ctx, c, time.Hour, done) }()
	return func() writeRun {
		close(done)
		return <-run
	}
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
	st, _ := startBenchS3(b, dir)
	return st
}

// startBenchS3 is startBenchStore, and the S3 server's endpoint.
func startBenchS3(b *testing.B, dir string) (*backup.Store, string) {
	b.Helper()
	require.NoError(b, os.MkdirAll(filepath.Join(dir, "s3"), 0o755))
	store, err := s3server.StartIn(filepath.Join(dir, "s3"))
	require.NoError(b, err)
	b.Cleanup(store.Stop)
	store.CreateBucket(b, "bench")
	st, err := backup.NewStore(*store.Destination("bench", "").S3, backup.Credentials{AccessKeyID: s3server.AccessKeyID, SecretAccessKey: s3server.SecretAccessKey}, nil)
	require.NoError(b, err)
	return st, store.Endpoint
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

// piped is the reference backup's and restore's figures.
type piped struct {
	size                           int64
	backup, restore, restoreSynced time.Duration
	during                         []time.Duration
}

// referenceBackup backs the replica at addr up as a user without the operator would, `redis-cli
// --rdb - | rclone rcat` into the bench bucket at endpoint, with a writer on pc meanwhile; then
// restores it: `rclone cat` into a file and `redis-check-rdb` on it.
func referenceBackup(b *testing.B, ctx context.Context, pc goredis.Cmdable, addr, endpoint, dir string) piped {
	host, port, err := net.SplitHostPort(addr)
	require.NoError(b, err)
	// rclone's remote "bench" from the environment, not a config file; the keys stay out of argv.
	// AWS_CA_BUNDLE, where a machine sets one, makes rclone's SDK fail on a plain-HTTP endpoint.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	env = append(env, "RCLONE_CONFIG_BENCH_TYPE=s3", "RCLONE_CONFIG_BENCH_PROVIDER=Other",
		"RCLONE_CONFIG_BENCH_ENDPOINT="+endpoint, "RCLONE_CONFIG_BENCH_REGION=us-east-1",
		"RCLONE_CONFIG_BENCH_ACCESS_KEY_ID="+s3server.AccessKeyID, "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY="+s3server.SecretAccessKey,
		"RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true", "RCLONE_CONFIG="+filepath.Join(dir, "rclone.conf"))
	var out piped
	stopWriter := backgroundWriter(ctx, pc)
	start := time.Now()
	backupCmd := exec.Command("sh", "-c", `redis-cli -h "$1" -p "$2" --rdb - | rclone rcat bench:bench/pipe.rdb`, "sh", host, port)
	backupCmd.Env = env
	msg, err := backupCmd.CombinedOutput()
	out.backup = time.Since(start)
	out.during = stopWriter().latencies
	require.NoError(b, err, "%s", msg)

	file := filepath.Join(mkdir(b, dir, "pipe-restored"), "dump.rdb")
	start = time.Now()
	restoreCmd := exec.Command("sh", "-c", `rclone cat bench:bench/pipe.rdb > "$1" && redis-check-rdb "$1"`, "sh", file)
	restoreCmd.Env = env
	msg, err = restoreCmd.CombinedOutput()
	out.restore = time.Since(start)
	require.NoError(b, err, "%s", msg)
	require.Contains(b, string(msg), "RDB looks OK")
	st, err := os.Stat(file)
	require.NoError(b, err)
	out.size = st.Size()

	// The same, durable as the operator's restore leaves it: the file synced to disk before
	// Redis may start on it.
	synced := filepath.Join(mkdir(b, dir, "pipe-restored-synced"), "dump.rdb")
	start = time.Now()
	syncedCmd := exec.Command("sh", "-c", `rclone cat bench:bench/pipe.rdb > "$1" && redis-check-rdb "$1" && sync "$1"`, "sh", synced)
	syncedCmd.Env = env
	msg, err = syncedCmd.CombinedOutput()
	out.restoreSynced = time.Since(start)
	require.NoError(b, err, "%s", msg)
	return out
}
