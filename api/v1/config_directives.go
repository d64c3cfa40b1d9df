package v1

// The redis.conf directives spec.config takes: an allow-list, each directive with the grammar of
// its value. This table is the one definition: `make generate` renders it into the CEL rules on
// RedisConfig (zz_generated.admission.go, by hack/admissionrules), the admission tests try every
// directive's example and counter-example against the real API server, and a test starts a real
// redis-server with every example.
//
// Why an allow-list: Redis has more directives than any deny-list keeps up with, and some of them
// undo what the operator promises (users and passwords, addresses the cluster bus assumes, code
// loaded into Redis). A directive that is not here is refused with a message that says so.

// ConfigValueKind is the grammar of a directive's value.
type ConfigValueKind string

const (
	// ConfigBool: yes or no.
	ConfigBool ConfigValueKind = "bool"
	// ConfigInt: a decimal integer within [Min, Max], Redis's own bounds for the directive.
	ConfigInt ConfigValueKind = "int"
	// ConfigSize: bytes, as Redis reads them: 1048576, 64k, 100mb, 1gb (case does not matter).
	ConfigSize ConfigValueKind = "size"
	// ConfigEnum: one of Values.
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
	// Values of a ConfigEnum.
	Values []string
	// Pattern (an RE2 expression matching the whole value) and Describe (what it allows, for
	// the refusal's message) of a ConfigPattern.
	Pattern, Describe string
	// Example is a value Redis takes; Bad is one the API refuses.
	Example, Bad string
	// Since is the first Redis version that knows the directive, when later than 6.0.
	Since string
}

const (
	intMax   = 1<<31 - 1
	int64Max = 1<<63 - 1
	// ConfigSizePattern is the grammar of ConfigSize values, memtoull's: digits, then b, k, kb,
	// m, mb, g or gb in any case.
	ConfigSizePattern = `^[0-9]{1,19}([kKmMgG][bB]?|[bB])?$`
)

func boolDirective(name, since string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigBool, Example: "yes", Bad: "true", Since: since}
}

func intDirective(name string, lo, hi int64, example string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigInt, Min: lo, Max: hi, Example: example, Bad: "1.5"}
}

func sizeDirective(name, example string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigSize, Example: example, Bad: "-1mb"}
}

func enumDirective(name, example string, values ...string) ConfigDirective {
	return ConfigDirective{Name: name, Kind: ConfigEnum, Values: values, Example: example, Bad: "sometimes"}
}

