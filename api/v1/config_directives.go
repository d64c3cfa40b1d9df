package v1

import "fmt"

// The redis.conf directives spec.config takes: an allow-list, each directive with the grammar of
// its value as Redis reads it. This table is the one definition: `make generate` renders it into
// the CEL rules on RedisConfig and RedisClusterSpec (zz_generated.admission.go and the generated
// block of rediscluster_types.go, by hack/admissionrules) and into docs/config.md; the operator
// renders each value into redis.conf with ConfigLine; and a differential test (make test) sends
// values generated from each grammar both to the API server and to a real redis-server, which
// must agree.
//
// The grammars are Redis 7.0.15's (src/config.c, util.c memtoull, util.c string2ll), the version
// this project tests with; 7.2 and 7.4 read these directives the same way (7.4 also caps
// maxmemory-samples at 64, as the API does).
//
// Why an allow-list: Redis has more directives than any deny-list keeps up with, and some of them
// undo what the operator promises (users and passwords, addresses the cluster bus assumes, code
// loaded into Redis). A directive that is not here is refused with a message that says so.

// ConfigValueKind is the grammar of a directive's value.
type ConfigValueKind string

const (
	// ConfigBool: yes or no, in any case.
	ConfigBool ConfigValueKind = "bool"
	// ConfigInt: a decimal integer as Redis's string2ll reads it (no sign but a leading -, no
	// leading zero, no space), within [Min, Max].
	ConfigInt ConfigValueKind = "int"
	// ConfigSize: bytes as Redis's memtoull reads them (digits, then b, k, kb, m, mb, g or gb in
	// any case; k is 1000 and kb 1024), within [MinBytes, MaxBytes]; with Percent, also 0% to
	// 100%.
	ConfigSize ConfigValueKind = "size"
	// ConfigEnum: one of Values, in any case.
	ConfigEnum ConfigValueKind = "enum"
	// ConfigPattern: a value matching Pattern, described by Describe.
	ConfigPattern ConfigValueKind = "pattern"
)

// ConfigDirective is one redis.conf directive spec.config may set.
type ConfigDirective struct {
	Name string
	Kind ConfigValueKind
	// Min and Max bound a ConfigInt.
	Min, Max int64
	// MinBytes and MaxBytes bound a ConfigSize.
	MinBytes, MaxBytes uint64
	// Percent lets a ConfigSize be a percentage, 0% to 100% (of maxmemory).
	Percent bool
	// ZeroAllowed lets a ConfigSize be 0 below MinBytes (0 is no limit).
	ZeroAllowed bool
	// Values of a ConfigEnum.
	Values []string
	// Pattern (an RE2 expression matching the whole value) and Describe (what it allows, for
	// the refusal's message) of a ConfigPattern.
	Pattern, Describe string
	// Args: the value is a list of arguments separated by single spaces (save,
	// client-output-buffer-limit); each is written to redis.conf as one argument.
	Args bool
	// Narrower says why the API takes less than Redis does: values Redis takes and then
	// changes or cannot use. Empty when the two agree.
	Narrower string
	// NeedsStorage: the directive tunes the append-only file, which a RedisCluster keeps only
	// with spec.storage.
	NeedsStorage bool
	// NotInClusterMode: Redis Cluster does not read it.
	NotInClusterMode bool
	// Example is a value Redis takes; Bad is one the API refuses.
	Example, Bad string
	// Since is the first Redis version that knows the directive, when later than MinVersion:
	// an older spec.version is refused.
	Since string
	// Introduced is the Redis version that added the directive (docs/config.md's "since").
	Introduced string
}

// MinVersion is the oldest Redis a RedisCluster runs: the operator's own ACL user needs Redis 6.2
// (channel rules, CLIENT UNPAUSE), its checks read several INFO sections in one call and cluster
// mode forms the cluster with CLUSTER ADDSLOTSRANGE, both Redis 7.0.
const MinVersion = "7.0"

// versionLess says whether major.minor version a is older than b.
func versionLess(a, b string) bool {
	var am, an, bm, bn int
	_, _ = fmt.Sscanf(a, "%d.%d", &am, &an)
	_, _ = fmt.Sscanf(b, "%d.%d", &bm, &bn)
	return am < bm || (am == bm && an < bn)
}

