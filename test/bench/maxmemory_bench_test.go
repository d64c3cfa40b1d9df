package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/redistest"
)

// memoryCgroups is the cgroup v1 memory hierarchy the share is measured in (this machine's
// hybrid cgroup v1, as the kubelet's containers are).
const memoryCgroups = "/sys/fs/cgroup/memory"

// BenchmarkMaxMemoryShare measures what resources.MaxMemoryPercent leaves of a container's
// memory limit (docs/settings.md#memory). A redis-server in a memory cgroup of a 64 MiB limit,
// as a container's, with maxmemory a share of it and noeviction, is filled with 1 KB values
// until it refuses a write; then its keys are overwritten at random for a while as a replica
// full-syncs from it (diskless), a BGSAVE runs and, with appendonly, a BGREWRITEAOF: the forks
// copy the pages the writes change. It reports the peak of the cgroup's anonymous memory (rss +
// mapped_file of memory.stat, sampled every 20 ms) against the limit, and whether the kernel
// killed Redis, for each share and with and without AOF. Root, and cgroup v1's memory
// controller; skipped elsewhere.
func BenchmarkMaxMemoryShare(b *testing.B) {
	if _, err := os.Stat(filepath.Join(memoryCgroups, "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
		b.Skip("needs root and cgroup v1's memory controller at " + memoryCgroups)
	}
	shares := sized([]int{resources.MaxMemoryPercent, 75, 90}, []int{resources.MaxMemoryPercent})
	overwrite := sized(8*time.Second, 3*time.Second)
	for range b.N {
		for _, share := range shares {
			for _, aof := range []string{"no", "yes"} {
				peak, killed, writes := measureShare(b, share, aof, overwrite)
				b.Logf("maxmemory %d%% of 64 MiB, appendonly %s: peak anonymous memory %.0f%% of the limit (%.1f MiB), killed by the kernel: %v (%.0f overwrites/s)",
					share, aof, 100*float64(peak)/float64(shareLimit), float64(peak)/(1<<20), killed, float64(writes)/overwrite.Seconds())
				if share == resources.MaxMemoryPercent {
					b.ReportMetric(100*float64(peak)/float64(shareLimit), fmt.Sprintf("peak-%%-of-limit-aof-%s", aof))
				}
			}
		}
	}
}

const shareLimit = 64 << 20

// measureShare runs one redis-server in a cgroup of its own and returns its peak anonymous
// memory, whether the kernel killed it, and how many overwrites it took.
func measureShare(b *testing.B, share int, aof string, overwrite time.Duration) (int64, bool, int) {
	ctx := context.Background()
	cg := filepath.Join(memoryCgroups, fmt.Sprintf("redis-operator-bench-%d", os.Getpid()))
	require.NoError(b, os.Mkdir(cg, 0o755))
	defer func() { _ = os.Remove(cg) }() // once its processes are gone
	require.NoError(b, os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.Itoa(shareLimit)), 0o600))

	conf := fmt.Sprintf("maxmemory %d\nmaxmemory-policy noeviction\nappendonly %s\nsave \"\"\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n",
		shareLimit/100*share, aof)
	primary, err := redistest.StartIn(b.TempDir(), "primary", conf)
	require.NoError(b, err)
	defer primary.Kill()
	require.NoError(b, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(primary.PID())), 0o600))

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if anon := cgroupAnon(cg); anon > peak.Load() {
				peak.Store(anon)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	c := goredis.NewClient(&goredis.Options{Addr: primary.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	value := strings.Repeat("v", 1000)
	keys := 0
	for full := false; !full; {
		pipe := c.Pipeline()
		for i := range 100 {
			pipe.Set(ctx, "k:"+strconv.Itoa(keys+i), value, 0)
		}
		_, err := pipe.Exec(ctx)
		full = err != nil && strings.Contains(err.Error(), "OOM")
		if err != nil && !full {
			// Killed while its data grew to maxmemory, or stalled by the kernel's reclaim at
			// the limit (a read timeout): either way past what the container holds.
			b.Logf("maxmemory %d%%, appendonly %s: writing up to maxmemory failed: %v", share, aof, err)
			time.Sleep(2 * time.Second)
			close(stop)
			<-sampled
			return peak.Load(), !primary.Alive(), 0
		}
		keys += 100
	}
	replica, err := redistest.StartIn(b.TempDir(), "replica", fmt.Sprintf("replicaof %s %d\n", primary.IP, redistest.Port))
	require.NoError(b, err)
	defer replica.Kill()
	_ = c.BgSave(ctx).Err()
	if aof == "yes" {
		_ = c.BgRewriteAOF(ctx).Err()
	}
	writes := 0
	for end := time.Now().Add(overwrite); time.Now().Before(end) && primary.Alive(); writes++ {
		_ = c.Set(ctx, "k:"+strconv.Itoa(rand.IntN(keys)), value, 0).Err()
	}
	close(stop)
	<-sampled
	return peak.Load(), !primary.Alive(), writes
}

// cgroupAnon is the cgroup's anonymous memory: rss and mapped_file of its memory.stat.
func cgroupAnon(cg string) int64 {
	f, err := os.Open(filepath.Join(cg, "memory.stat"))
	if err != nil {
		return 0
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == "rss" || k == "mapped_file" {
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total
}