// ConfigDirectives are the tunables spec.config takes, grouped by concern.
var ConfigDirectives = []ConfigDirective{
	// Memory and eviction.
	sizeDirective("maxmemory", "256mb"),
	enumDirective("maxmemory-policy", "allkeys-lru", "volatile-lru", "allkeys-lru", "volatile-lfu", "allkeys-lfu",
		"volatile-random", "allkeys-random", "volatile-ttl", "noeviction"),
	intDirective("maxmemory-samples", 1, 64, "5"),
	{Name: "maxmemory-eviction-tenacity", Kind: ConfigInt, Min: 0, Max: 100, Example: "10", Bad: "101", Since: "6.2"},
	{Name: "maxmemory-clients", Kind: ConfigPattern, Pattern: `^([0-9]{1,19}([kKmMgG][bB]?|[bB])?|[0-9]{1,3}%)$`,
		Describe: "a size (64mb) or a percentage of maxmemory (5%)", Example: "5%", Bad: "five", Since: "7.0"},
	intDirective("lfu-log-factor", 0, intMax, "10"),
	intDirective("lfu-decay-time", 0, intMax, "1"),
	intDirective("active-expire-effort", 1, 10, "1"),
	boolDirective("replica-ignore-maxmemory", ""),

	// Persistence: the snapshot schedule and fsync. appendonly itself follows spec.storage.
	{Name: "save", Kind: ConfigPattern, Pattern: `^([0-9]{1,10} [0-9]{1,10}( [0-9]{1,10} [0-9]{1,10})*|"")$`,
		Describe: `pairs of seconds and changes ("3600 1 300 100"), or "" for no snapshots`, Example: "3600 1 300 100", Bad: "3600"},
	enumDirective("appendfsync", "everysec", "always", "everysec", "no"),
	boolDirective("no-appendfsync-on-rewrite", ""),
	intDirective("auto-aof-rewrite-percentage", 0, intMax, "100"),
	sizeDirective("auto-aof-rewrite-min-size", "64mb"),
	boolDirective("aof-load-truncated", ""),
	boolDirective("aof-use-rdb-preamble", ""),
	boolDirective("aof-timestamp-enabled", "7.0"),
	boolDirective("aof-rewrite-incremental-fsync", ""),
	boolDirective("rdb-save-incremental-fsync", ""),
	boolDirective("rdbcompression", ""),
	boolDirective("rdbchecksum", ""),
	boolDirective("stop-writes-on-bgsave-error", ""),
	boolDirective("rdb-del-sync-files", ""),
	enumDirective("sanitize-dump-payload", "no", "no", "yes", "clients"),

	// Clients: timeouts, keepalive, limits.
	intDirective("timeout", 0, intMax, "300"),
	intDirective("tcp-keepalive", 0, intMax, "300"),
	intDirective("tcp-backlog", 0, intMax, "511"),
	intDirective("maxclients", 1, 1<<32-1, "10000"),
	intDirective("busy-reply-threshold", 0, int64Max, "5000"),
	intDirective("lua-time-limit", 0, int64Max, "5000"),
	intDirective("databases", 1, intMax, "16"),
	intDirective("tracking-table-max-keys", 0, int64Max, "1000000"),
	intDirective("acllog-max-len", 0, int64Max, "128"),
	{Name: "client-output-buffer-limit", Kind: ConfigPattern,
		Pattern:  `^(normal|replica|slave|pubsub) [0-9]{1,19}([kKmMgG][bB]?|[bB])? [0-9]{1,19}([kKmMgG][bB]?|[bB])? [0-9]{1,10}( (normal|replica|slave|pubsub) [0-9]{1,19}([kKmMgG][bB]?|[bB])? [0-9]{1,19}([kKmMgG][bB]?|[bB])? [0-9]{1,10})*$`,
		Describe: "classes (normal, replica, pubsub) each with a hard limit, a soft limit and seconds (\"pubsub 32mb 8mb 60\")",
		Example:  "normal 0 0 0 replica 512mb 128mb 60 pubsub 32mb 8mb 60", Bad: "pubsub 32mb"},
	sizeDirective("client-query-buffer-limit", "1gb"),
	sizeDirective("proto-max-bulk-len", "512mb"),

	// Replication tuning (who replicates whom is the operator's).
	sizeDirective("repl-backlog-size", "64mb"),
	intDirective("repl-backlog-ttl", 0, intMax, "3600"),
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
	{Name: "notify-keyspace-events", Kind: ConfigPattern, Pattern: `^([KEg$lshzxetmdnA]{1,32}|"")$`,
		Describe: `the letters of the keyspace event classes (KEA, Ex), or "" for none`, Example: "Ex", Bad: "all"},

	// Slowlog and latency monitoring.
	intDirective("slowlog-log-slower-than", -1, int64Max, "10000"),
	intDirective("slowlog-max-len", 0, int64Max, "128"),
	intDirective("latency-monitor-threshold", 0, int64Max, "100"),
	boolDirective("latency-tracking", "7.0"),
	{Name: "latency-tracking-info-percentiles", Kind: ConfigPattern, Pattern: `^([0-9]{1,3}(\.[0-9]{1,6})?( [0-9]{1,3}(\.[0-9]{1,6})?){0,15}|"")$`,
		Describe: `percentiles separated by spaces ("50 99 99.9"), or "" for none`, Example: "50 99 99.9", Bad: "p99", Since: "7.0"},

	// Encodings of small values.
	intDirective("hash-max-listpack-entries", 0, int64Max, "128"),
	intDirective("hash-max-listpack-value", 0, int64Max, "64"),
	intDirective("hash-max-ziplist-entries", 0, int64Max, "128"),
	intDirective("hash-max-ziplist-value", 0, int64Max, "64"),
	intDirective("list-max-listpack-size", -5, intMax, "-2"),
	intDirective("list-max-ziplist-size", -5, intMax, "-2"),
	intDirective("list-compress-depth", 0, intMax, "0"),
	intDirective("set-max-intset-entries", 0, int64Max, "512"),
	{Name: "set-max-listpack-entries", Kind: ConfigInt, Min: 0, Max: int64Max, Example: "128", Bad: "-1", Since: "7.2"},
	{Name: "set-max-listpack-value", Kind: ConfigInt, Min: 0, Max: int64Max, Example: "64", Bad: "-1", Since: "7.2"},
	intDirective("zset-max-listpack-entries", 0, int64Max, "128"),
	intDirective("zset-max-listpack-value", 0, int64Max, "64"),
	intDirective("zset-max-ziplist-entries", 0, int64Max, "128"),
	intDirective("zset-max-ziplist-value", 0, int64Max, "64"),
	sizeDirective("hll-sparse-max-bytes", "3000"),
	sizeDirective("stream-node-max-bytes", "4kb"),
	intDirective("stream-node-max-entries", 0, int64Max, "100"),
	boolDirective("activerehashing", ""),

	// Active defragmentation (it needs Redis built with its own jemalloc: the image's is).
	{Name: "activedefrag", Kind: ConfigBool, Example: "no", Bad: "on"},
	sizeDirective("active-defrag-ignore-bytes", "100mb"),
	intDirective("active-defrag-threshold-lower", 0, 1000, "10"),
	intDirective("active-defrag-threshold-upper", 0, 1000, "100"),
	intDirective("active-defrag-cycle-min", 1, 99, "1"),
	intDirective("active-defrag-cycle-max", 1, 99, "25"),
	intDirective("active-defrag-max-scan-fields", 1, int64Max, "1000"),
	boolDirective("jemalloc-bg-thread", ""),

	// The server's background work and logging.
	intDirective("hz", 1, 500, "10"),
	boolDirective("dynamic-hz", ""),
	enumDirective("loglevel", "notice", "debug", "verbose", "notice", "warning"),
	boolDirective("disable-thp", "6.2"),

	// Cluster mode: directives named cluster-* are refused without spec.cluster.
	{Name: "cluster-require-full-coverage", Kind: ConfigBool, Example: "no", Bad: "0"},
	{Name: "cluster-allow-reads-when-down", Kind: ConfigBool, Example: "yes", Bad: "0"},
	{Name: "cluster-allow-pubsubshard-when-down", Kind: ConfigBool, Example: "yes", Bad: "0", Since: "7.0"},
	{Name: "cluster-replica-validity-factor", Kind: ConfigInt, Min: 0, Max: intMax, Example: "10", Bad: "-1"},
	{Name: "cluster-link-sendbuf-limit", Kind: ConfigSize, Example: "64mb", Bad: "lots", Since: "7.0"},
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