const (
	intMax   = 1<<31 - 1
	intMin   = -1 << 31
	uintMax  = 1<<32 - 1
	int64Max = 1<<63 - 1
	// uint64Max is Redis's ULLONG_MAX.
	uint64Max = 1<<64 - 1
	// ConfigIntPattern is string2ll's grammar: 0, or a non-zero digit after an optional minus.
	ConfigIntPattern = `^(0|-?[1-9][0-9]*)$`
	// ConfigSizePattern is memtoull's grammar: digits, then b, k, kb, m, mb, g or gb in any case.
	// Redis reads no digits as 0 (an empty value, "", or a unit alone).
	ConfigSizePattern = `^(""|[0-9]*([kKmMgG][bB]?|[bB])?)$`
	// ConfigPercentPattern is a percentage Redis takes: string2ll's digits from 0 to 100, then %.
	ConfigPercentPattern = `^([0-9]|[1-9][0-9]|100)%$`
	// MinMaxMemory is the smallest maxmemory but 0 (no limit) the API takes: an empty Redis
	// 7.0.15 holds 0.9 MB before its first key (used_memory at start), so with less it refuses
	// every write.
	MinMaxMemory = 1 << 20
)

func boolDirective(name, introduced string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigBool, Example: "yes", Bad: "true", Introduced: introduced}
}

func intDirective(name string, lo, hi int64, example string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigInt, Min: lo, Max: hi, Example: example, Bad: "1.5"}
}

func sizeDirective(name string, lo, hi uint64, example string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigSize, MinBytes: lo, MaxBytes: hi, Example: example, Bad: "-1mb"}
}

func enumDirective(name, example string, values ...string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigEnum, Values: values, Example: example, Bad: "sometimes"}
}

// since marks a directive introduced in Redis 7.0 or later (spec.version is at least
// MinVersion, so a newer one is also a rule).
func since(d ConfigDirective, version string) ConfigDirective {
	d.Introduced = version
	if versionLess(MinVersion, version) {
		d.Since = version
	}
	return d
}

// aof marks a directive of the append-only file: it needs spec.storage.
func aof(d ConfigDirective) ConfigDirective {
	d.NeedsStorage = true
	return d
}

func introduced(d ConfigDirective, version string) ConfigDirective {
	d.Introduced = version
	return d
}

// Explanations the directives share.
const (
	sizeOverflow  = "above 18446744073709551615 bytes, Redis 7.0 saturates the size or wraps it around (17179869184gb is read as 0, no limit)"
	emptyArgument = "an empty argument (a space at either end, or two together), which Redis reads as 0 or none"
)

// outputBufferClass is one class of client-output-buffer-limit: the class (any case), the hard
// and soft limits as sizes, and the seconds as strtoll reads them (0 or more).
const outputBufferClass = `(?i:normal|replica|slave|pubsub) [0-9]*([kKmMgG][bB]?|[bB])? [0-9]*([kKmMgG][bB]?|[bB])? (\+?[0-9]{1,10}|-0+)`

// percentile is a number from 0 to 100 as strtod reads it, without exponent or hexadecimal.
const percentile = `(\+?(0*100(\.0*)?|0*[0-9]{1,2}(\.[0-9]*)?|\.[0-9]+)|-0*(\.0*)?)`

// keyspaceEvents is notify-keyspace-events's grammar: its class letters in any order, or ""
// for none; and, when not none, at least one of K and E (where events go) and at least one
// class of events (what goes), or Redis delivers nothing.
const keyspaceEvents = `^(""|[KEg$lshzxetmdnA]*([KE][KEg$lshzxetmdnA]*[g$lshzxetmdnA]|[g$lshzxetmdnA][KEg$lshzxetmdnA]*[KE])[KEg$lshzxetmdnA]*)?$`

