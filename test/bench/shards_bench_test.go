package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/shards"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/testenv"
)

// dataset is what a scale-out moves: keys of size bytes.
type dataset struct{ keys, size int }

func (d dataset) String() string { return fmt.Sprintf("%dx%dB", d.keys, d.size) }

// scaleOutDatasets: 100k keys of 100 bytes (20k with BENCH_SMOKE=1); BENCH_FULL=1 adds 1M of 100 bytes and 10k of 10 KB.
func scaleOutDatasets() []dataset {
	sets := []dataset{{sized(100_000, 20_000), 100}}
	if os.Getenv("BENCH_FULL") == "1" {
		sets = append(sets, dataset{1_000_000, 100}, dataset{10_000, 10 << 10})
	}
	return sets
}

// scaleOut is one 3 -> 5 shard change under a writer.
type scaleOut struct {
	// moving is from the first slot moving until the last has moved; took adds what came
	// before (the operator's new pods, or redis-cli's add-node).
	moving, took  time.Duration
	moved         int64
	quiet, during writeRun
	// redirects are the MOVED and ASK replies the writer's client met while slots moved.
	redirects int64
	// servers is what the redis-servers spent from the change's start to its end; tools, the CPU
	// of what drove the change meanwhile (the operator, the API server and etcd; redis-cli).
	servers serverTime
	tools   map[string]time.Duration
}

// countingClusterClient is a cluster client of addrs whose redirects are counted.
func countingClusterClient(addrs []string, password string) (*goredis.ClusterClient, *redirectCounter) {
	redirects := &redirectCounter{}
	return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, Password: password, Protocol: 2, DisableIdentity: true,
		MaxRedirects: 8, NewClient: redirects.newClient}), redirects
}

// startWriter measures cc's writer for 3 s with nothing moving (s.quiet), then starts it; the
// function it returns stops it and records what it saw meanwhile (s.during, s.redirects).
func (s *scaleOut) startWriter(ctx context.Context, cc *goredis.ClusterClient, redirects *redirectCounter) func() {
	s.quiet = writeRunOf(ctx, cc, 3*time.Second, nil)
	before := redirects.n.Load()
	stop := backgroundWriter(ctx, cc)
	return func() {
		s.during = stop()
		s.redirects = redirects.n.Load() - before
	}
}

// redirectCounter counts the MOVED and ASK replies a cluster client's nodes give (each costs the
// writer a round trip more, a MOVED also a reload of the client's slot map).
type redirectCounter struct{ n atomic.Int64 }

func (r *redirectCounter) newClient(o *goredis.Options) *goredis.Client {
	c := goredis.NewClient(o)
	c.AddHook(r)
	return c
}

func (r *redirectCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *redirectCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
			r.n.Add(1)
		}
		return err
	}
}

