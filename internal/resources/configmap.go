package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/topology"
)

// ConfigFileName is the key of redis.conf in the ConfigMap, and the file name in the pod.
const ConfigFileName = "redis.conf"

// The keys of a TLS Secret, as cert-manager and kubernetes.io/tls Secrets name them.
const (
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
	TLSCAKey   = "ca.crt"
)

// DefaultClusterNodeTimeout is spec.cluster.nodeTimeout when it is not set: a primary that
// does not answer for 5s is replaced by its replica within seconds.
const DefaultClusterNodeTimeout = 5 * time.Second

// DefaultMaxReplicaLag is spec.failover.maxReplicaLag when it is not set: Redis's own default.
const DefaultMaxReplicaLag = 10 * time.Second

// RedisConf renders the redis.conf of a RedisCluster's nodes: the operator's settings, then the
// user's spec.config (whose keys never collide with ours: the API refuses those), the write
// safety of spec.failover, then the password file and the fence.
func RedisConf(rc *cachev1.RedisCluster) string { return redisConf(rc, true) }

// redisConf is redis.conf, with the LiveSettings or without them.
func redisConf(rc *cachev1.RedisCluster, live bool) string {
	lines := []string{"port " + strconv.Itoa(RedisPort)}
	if t := rc.Spec.TLS; t != nil {
		clientAuth := "no"
		if t.ClientAuth {
			clientAuth = "yes"
		}
		// TLS only, on the same port: clients, replication and the operator. The files are
		// the Secret's, as cert-manager names them.
		lines = []string{
			"port 0",
			"tls-port " + strconv.Itoa(RedisPort),
			"tls-cert-file " + TLSDir + "/" + TLSCertKey,
			"tls-key-file " + TLSDir + "/" + TLSKeyKey,
			"tls-ca-cert-file " + TLSDir + "/" + TLSCAKey,
			"tls-replication yes",
			"tls-auth-clients " + clientAuth,
		}
	}
	lines = append(lines,
		"bind * -::*",
		"protected-mode no",
		"dir "+dataDir,
		// Replicas start a full sync at once instead of waiting for others to join one.
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
	)
	liveSettings := LiveSettings(rc)
	if live {
		for _, s := range liveSettings {
			lines = append(lines, s.Directive+" "+s.Value)
		}
	}
	if rc.Spec.Storage != nil {
		lines = append(lines, "appendonly yes", "appendfsync everysec")
	}
	if c := rc.Spec.Cluster; c != nil {
		timeout := DefaultClusterNodeTimeout
		if c.NodeTimeout != nil {
			timeout = c.NodeTimeout.Duration
		}
		lines = append(lines,
			"cluster-enabled yes",
			// Kept with the data: a restarted node keeps its ID, its slots and its shard.
			"cluster-config-file nodes.conf",
			"cluster-node-timeout "+strconv.FormatInt(timeout.Milliseconds(), 10),
			// A replica stays in its shard (its StatefulSet): Redis moving it to another
			// shard's orphaned primary would leave its own shard without one.
			"cluster-allow-replica-migration no",
		)
		if rc.Spec.TLS != nil {
			// The cluster bus and the nodes' MIGRATE connections too: with port 0 there is
			// no plaintext listener for them to use.
			lines = append(lines, "tls-cluster yes")
		}
	}
	for _, key := range slices.Sorted(maps.Keys(rc.Spec.Config)) {
		if slices.ContainsFunc(liveSettings, func(s LiveSetting) bool { return s.Directive == key }) {
			continue // a live setting, with the user's value
		}
		lines = append(lines, ConfigLine(key, string(rc.Spec.Config[key])))
	}
	if f := rc.Spec.Failover; f != nil && f.MinReplicasToWrite != nil {
		lag := DefaultMaxReplicaLag
		if f.MaxReplicaLag != nil {
			lag = f.MaxReplicaLag.Duration
		}
		// Redis counts the lag in whole seconds: round up, so that a replica is never dropped
		// sooner than the spec says.
		seconds := int64((lag + time.Second - 1) / time.Second)
		lines = append(lines,
			"min-replicas-to-write "+strconv.Itoa(int(*f.MinReplicasToWrite)),
			"min-replicas-max-lag "+strconv.FormatInt(seconds, 10))
	}
	lines = append(lines,
		// requirepass and masterauth, from a Secret: never in the ConfigMap, never in argv.
		"include "+AuthDir+"/"+AuthConfKey,
		"replica-read-only yes",
	)
	if rc.Spec.Cluster == nil {
		// Every node starts fenced: a read-only replica of an address where nothing listens,
		// until the operator points it at the primary or promotes it. A restarted node can
		// never take writes, nor feed its replicas an empty dataset. (In cluster mode a node
		// takes writes only for the slots the cluster gives it, and its nodes.conf says
		// which, and whose replica it is.)
		lines = append(lines, "replicaof "+strings.Replace(topology.FenceAddr, ":", " ", 1))
	}
	return strings.Join(lines, "\n") + "\n"
}