// ConfigDirectives are the tunables spec.config takes, grouped by concern.
var ConfigDirectives = []ConfigDirective{
	// Memory and eviction.
	{Name: "maxmemory", Kind: ConfigSize, MinBytes: MinMaxMemory, ZeroAllowed: true, MaxBytes: uint64Max, Example: "256mb", Bad: "1kb",
		Narrower: "below 1mb (1048576 bytes) but 0, Redis takes it and refuses every write once it holds its own 0.9 MB; " + sizeOverflow},
	enumDirective("maxmemory-policy", "allkeys-lru", "volatile-lru", "allkeys-lru", "volatile-lfu", "allkeys-lfu",
		"volatile-random", "allkeys-random", "volatile-ttl", "noeviction"),
	{Name: "maxmemory-samples", Kind: ConfigInt, Min: 1, Max: 64, Example: "5", Bad: "65",
		Narrower: "Redis 7.0 takes up to 2147483647 and samples that many keys on its stack at each eviction (Redis 7.4 caps it at 64, as the API does)"},
	introduced(ConfigDirective{Name: "maxmemory-eviction-tenacity", Kind: ConfigInt, Min: 0, Max: 100, Example: "10", Bad: "101"}, "6.2"),
	since(ConfigDirective{Name: "maxmemory-clients", Kind: ConfigSize, MinBytes: 0, MaxBytes: int64Max, Percent: true, Example: "5%", Bad: "five",
		Narrower: "above 18446744073709551615 bytes, Redis 7.0 saturates the size to 2^64-1 and then reads it as -1: a percentage (1%)"}, "7.0"),
	intDirective("lfu-log-factor", 0, intMax, "10"),
	intDirective("lfu-decay-time", 0, intMax, "1"),
	intDirective("active-expire-effort", 1, 10, "1"),
	boolDirective("replica-ignore-maxmemory", ""),

	// Persistence: the snapshot schedule and fsync. appendonly itself follows spec.storage.
	{Name: "save", Kind: ConfigPattern, Args: true,
		Pattern:  `^(""|\+?0*[1-9][0-9]{0,9} (\+?[0-9]{1,10}|-0+)( \+?0*[1-9][0-9]{0,9} (\+?[0-9]{1,10}|-0+))*)?$`,
		Describe: `pairs of seconds (1 or more) and changes ("3600 1 300 100"), or "" for no snapshots`, Example: "3600 1 300 100", Bad: "3600",
		Narrower: "numbers of more than 10 digits: Redis takes them and cuts the count of changes to 32 bits; " + emptyArgument},
	aof(enumDirective("appendfsync", "everysec", "always", "everysec", "no")),
	aof(boolDirective("no-appendfsync-on-rewrite", "")),
	aof(intDirective("auto-aof-rewrite-percentage", 0, intMax, "100")),
	aof(sizeDirective("auto-aof-rewrite-min-size", 0, int64Max, "64mb")),
	aof(boolDirective("aof-load-truncated", "")),
	aof(boolDirective("aof-use-rdb-preamble", "")),
	aof(since(boolDirective("aof-timestamp-enabled", ""), "7.0")),
	aof(boolDirective("aof-rewrite-incremental-fsync", "")),
	boolDirective("rdb-save-incremental-fsync", ""),
	boolDirective("rdbcompression", ""),
	boolDirective("rdbchecksum", ""),
	boolDirective("stop-writes-on-bgsave-error", ""),
	boolDirective("rdb-del-sync-files", ""),
	introduced(enumDirective("sanitize-dump-payload", "no", "no", "yes", "clients"), "6.2"),

	// Clients: timeouts, keepalive, limits.
	intDirective("timeout", 0, intMax, "300"),
	intDirective("tcp-keepalive", 0, intMax, "300"),
	intDirective("tcp-backlog", 0, intMax, "511"),
	{Name: "maxclients", Kind: ConfigInt, Min: 16, Max: uintMax, Example: "10000", Bad: "1",
		Narrower: "fewer than 16 clients: Redis takes 1 and up, and then refuses the operator's checks and watch, the exporter, the probes or the replicas' links"},
	since(intDirective("busy-reply-threshold", 0, int64Max, "5000"), "7.0"),
	intDirective("lua-time-limit", 0, int64Max, "5000"),
	{Name: "databases", Kind: ConfigInt, NotInClusterMode: true, Min: 1, Max: 1 << 16, Example: "16", Bad: "0",
		Narrower: "more than 65536 databases: Redis takes up to 2147483647 and allocates each at start, 448 bytes apiece (470 MB before the first key at 1048576; at the top, more than a machine has)"},
	intDirective("tracking-table-max-keys", 0, int64Max, "1000000"),
	intDirective("acllog-max-len", 0, int64Max, "128"),
	{Name: "client-output-buffer-limit", Kind: ConfigPattern, Args: true,
		Pattern:  `^` + outputBufferClass + `( ` + outputBufferClass + `)*$`,
		Describe: "classes (normal, replica, pubsub) each with a hard limit, a soft limit and seconds (\"pubsub 32mb 8mb 60\")",
		Example:  "normal 0 0 0 replica 512mb 128mb 60 pubsub 32mb 8mb 60", Bad: "pubsub 32mb",
		Narrower: "seconds of more than 10 digits, which Redis cuts to 32 bits; " + emptyArgument},
	sizeDirective("client-query-buffer-limit", 1<<20, int64Max, "1gb"),
	sizeDirective("proto-max-bulk-len", 1<<20, int64Max, "512mb"),

	// Replication tuning (who replicates whom is the operator's).
	sizeDirective("repl-backlog-size", 1, int64Max, "64mb"),
	intDirective("repl-backlog-ttl", 0, int64Max, "3600"),
	intDirective("repl-timeout", 1, intMax, "60"),
	intDirective("repl-ping-replica-period", 1, intMax, "10"),
	boolDirective("repl-disable-tcp-nodelay", ""),
	enumDirective("repl-diskless-load", "disabled", "disabled", "on-empty-db", "swapdb"),
	boolDirective("replica-serve-stale-data", ""),
	boolDirective("replica-lazy-flush", ""),

	// Lazy freeing.
	boolDirective("lazyfree-lazy-eviction", ""),
	boolDirective("lazyfree-lazy-expire", ""),
	boolDirective("lazyfree-lazy-server-del", ""),
	boolDirective("lazyfree-lazy-user-del", ""),
	boolDirective("lazyfree-lazy-user-flush", "6.2"),

	// I/O threads.
	intDirective("io-threads", 1, 128, "2"),
	boolDirective("io-threads-do-reads", ""),

	// Keyspace notifications.
	{Name: "notify-keyspace-events", Kind: ConfigPattern, Pattern: keyspaceEvents,
		Describe: `the letters of the keyspace event classes with K or E (KEA, Ex), or "" for none`, Example: "Ex", Bad: "all",
		Narrower: "classes without K or E (A, x), or K or E without a class: Redis takes them and delivers no event"},

	// Slowlog and latency monitoring.
	intDirective("slowlog-log-slower-than", -1, int64Max, "10000"),
	intDirective("slowlog-max-len", 0, int64Max, "128"),
	intDirective("latency-monitor-threshold", 0, int64Max, "100"),
	since(boolDirective("latency-tracking", ""), "7.0"),
	since(ConfigDirective{Name: "latency-tracking-info-percentiles", Kind: ConfigPattern, Args: true,
		Pattern:  `^(""|` + percentile + `( ` + percentile + `)*)?$`,
		Describe: `percentiles from 0 to 100 separated by spaces ("50 99 99.9"), or "" for none`, Example: "50 99 99.9", Bad: "p99",
		Narrower: "percentiles with an exponent (1e2), in hexadecimal, or just above 100 where a double rounds them to 100: Redis reads any number strtod takes; " + emptyArgument}, "7.0"),

	// Encodings of small values.
	since(intDirective("hash-max-listpack-entries", 0, int64Max, "128"), "7.0"),
	since(sizeDirective("hash-max-listpack-value", 0, int64Max, "64"), "7.0"),
	intDirective("hash-max-ziplist-entries", 0, int64Max, "128"),
	sizeDirective("hash-max-ziplist-value", 0, int64Max, "64"),
	since(intDirective("list-max-listpack-size", intMin, intMax, "-2"), "7.0"),
	intDirective("list-max-ziplist-size", intMin, intMax, "-2"),
	intDirective("list-compress-depth", 0, intMax, "0"),
	intDirective("set-max-intset-entries", 0, int64Max, "512"),
	since(ConfigDirective{Name: "set-max-listpack-entries", Kind: ConfigInt, Min: 0, Max: int64Max, Example: "128", Bad: "-1"}, "7.2"),
	since(ConfigDirective{Name: "set-max-listpack-value", Kind: ConfigSize, MinBytes: 0, MaxBytes: int64Max, Example: "64", Bad: "-1"}, "7.2"),
	since(intDirective("zset-max-listpack-entries", 0, int64Max, "128"), "7.0"),
	since(sizeDirective("zset-max-listpack-value", 0, int64Max, "64"), "7.0"),
	intDirective("zset-max-ziplist-entries", 0, int64Max, "128"),
	sizeDirective("zset-max-ziplist-value", 0, int64Max, "64"),
	sizeDirective("hll-sparse-max-bytes", 0, int64Max, "3000"),
	sizeDirective("stream-node-max-bytes", 0, int64Max, "4kb"),
	intDirective("stream-node-max-entries", 0, int64Max, "100"),
	boolDirective("activerehashing", ""),

	// Active defragmentation: it needs Redis built with its own jemalloc, which the operator's
	// images (Debian's redis-server) are not; yes needs spec.image (a rule on RedisClusterSpec).
	{Name: "activedefrag", Kind: ConfigBool, Example: "no", Bad: "on"},
	sizeDirective("active-defrag-ignore-bytes", 1, int64Max, "100mb"),
	intDirective("active-defrag-threshold-lower", 0, 1000, "10"),
	intDirective("active-defrag-threshold-upper", 0, 1000, "100"),
	intDirective("active-defrag-cycle-min", 1, 99, "1"),
	intDirective("active-defrag-cycle-max", 1, 99, "25"),
	intDirective("active-defrag-max-scan-fields", 1, int64Max, "1000"),
	boolDirective("jemalloc-bg-thread", ""),

	// The server's background work and logging.
	{Name: "hz", Kind: ConfigInt, Min: 1, Max: 500, Example: "10", Bad: "0",
		Narrower: "Redis takes 0 to 2147483647 and silently runs at 1 to 500"},
	boolDirective("dynamic-hz", ""),
	enumDirective("loglevel", "notice", "debug", "verbose", "notice", "warning"),
	boolDirective("disable-thp", "6.2"),

	// Cluster mode: directives named cluster-* are refused without spec.cluster.
	{Name: "cluster-require-full-coverage", Kind: ConfigBool, Example: "no", Bad: "0"},
	{Name: "cluster-allow-reads-when-down", Kind: ConfigBool, Example: "yes", Bad: "0"},
	since(ConfigDirective{Name: "cluster-allow-pubsubshard-when-down", Kind: ConfigBool, Example: "yes", Bad: "0"}, "7.0"),
	{Name: "cluster-replica-validity-factor", Kind: ConfigInt, Min: 0, Max: intMax, Example: "10", Bad: "-1"},
	since(ConfigDirective{Name: "cluster-link-sendbuf-limit", Kind: ConfigSize, MinBytes: 0, MaxBytes: uint64Max, Example: "64mb", Bad: "lots",
		Narrower: sizeOverflow}, "7.0"),
}