func (r *redirectCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// BenchmarkScaleOutShards grows a cluster of 3 shards x 2 real redis-server nodes holding a
// dataset to 5 shards under a cluster client writing one key a millisecond, twice in one run: by
// the operator binary (a RedisCluster's spec.cluster.shards 3 -> 5), and by what users would
// otherwise run, `redis-cli --cluster add-node` and `--cluster rebalance --cluster-use-empty-masters`
// (Debian's redis-tools, the same Redis) over the same configuration. It prints keys and slots moved per second while slots
// move, the writer's p99 and errors for both, and the ratio.
func BenchmarkScaleOutShards(b *testing.B) {
	cfg, c := apiServer(b)
	for _, ds := range scaleOutDatasets() {
		b.Run(ds.String(), func(b *testing.B) {
			for range b.N {
				op := operatorScaleOut(b, cfg, c, ds)
				ref := redisCliRebalance(b, ds)
				slots := 2 * 16384 / 5
				rate := func(s scaleOut) float64 { return float64(s.moved) / s.moving.Seconds() }
				b.ReportMetric(op.took.Seconds(), "scale-out-s")
				b.ReportMetric(rate(op), "keys-moved/s")
				b.ReportMetric(float64(slots)/op.moving.Seconds(), "slots-moved/s")
				b.ReportMetric(p99(op.during.latencies).Seconds()*1000, "moving-p99-ms")
				b.ReportMetric(rate(ref), "redis-cli-keys-moved/s")
				b.ReportMetric(p99(ref.during.latencies).Seconds()*1000, "redis-cli-moving-p99-ms")
				b.ReportMetric(rate(op)/rate(ref), "keys/s-ratio")
				fmt.Printf("\nslot moves, 3 -> 5 shards x 2 redis-server nodes, %d keys of %d bytes, a cluster client writing one key a millisecond (%s)\n",
					ds.keys, ds.size, time.Now().Format(time.DateOnly))
				fmt.Printf("| %-29s | %8s | %8s | %7s | %7s | %13s | %11s | %13s | %22s |\n", "", "moving s", "total s", "keys/s", "slots/s",
					"writer p99 ms", "(before) ms", "writer errors", "redirects / 1000 SETs")
				for _, row := range []struct {
					name string
					s    scaleOut
				}{{"operator", op}, {"redis-cli --cluster rebalance", ref}} {
					fmt.Printf("| %-29s | %8.2f | %8.2f | %7.0f | %7.0f | %13.2f | %11.2f | %13d | %22.1f |\n", row.name, row.s.moving.Seconds(), row.s.took.Seconds(),
						rate(row.s), float64(slots)/row.s.moving.Seconds(), p99(row.s.during.latencies).Seconds()*1000,
						p99(row.s.quiet.latencies).Seconds()*1000, row.s.during.errors,
						1000*float64(row.s.redirects)/float64(max(1, len(row.s.during.latencies)+row.s.during.errors)))
				}
				fmt.Printf("operator / redis-cli, keys per second while moving: %.2f; keys moved %d and %d\n", rate(op)/rate(ref), op.moved, ref.moved)
				fmt.Printf("goal: writer p99 while moving within 1.5x of before (operator: %.2fx) at 2x redis-cli's keys/s or more (%.2fx)\n",
					p99(op.during.latencies).Seconds()/p99(op.quiet.latencies).Seconds(), rate(op)/rate(ref))
				paceTrade(b, cfg, c, ds, rate(ref))
				// Where the writer waits: the redis-servers' work, whose main threads its SETs queue behind.
				for _, side := range []struct {
					name string
					s    scaleOut
				}{{"the operator's", op}, {"redis-cli's", ref}} {
					fmt.Printf("during %s %.2f s: redis-servers %s; %s\n", side.name, side.s.took.Seconds(), side.s.servers.over(side.s.took),
						cores(side.s.tools, side.s.took))
				}
			}
		})
	}
}

// load writes ds's keys through cc, 1,000 a pipeline.
func load(b *testing.B, ctx context.Context, cc *goredis.ClusterClient, ds dataset) {
	value := strings.Repeat("v", ds.size)
	for i := 0; i < ds.keys; i += 1000 {
		_, err := cc.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for k := i; k < min(i+1000, ds.keys); k++ {
				p.Set(ctx, fmt.Sprintf("key:%d", k), value, 0)
			}
			return nil
		})
		require.NoError(b, err)
	}
}