// ConfigHash is a short digest of rc's redis.conf. On the pod template it rolls the pods when
// the configuration changes. The password is not in it: the operator changes it on running
// nodes, and a node that restarts reads the current password file. Nor are the LiveSettings:
// the operator sets them on running nodes, so adding or changing one rolls no pod.
func ConfigHash(rc *cachev1.RedisCluster) string {
	sum := sha256.Sum256([]byte(redisConf(rc, false)))
	return hex.EncodeToString(sum[:8])
}

// A LiveSetting is a directive of redis.conf that the operator also sets on running nodes
// (CONFIG SET), once per node by each operator process: a node started before this build
// gets it without a restart.
type LiveSetting struct {
	Directive, Value string
}

// LiveSettings are the settings of rc's nodes that the operator keeps live: in replication
// mode, how often a primary pings its replicas (repl-ping-replica-period; 1 second unless
// spec.config says otherwise, Redis's default being 10). A replica that heard from its primary
// within that period vouches that it lives when the operator cannot reach it
// (topology.View.HeardWithin), and the replicas of a primary gone silent stop vouching after it.
//
// In both modes, maxmemory when spec.config sets none (MaxMemory): a share of the container's
// memory limit, changed with the limit without a restart.
func LiveSettings(rc *cachev1.RedisCluster) []LiveSetting {
	var out []LiveSetting
	if rc.Spec.Cluster == nil {
		out = append(out, LiveSetting{"repl-ping-replica-period", strconv.FormatInt(ReplicaPingPeriod(rc), 10)})
	}
	if v, ok := MaxMemory(rc); ok {
		out = append(out, LiveSetting{"maxmemory", v})
	}
	return out
}

// ReplicaPingPeriod is the seconds between a primary's pings to its replicas in replication
// mode: spec.config's repl-ping-replica-period, or 1.
func ReplicaPingPeriod(rc *cachev1.RedisCluster) int64 {
	if v, ok := rc.Spec.Config["repl-ping-replica-period"]; ok {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// DesiredConfigMap is the ConfigMap that holds redis.conf.
func DesiredConfigMap(rc *cachev1.RedisCluster) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithData(map[string]string{ConfigFileName: RedisConf(rc)})
}

// ConfigLine is the redis.conf line of a spec.config directive: Redis receives exactly the
// value the API checked. A value is one argument, or with the directive's Args a list of
// arguments separated by single spaces; `""` is the empty argument ("none"). Redis's reader
// would take whitespace as a separator and quotes as quoting, so an argument holding either (or
// a backslash, or nothing) is written quoted, byte by byte: such values are refused by the API
// and reach here only from an object stored before a rule, and Redis then refuses them as
// they are instead of reading another value into them. Values of the grammar are written as
// they are.
func ConfigLine(directive, value string) string {
	args := []string{value}
	if i := slices.IndexFunc(cachev1.ConfigDirectives, func(d cachev1.ConfigDirective) bool { return d.Name == directive }); i >= 0 && cachev1.ConfigDirectives[i].Args && value != `""` {
		args = strings.Split(value, " ")
	}
	for i, a := range args {
		if a != `""` && (a == "" || strings.ContainsAny(a, " \t\v\f\"'\\")) {
			args[i] = quoteConfValue(a)
		}
	}
	return directive + " " + strings.Join(args, " ")
}
