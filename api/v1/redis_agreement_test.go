package v1_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/blang/semver/v4"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/redistest"
)

// TestAdmissionAgreesWithRedis is a differential test of spec.config: for every directive of the
// allow-list, values generated from its grammar (both sides of each bound, every unit in every
// case, signs, leading zeros, spaces, quotes, overflow, odd forms) go to the API server (a dry
// run) and to a real redis-server, started with the line the operator writes for the value
// (resources.ConfigLine) and then given a write. The two must agree: the API takes exactly the
// values with which Redis starts and takes writes. Where the API takes less on purpose (a value
// Redis takes and then changes or cannot use), the directive's Narrower says why, and the test
// prints each such value; the API never takes a value Redis refuses.
//
// Redis is the redis-server on this machine (7.0.15 here): directives newer than it are not
// tried, and say so.
func TestAdmissionAgreesWithRedis(t *testing.T) {
	version, err := redistest.Version()
	require.NoError(t, err)
	have := semver.MustParse(version)

	type verdict struct {
		directive, value string
		api              error
		redis            error
	}
	var (
		mu       sync.Mutex
		verdicts []verdict
		wg       sync.WaitGroup
		slots    = make(chan struct{}, 8)
	)
	tried := 0
	for _, d := range cachev1.ConfigDirectives {
		if d.Introduced != "" && have.LT(semver.MustParse(d.Introduced+".0")) {
			t.Logf("%s: not tried, it needs Redis %s and this redis-server is %s", d.Name, d.Introduced, version)
			continue
		}
		for _, v := range valuesOf(d) {
			tried++
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				got := verdict{directive: d.Name, value: v, api: admit(object(t, "RedisCluster", "agree", configSpec(d.Name, v)))}
				got.redis = redisTakes(t, d.Name, v)
				mu.Lock()
				verdicts = append(verdicts, got)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	slices.SortFunc(verdicts, func(a, b verdict) int { return strings.Compare(a.directive+" "+a.value, b.directive+" "+b.value) })

	narrower := map[string]string{}
	for _, d := range cachev1.ConfigDirectives {
		narrower[d.Name] = d.Narrower
	}
	var exceptions []string
	taken := 0
	for _, v := range verdicts {
		switch {
		case v.api == nil && v.redis == nil:
			taken++
		case v.api == nil:
			t.Errorf("%s %q: the API takes it, Redis %s does not: %v", v.directive, v.value, version, v.redis)
		case v.redis == nil && strings.ContainsFunc(v.value, unicode.IsControl):
			exceptions = append(exceptions, fmt.Sprintf("  %s %q: the API takes printable characters only; Redis reads a tab as a space", v.directive, v.value))
		case v.redis == nil && narrower[v.directive] == "":
			t.Errorf("%s %q: Redis %s takes it, the API refuses it: %v", v.directive, v.value, version, v.api)
		case v.redis == nil:
			exceptions = append(exceptions, fmt.Sprintf("  %s %q: %s", v.directive, v.value, narrower[v.directive]))
		}
	}
	fmt.Printf("\nspec.config against redis-server %s: %d values of %d directives, %d taken by both, %d refused by both, %d known exceptions (the API takes less):\n%s\n",
		version, tried, len(cachev1.ConfigDirectives), taken, len(verdicts)-taken-len(exceptions), len(exceptions), strings.Join(exceptions, "\n"))
	assert.Equal(t, tried, len(verdicts))
}

// redisTakes starts redis-server with the directive's line as the operator writes it and
// writes a key: nil when Redis starts and takes the write.
func redisTakes(t *testing.T, directive, value string) error {
	conf := resources.ConfigLine(directive, value) + "\n"
	if strings.HasPrefix(directive, "cluster-") {
		conf = "cluster-enabled yes\n" + conf
	}
	server, err := redistest.StartIn(t.TempDir(), "agree", "save \"\"\n"+conf)
	if err != nil {
		return err
	}
	defer server.Kill()
	c := goredis.NewClient(&goredis.Options{Addr: server.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := "k"
	if strings.HasPrefix(directive, "cluster-") {
		// A node of no cluster serves no slot: give it them all.
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
		if err := waitClusterOK(ctx, c); err != nil {
			return err
		}
	}
	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		return fmt.Errorf("it starts, and refuses a write: %w", err)
	}
	return nil
}

func waitClusterOK(ctx context.Context, c *goredis.Client) error {
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the one-node cluster is not ok (%s): %w", info, errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// valuesOf are the values the test tries for a directive: its example and counter-example,
// then its grammar's edges.
func valuesOf(d cachev1.ConfigDirective) []string {
	values := []string{d.Example, d.Bad, "", " ", `""`, "'x'", "\\x41"}
	switch d.Kind {
	case cachev1.ConfigBool:
		values = append(values, "yes", "no", "YES", "No", "yEs", "true", "1", "yes ", " no", `"yes"`, "y")
	case cachev1.ConfigInt:
		values = append(values, intEdges(big.NewInt(d.Min), big.NewInt(d.Max))...)
	case cachev1.ConfigSize:
		values = append(values, sizeEdges(d)...)
	case cachev1.ConfigEnum:
		for _, v := range d.Values {
			values = append(values, v, strings.ToUpper(v), v+" ", `"`+v+`"`)
		}
		values = append(values, "sometimes")
	case cachev1.ConfigPattern:
		values = append(values, patternProbes[d.Name]...)
	}
	return dedupe(values)
}

// intEdges are both sides of [lo, hi], 64-bit overflow, and the forms string2ll refuses.
func intEdges(lo, hi *big.Int) []string {
	one := big.NewInt(1)
	int64Max := new(big.Int).SetUint64(1<<63 - 1)
	int64Min := new(big.Int).Neg(new(big.Int).Add(int64Max, one))
	uint64Max := new(big.Int).SetUint64(1<<64 - 1)
	var values []string
	for _, n := range []*big.Int{lo, hi, new(big.Int).Sub(lo, one), new(big.Int).Add(hi, one), int64Max, new(big.Int).Add(int64Max, one),
		int64Min, new(big.Int).Sub(int64Min, one), uint64Max, new(big.Int).Add(uint64Max, one), big.NewInt(0), big.NewInt(1), big.NewInt(-1)} {
		values = append(values, n.String())
	}
	return append(values, "-0", "007", "+1", "1.5", "1e3", "0x10", " 1", "1 ", "1\t", "1kb", "one", "--1", "1-", "00", "99999999999999999999999")
}

// sizeEdges are both sides of the bounds in each unit, every unit in several cases, and forms
// memtoull refuses.
func sizeEdges(d cachev1.ConfigDirective) []string {
	lo, hi := new(big.Int).SetUint64(d.MinBytes), new(big.Int).SetUint64(d.MaxBytes)
	one := big.NewInt(1)
	values := []string{lo.String(), hi.String(), new(big.Int).Add(hi, one).String(), "0", "1", "0064mb", "1k", "1K", "1kb", "1KB", "1Kb", "1kB",
		"1m", "1M", "1mb", "1MB", "1g", "1G", "1gb", "1GB", "1b", "1B", "1t", "1tb", "1.5mb", "-1", "+1", " 1", "1 ", "1 mb", "mb", "k", "b", "1bb", "1mbb",
		"0%", "1%", "50%", "100%", "101%", "05%", "-1%", "+5%", "5 %", "%",
		"000000000000000000000000000000001", "99999999999999999999999"}
	if d.MinBytes > 0 {
		values = append(values, new(big.Int).Sub(lo, one).String())
	}
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"k", 1000}, {"kb", 1024}, {"M", 1000 * 1000}, {"mB", 1 << 20}, {"g", 1000 * 1000 * 1000}, {"GB", 1 << 30}} {
		unit := big.NewInt(u.bytes)
		top := new(big.Int).Quo(hi, unit)
		bottom := new(big.Int).Quo(new(big.Int).Add(lo, new(big.Int).Sub(unit, one)), unit)
		values = append(values, top.String()+u.name, new(big.Int).Add(top, one).String()+u.name, bottom.String()+u.name)
		if bottom.Sign() > 0 {
			values = append(values, new(big.Int).Sub(bottom, one).String()+u.name)
		}
	}
	return values
}

// patternProbes are odd forms of the directives whose grammar is a pattern.
var patternProbes = map[string][]string{
	"save": {"3600 1", "3600 1 300 100", "3600 1 300", "0 1", "1 0", "-1 1", "1 -1", "1 -0", "+1 +1", "007 1", "1 007", "3600  1", " 3600 1",
		"3600 1 ", "3600\t1", "1.5 1", "1e3 1", "99999999999 1", "9999999999 1", "1 9999999999", "1 99999999999", "3600 1 300 100 60 10000",
		`"" 3600 1`, "a b"},
	"client-output-buffer-limit": {"normal 0 0 0", "replica 256mb 64mb 60", "slave 256mb 64mb 60", "pubsub 32mb 8mb 60", "master 0 0 0",
		"NORMAL 0 0 0", "Pubsub 32MB 8Mb 60", "normal 0 0", "normal 0 0 0 pubsub", "normal 1k 1kb +60", "normal 0 0 -1", "normal 0 0 -0",
		"normal -1 0 0", "normal 1t 0 0", "normal 0 0 1.5", "normal 0 0 99999999999", "normal 0 0 9999999999", "normal  0 0 0",
		"normal 0 0 0 replica 512mb 128mb 60 pubsub 32mb 8mb 60", "normal mb 0 0", "normal 0 0 007", "normal 0 0 ", " normal 0 0 0"},
	"notify-keyspace-events": {"KEA", "Ex", "K", "E", "A", "x", "KA", "EA", "Kg$lshzxetmdn", "KEAn", "Ke", "KEz", "KE", "kea", "Ex ",
		"all", "Ex!", "KEAKEA", "AK", "xE", "gK", "KEKE"},
	"latency-tracking-info-percentiles": {"50", "50 99 99.9", "0", "100", "100.0", "100.1", "101", "-1", "-0", "0.0", "99.99999",
		"50  99", " 50", "50 ", "1e2", ".5", "5.", "+50", "050", "50.0000000000000001", "inf", "nan", "0x10", "99.9 99.9", "100.", "100.0000000000000001", "0100", "-0.0", "-.0", "-1e-9"},
}

func dedupe(values []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// TestSpecVersionDecidesWhatRedisReads: spec.version is 7.0 or newer (what the operator's own
// user and checks need), and a directive newer than it is refused naming the version that
// introduced it; realistic edges of what is valid stay accepted.
func TestSpecVersionDecidesWhatRedisReads(t *testing.T) {
	runCases(t, "RedisCluster", []admissionCase{
		{"Redis 6.2, whose ACLs lack what the operator's user needs", "replicas: 3\nversion: '6.2'", "Redis 7.0 or newer is required"},
		{"Redis 6.0", "replicas: 3\nversion: '6.0.20'", "Redis 7.0 or newer is required"},
		{"Redis 7.0", "replicas: 3\nversion: '7.0'", ""},
		{"Redis 10", "replicas: 3\nversion: '10.0'", ""},
		{"a 7.2 directive on 7.0", "replicas: 3\nversion: '7.0.15'\nconfig: {set-max-listpack-entries: '128'}",
			"spec.config.set-max-listpack-entries needs Redis 7.2 or newer; spec.version is 7.0.15"},
		{"a 7.2 directive on 7.2", "replicas: 3\nversion: '7.2'\nconfig: {set-max-listpack-value: 64kb}", ""},
		{"a 7.2 directive on 8.0", "replicas: 3\nversion: '8.0'\nconfig: {set-max-listpack-entries: '128'}", ""},
		{"a 7.2 directive on the default version", "replicas: 3\nconfig: {set-max-listpack-entries: '128'}", ""},
		{"selectors and read/write key patterns on 7.0", "replicas: 3\nversion: '7.0'\n" +
			"users: [{name: app, passwordSecretRef: {name: pw}, rules: '%R~* %W~app:* &events:* (~temp:* +set) +@read'}]", ""},
		{"no limit", "replicas: 3\nconfig: {maxmemory: '0'}", ""},
		{"no limit, with a unit", "replicas: 3\nconfig: {maxmemory: 0mb}", ""},
		{"the smallest limit", "replicas: 3\nconfig: {maxmemory: 1mb}", ""},
		{"a limit Redis cannot work under", "replicas: 3\nconfig: {maxmemory: 512kb}", "spec.config.maxmemory is 0 (no limit) or a size in bytes from 1048576"},
		{"no snapshots", "replicas: 3\nconfig: {save: '\"\"'}", ""},
		{"a snapshot every 0 seconds", "replicas: 3\nconfig: {save: '0 1'}", "spec.config.save is pairs of seconds (1 or more)"},
		{"keyspace events with no class", "replicas: 3\nconfig: {notify-keyspace-events: KE}", "spec.config.notify-keyspace-events is the letters"},
		{"keyspace event classes with nowhere to go", "replicas: 3\nconfig: {notify-keyspace-events: A}", "spec.config.notify-keyspace-events is the letters"},
		{"an integer with a leading zero", "replicas: 3\nconfig: {timeout: '0300'}", "no leading zero"},
		{"an integer at the top of a 64-bit range", "replicas: 3\nconfig: {slowlog-max-len: '9223372036854775807'}", ""},
		{"one past it", "replicas: 3\nconfig: {slowlog-max-len: '9223372036854775808'}", "spec.config.slowlog-max-len is an integer from 0 to 9223372036854775807"},
		{"a size below Redis's minimum", "replicas: 3\nconfig: {client-query-buffer-limit: 1000kb}", "spec.config.client-query-buffer-limit is a size in bytes from 1048576"},
		{"a size in capitals", "replicas: 3\nconfig: {client-query-buffer-limit: 2GB}", ""},
		{"yes in capitals", "replicas: 3\nconfig: {lazyfree-lazy-eviction: 'YES'}", ""},
		{"a policy in capitals", "replicas: 3\nconfig: {maxmemory-policy: ALLKEYS-LRU}", ""},
		{"a tab in a value", "replicas: 3\nconfig: {save: \"3600\\t1\"}", "spec.config.save"},
		{"active defrag on the operator's images", "replicas: 3\nconfig: {activedefrag: 'yes'}", "spec.config.activedefrag yes needs a Redis built with its own jemalloc"},
		{"active defrag on an image of the user's", "replicas: 3\nimage: redis:7.2\nconfig: {activedefrag: 'yes'}", ""},
		{"too few clients for the operator and the replicas", "replicas: 3\nconfig: {maxclients: '4'}", "spec.config.maxclients is an integer from 16"},
	})
}