// operatorScaleOut runs the operator binary over a RedisCluster of 3 shards holding ds and grows
// it to 5; moving is from the first status that says slots move until Ready with 5 shards.
func operatorScaleOut(b *testing.B, cfg *rest.Config, c client.WithWatch, ds dataset, flags ...string) scaleOut {
	ctx := context.Background()
	ns, err := testenv.CreateNamespace(ctx, c, "shards")
	require.NoError(b, err)
	node := runLocalNode(b, c, ns)
	op := startOperatorProcess(b, cfg, ns, flags...)

	rc := testenv.RedisCluster(ns, "orders", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: 2 * time.Second}}
	require.NoError(b, c.Create(ctx, rc))
	var firstMove time.Time
	shardsReady := func(n int) func(context.Context) bool {
		return func(ctx context.Context) bool {
			got := &cachev1.RedisCluster{}
			if c.Get(ctx, client.ObjectKeyFromObject(rc), got) != nil {
				return false
			}
			if p := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionProgressing); firstMove.IsZero() && p != nil &&
				p.Reason == cachev1.ReasonSlotsMoving && p.ObservedGeneration == got.Generation {
				firstMove = time.Now()
			}
			return got.Status.ObservedGeneration == got.Generation &&
				meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady) && len(got.Status.Shards) == n
		}
	}
	waitFor(b, op, "3 shards Ready", 5*time.Minute, 100*time.Millisecond, shardsReady(3))
	// nodeAddrs are the addresses of the nodes rc's status lists, as it says now.
	nodeAddrs := func() []string {
		require.NoError(b, c.Get(ctx, client.ObjectKeyFromObject(rc), rc))
		var addrs []string
		for _, n := range rc.Status.Nodes {
			addrs = append(addrs, node.Server(n.Name).Addr())
		}
		return addrs
	}
	addrs := nodeAddrs()
	pw := password(b, ctx, c, ns, "orders")
	cc, redirects := countingClusterClient(addrs, pw)
	defer cc.Close()
	load(b, ctx, cc, ds)

	var out scaleOut
	stopWriter := out.startWriter(ctx, cc, redirects)
	before := readServerTime(b, ctx, addrs, pw)
	operatorBefore, controlPlaneBefore := op.cpu(b), controlPlaneCPUNow(b)
	start := time.Now()
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Cluster.Shards = 5
	require.NoError(b, c.Patch(ctx, rc, patch))
	waitFor(b, op, "5 shards Ready", 20*time.Minute, 20*time.Millisecond, shardsReady(5))
	out.took = time.Since(start)
	require.False(b, firstMove.IsZero(), "no status said slots move")
	out.moving = time.Since(firstMove)
	stopWriter()

	out.servers = readServerTime(b, ctx, nodeAddrs(), pw).since(before)
	controlPlane := controlPlaneCPUNow(b).since(controlPlaneBefore)
	out.tools = map[string]time.Duration{"operator": op.cpu(b) - operatorBefore, "API server and etcd": controlPlane.apiserver + controlPlane.etcd}
	for _, sh := range rc.Status.Shards[3:] {
		primary := goredis.NewClient(&goredis.Options{Addr: node.Server(sh.Primary).Addr(), Password: pw, Protocol: 2, DisableIdentity: true})
		n, err := primary.DBSize(ctx).Result()
		_ = primary.Close()
		require.NoError(b, err)
		out.moved += n
	}
	total, err := cc.DBSize(ctx).Result()
	require.NoError(b, err)
	require.GreaterOrEqual(b, total, int64(ds.keys), "every key is still there")
	return out
}

// redisCliRebalance starts 10 redis-server nodes configured as the operator configures a
// cluster's, makes 3 shards of 2 with `redis-cli --cluster create`, loads ds, adds 2 more shards
// with `--cluster add-node` (their replicas with --cluster-slave) and moves slots to them with
// `--cluster rebalance --cluster-use-empty-masters`, as a user without the operator would.
func redisCliRebalance(b *testing.B, ds dataset) scaleOut {
	ctx := context.Background()
	const pw = "bench-password"
	conf := strings.Join([]string{"requirepass " + pw, "masterauth " + pw, "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
		"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000", "cluster-allow-replica-migration no"}, "\n") + "\n"
	dir := b.TempDir()
	var nodes []*redistest.Server
	for i := range 10 {
		s, err := redistest.StartIn(filepath.Join(dir, fmt.Sprint(i)), fmt.Sprintf("node-%d", i), conf)
		require.NoError(b, err)
		b.Cleanup(s.Kill)
		nodes = append(nodes, s)
	}
	var cliCPU time.Duration
	cli := func(args ...string) string {
		cmd := exec.Command("redis-cli", append([]string{"--cluster"}, args...)...)
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+pw) // not in argv
		out, err := cmd.CombinedOutput()
		require.NoError(b, err, "redis-cli --cluster %s: %s", strings.Join(args, " "), out)
		cliCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return string(out)
	}
	addrs := func(ss []*redistest.Server) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Addr())
		}
		return out
	}
	// Primaries 0-2 with replicas 3-5; later primaries 6-7 with replicas 8-9.
	cli(append(append([]string{"create"}, addrs(nodes[:6])...), "--cluster-replicas", "1", "--cluster-yes")...)
	cc, redirects := countingClusterClient(addrs(nodes[:6]), pw)
	defer cc.Close()
	agreed(b, ctx, nodes[:6], pw)
	load(b, ctx, cc, ds)

	var out scaleOut
	stopWriter := out.startWriter(ctx, cc, redirects)
	before := readServerTime(b, ctx, addrs(nodes), pw)
	cliCPU = 0
	start := time.Now()
	// Each add-node first checks that the nodes agree, and fails when the node added just before
	// is not yet known to all of them: a user waits for agreement after each, and so do we.
	for i := 6; i < 8; i++ {
		cli("add-node", nodes[i].Addr(), nodes[0].Addr())
		agreed(b, ctx, nodes[:i+1], pw)
	}
	for i := 8; i < 10; i++ {
		cli("add-node", nodes[i].Addr(), nodes[0].Addr(), "--cluster-slave", "--cluster-master-id", nodeID(b, ctx, nodes[i-2], pw))
		agreed(b, ctx, nodes[:i+1], pw)
	}
	moving := time.Now()
	cli("rebalance", nodes[0].Addr(), "--cluster-use-empty-masters")
	out.moving = time.Since(moving)
	out.took = time.Since(start)
	stopWriter()
	out.servers = readServerTime(b, ctx, addrs(nodes), pw).since(before)
	out.tools = map[string]time.Duration{"redis-cli": cliCPU}
	for _, s := range nodes[6:8] {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: pw, Protocol: 2, DisableIdentity: true})
		n, err := c.DBSize(ctx).Result()
		_ = c.Close()
		require.NoError(b, err)
		out.moved += n
	}
	return out
}