// ConfigAliases are directives that name the same setting: at most one of each pair may be set.
var ConfigAliases = [][2]string{
	{"hash-max-listpack-entries", "hash-max-ziplist-entries"},
	{"hash-max-listpack-value", "hash-max-ziplist-value"},
	{"list-max-listpack-size", "list-max-ziplist-size"},
	{"zset-max-listpack-entries", "zset-max-ziplist-entries"},
	{"zset-max-listpack-value", "zset-max-ziplist-value"},
	{"busy-reply-threshold", "lua-time-limit"},
}

// ConfigOwnedBySpec are directives a spec field sets, with the field to use instead.
var ConfigOwnedBySpec = map[string]string{
	"min-replicas-to-write": "spec.failover.minReplicasToWrite",
	"min-slaves-to-write":   "spec.failover.minReplicasToWrite",
	"min-replicas-max-lag":  "spec.failover.maxReplicaLag",
	"min-slaves-max-lag":    "spec.failover.maxReplicaLag",
	"cluster-node-timeout":  "spec.cluster.nodeTimeout",
	"appendonly":            "spec.storage (a RedisCluster with storage keeps an append-only file)",
	"requirepass":           "spec.auth",
	"masterauth":            "spec.auth",
	"user":                  "spec.users",
	"tls-auth-clients":      "spec.tls.clientAuth",
}

// ConfigRunsCode are directives that load code into Redis or open its DEBUG, MODULE and
// protected CONFIG commands to every client: a RedisCluster must not be a way to run code.
var ConfigRunsCode = []string{"loadmodule", "enable-module-command", "enable-debug-command", "enable-protected-configs"}