// agreed waits until every node knows every other and all agree on the slots (what redis-cli's
// own check asks before it moves anything).
func agreed(b *testing.B, ctx context.Context, nodes []*redistest.Server, pw string) {
	deadline := time.Now().Add(time.Minute)
	for {
		views := map[string]bool{}
		complete := true
		for _, s := range nodes {
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: pw, Protocol: 2, DisableIdentity: true})
			out, err := c.ClusterNodes(ctx).Result()
			_ = c.Close()
			require.NoError(b, err)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			complete = complete && len(lines) == len(nodes) && !strings.Contains(out, "handshake")
			var slots []string
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) > 8 {
					slots = append(slots, f[0]+strings.Join(f[8:], ","))
				}
			}
			slices.Sort(slots)
			views[strings.Join(slots, ";")] = true
		}
		if complete && len(views) == 1 {
			return
		}
		require.True(b, time.Now().Before(deadline), "the nodes did not agree on the cluster within a minute")
		time.Sleep(100 * time.Millisecond)
	}
}

func nodeID(b *testing.B, ctx context.Context, s *redistest.Server, pw string) string {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Password: pw, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	id, err := c.ClusterMyID(ctx).Result()
	require.NoError(b, err)
	return id
}

// cores says each process's CPU over a window of d, in cores.
func cores(cpu map[string]time.Duration, d time.Duration) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cpu)) {
		out = append(out, fmt.Sprintf("%s %.2f cores", name, cpu[name].Seconds()/d.Seconds()))
	}
	return strings.Join(out, ", ")
}

// tradedPaces are the slot move paces (--slot-move-keys-per-migrate, --slot-move-share) whose
// trade of speed for the writer's p99 the benchmark prints besides the default's; BENCH_SMOKE=1:
// one, to keep the path working.
func tradedPaces() []shards.Pace {
	return sized([]shards.Pace{{KeysPerMigrate: 100, Share: 0.5}, {KeysPerMigrate: 25, Share: 0.5}, {KeysPerMigrate: 100, Share: 0.25}, {KeysPerMigrate: 25, Share: 0.25}},
		[]shards.Pace{{KeysPerMigrate: 25, Share: 0.5}})
}

// paceTrade scales out again at each traded pace and prints what each costs the writer and the
// move's speed, against redis-cli's keys per second (refRate).
func paceTrade(b *testing.B, cfg *rest.Config, c client.WithWatch, ds dataset, refRate float64) {
	paces := tradedPaces()
	fmt.Printf("the trade, one scale-out each (default %+v):\n| %-28s | %7s | %8s | %13s | %11s | %6s |\n", shards.DefaultPace,
		"keys per MIGRATE, share", "keys/s", "/ redis-cli", "writer p99 ms", "(before) ms", "ratio")
	for _, pace := range paces {
		s := operatorScaleOut(b, cfg, c, ds, fmt.Sprintf("--slot-move-keys-per-migrate=%d", pace.KeysPerMigrate), fmt.Sprintf("--slot-move-share=%v", pace.Share))
		rate := float64(s.moved) / s.moving.Seconds()
		during, quiet := p99(s.during.latencies), p99(s.quiet.latencies)
		fmt.Printf("| %-28s | %7.0f | %8.2fx | %13.2f | %11.2f | %5.2fx |\n", fmt.Sprintf("%d, %v", pace.KeysPerMigrate, pace.Share),
			rate, rate/refRate, during.Seconds()*1000, quiet.Seconds()*1000, during.Seconds()/quiet.Seconds())
	}
}
