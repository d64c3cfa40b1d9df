// Package redis is the operator's view of one Redis node, over the Redis protocol: its role and
// replication state, and the few commands that change the topology. Never redis-cli, never a
// password in argv or in a log line. Only the packages that act on nodes import it
// (internal/topology, internal/shards, internal/auth, internal/backup), and the composition
// root that makes the connections (controllers/operator).
package redis

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
)

// Role is what a node says it is.
type Role string

const (
	RolePrimary Role = "master"
	RoleReplica Role = "slave"
)

// ReplicationInfo is the part of INFO replication the operator decides with.
type ReplicationInfo struct {
	Role Role
	// PrimaryHost and PrimaryPort are whom a replica replicates from.
	PrimaryHost string
	PrimaryPort int
	// LinkUp is true when a replica's link to its primary is up.
	LinkUp bool
	// LastIOSeconds is, for a replica whose link is up, the whole seconds since it last heard
	// from its primary (master_last_io_seconds_ago): a primary pings its replicas every
	// repl-ping-replica-period, so a live one's replicas say little.
	LastIOSeconds int64
	// Offset is how much of the replication stream the node holds (master_repl_offset). A node
	// that restarted holds none, even when it loaded its data from its volume.
	Offset int64
	// Keys are the keys of every database (INFO keyspace): whether a node holds data at all.
	Keys int64
	// Replicas are the replicas a primary serves, as it sees them (its slaveN lines).
	Replicas []ReplicaLink
}

// ReplicaLink is a primary's view of one replica: it holds even when the replica itself
// does not answer.
type ReplicaLink struct {
	// Addr is the address the replica announced (replica-announce-ip), host:port.
	Addr string
	// Offset is the replication offset the replica last acknowledged.
	Offset int64
	// LagSeconds is the time since the replica last acknowledged (Redis's lag field).
	LagSeconds int64
}

// Stats is what a node says of its load: its clients, its memory and its keys.
type Stats struct {
	ConnectedClients int64
	// UsedMemory and MaxMemory are in bytes; MaxMemory is 0 when unlimited.
	UsedMemory, MaxMemory int64
	// EvictedKeys and ExpiredKeys count since the node started.
	EvictedKeys, ExpiredKeys int64
	OpsPerSecond             int64
	// MaxMemoryPolicy is what the node does at maxmemory: evict (allkeys-lru, ...) or refuse
	// writes (noeviction).
	MaxMemoryPolicy string
	// RefusedForMemory counts the commands the node refused since it started because its data
	// had reached maxmemory (INFO errorstats, errorstat_OOM).
	RefusedForMemory int64
}

// PrimaryAddr is host:port of a replica's primary.
func (i ReplicationInfo) PrimaryAddr() string {
	return net.JoinHostPort(i.PrimaryHost, strconv.Itoa(i.PrimaryPort))
}

// Node is one Redis node. It is made per reconcile and closed after.
type Node interface {
	// Replication reads INFO replication, and the key count of INFO keyspace.
	Replication(ctx context.Context) (ReplicationInfo, error)
	// ReplicaOf makes the node replicate from the primary at addr (host:port).
	ReplicaOf(ctx context.Context, addr string) error
	// Promote makes the node a primary (REPLICAOF NO ONE).
	Promote(ctx context.Context) error
	// PauseWrites holds every write command for d: the fence before a switchover.
	PauseWrites(ctx context.Context, d time.Duration) error
	// Unpause lets writes through again.
	Unpause(ctx context.Context) error
	// DisconnectClients closes every normal client connection but ours: after a demotion,
	// clients that held a connection to the old primary reconnect through the Service.
	DisconnectClients(ctx context.Context) error
	// Stats reads the part of INFO clients, memory and stats the metrics show.
	Stats(ctx context.Context) (Stats, error)
	// ReloadTLS makes the node read its certificate, key and CA files again (CONFIG SET of
	// the paths it has, which Redis 7 applies even when they are unchanged). Connections
	// already open keep their session.
	ReloadTLS(ctx context.Context) error
	// SetConfig sets configuration directives on the running node (CONFIG SET), as name-value
	// pairs, together.
	SetConfig(ctx context.Context, pairs ...string) error
	// AddPassword makes the node take password beside the ones it takes (its default user's,
	// Redis 7 users hold several) and give it to its primary (masterauth), live. Connections
	// already logged in stay logged in.
	AddPassword(ctx context.Context, password string) error
	// RemovePassword makes the node refuse password; a password it does not take is no error.
	RemovePassword(ctx context.Context, password string) error
	// Masterauth is the password the node gives its primary.
	Masterauth(ctx context.Context) (string, error)
	// PasswordHashes are the SHA-256 hashes (hex) of the passwords the ACL user takes.
	PasswordHashes(ctx context.Context, user string) ([]string, error)
	// SetUser defines the ACL user name with these ACL SETUSER arguments, live. ErrRejected
	// when Redis refuses them (an unknown command in the rules).
	SetUser(ctx context.Context, name string, args []string) error
	// Users are the names of the node's ACL users.
	Users(ctx context.Context) ([]string, error)
	// DeleteUser deletes the ACL user name; its connections are closed by Redis.
	DeleteUser(ctx context.Context, name string) error
	// Cluster mode (cluster.go).
	ClusterNodes(ctx context.Context) ([]ClusterNode, error)
	ClusterInfo(ctx context.Context) (ClusterInfo, error)
	// ClusterMeet introduces the node at addr (ip:port) and bus port (0: port + 10000).
	ClusterMeet(ctx context.Context, addr string, bus int) error
	ClusterAnnounced(ctx context.Context) (Announced, error)
	ClusterAnnounce(ctx context.Context, a Announced) error
	ClusterAddSlots(ctx context.Context, ranges []SlotRange) error
	ClusterReplicate(ctx context.Context, primaryID string) error
	ClusterForget(ctx context.Context, id string) error
	ClusterSetSlots(ctx context.Context, state SlotState, id string, slots ...int) error
	ClusterFailover(ctx context.Context) error
	ClusterSetSlotStable(ctx context.Context, slot int) error
	ClusterKeysInSlot(ctx context.Context, slot, count int) ([]string, error)
	Migrate(ctx context.Context, addr string, keys []string) error
	Close() error
}

// Dialer opens a Node at addr (host:port).
type Dialer func(addr string) Node

// Login is how the operator proves itself to one RedisCluster's nodes: its password and, for
// a RedisCluster with TLS, the TLS configuration (the CA to trust, the name to check, the
// client certificate). A new TLS configuration is a new pointer: a changed Login reconnects.
type Login struct {
	// Username is the ACL user; empty for the default user.
	Username string
	Password string
	TLS      *tls.Config
}

// Options configure the connection to every node.
type Options struct {
	// Username is the ACL user to log in as; empty for the default user.
	Username string
	// Password is the user's password; empty when auth is off.
	Password string
	// TLS, when set, makes every connection TLS with this configuration.
	TLS *tls.Config
	// Timeout bounds dialing, reading and writing: an unanswering node is unreachable after it.
	Timeout time.Duration
	// Hook, when set, sees every dial and command to every node (the fault suite stops the
	// operator right after a chosen write with it).
	Hook goredis.Hook
	// Fence, when set, is asked before every dial and command: an error refuses it unsent (a
	// leader that lost its lease talks to no node).
	Fence func() error
}

// WithLogin is opts with login's password and TLS configuration.
func (opts Options) WithLogin(login Login) Options {
	opts.Username, opts.Password, opts.TLS = login.Username, login.Password, login.TLS
	return opts
}

// DefaultTimeout is Options.Timeout when it is not set.
const DefaultTimeout = 500 * time.Millisecond

// NewDialer returns a Dialer with these options.
func NewDialer(opts Options) Dialer {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	return func(addr string) Node {
		return &node{c: newClient(addr, opts), opts: opts}
	}
}

// ConnectionsOpened counts the connections the operator opened to Redis nodes (served as a
// metric): in steady state, with held connections, it does not move.
var ConnectionsOpened = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "redis_operator_redis_connections_opened_total",
	Help: "Connections the operator opened to Redis nodes, for checks, commands and watches.",
})

func newClient(addr string, opts Options) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{
		OnConnect: func(context.Context, *goredis.Conn) error {
			ConnectionsOpened.Inc()
			return nil
		},
		Addr:         addr,
		Username:     opts.Username,
		Password:     opts.Password,
		TLSConfig:    opts.TLS,
		ClientName:   ClientName,
		DialTimeout:  opts.Timeout,
		ReadTimeout:  opts.Timeout,
		WriteTimeout: opts.Timeout,
		MaxRetries:   -1, // the caller decides what an error means; retrying hides a dead node
		// One dial per command, no backoff: go-redis would otherwise dial 5 times, 100ms apart,
		// before a refused connection (a dead node) is an error.
		DialerRetries:      1,
		DialerRetryTimeout: time.Nanosecond,
		PoolSize:           1,
		DisableIdentity:    true, // no CLIENT SETINFO round trips
		Protocol:           2,
	})
	if opts.Fence != nil {
		c.AddHook(fenceHook(opts.Fence))
	}
	if opts.Hook != nil {
		c.AddHook(opts.Hook)
	}
	return c
}

// fenceHook refuses every dial, command and pipeline while fence returns an error.
type fenceHook func() error

func (f fenceHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := f(); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}

func (f fenceHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if err := f(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f fenceHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if err := f(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

type node struct {
	opts Options
	mu   sync.Mutex
	c    *goredis.Client
	// held is true for a node of a Pool: its connection is kept between commands. It logs in
	// again at each check, as a connection stays logged in when the node's password changes
	// and the check must still tell whether the node takes the password.
	held bool
}

func (n *node) Replication(ctx context.Context) (ReplicationInfo, error) {
	if !n.held || n.opts.Password == "" {
		raw, err := n.client().Info(ctx, "replication", "keyspace").Result()
		if err != nil {
			return ReplicationInfo{}, n.classify(err)
		}
		return ParseReplicationInfo(raw)
	}
	// One round trip: AUTH and INFO pipelined.
	var auth *goredis.StatusCmd
	var info *goredis.StringCmd
	_, err := n.client().Pipelined(ctx, func(p goredis.Pipeliner) error {
		if n.opts.Username != "" {
			auth = p.AuthACL(ctx, n.opts.Username, n.opts.Password)
		} else {
			auth = p.Auth(ctx, n.opts.Password)
		}
		info = p.Info(ctx, "replication", "keyspace")
		return nil
	})
	if err := cmp.Or(auth.Err(), info.Err(), err); err != nil {
		return ReplicationInfo{}, n.classify(err)
	}
	return ParseReplicationInfo(info.Val())
}

func (n *node) Stats(ctx context.Context) (Stats, error) {
	raw, err := n.client().Info(ctx, "clients", "memory", "stats", "errorstats").Result()
	if err != nil {
		return Stats{}, n.classify(err)
	}
	return ParseStats(raw)
}

func (n *node) ReplicaOf(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("primary address %q: %w", addr, err)
	}
	return n.classify(n.client().Do(ctx, "REPLICAOF", host, port).Err())
}

func (n *node) Promote(ctx context.Context) error {
	return n.classify(n.client().Do(ctx, "REPLICAOF", "NO", "ONE").Err())
}

func (n *node) PauseWrites(ctx context.Context, d time.Duration) error {
	return n.classify(n.client().Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err())
}

func (n *node) Unpause(ctx context.Context) error {
	return n.classify(n.client().Do(ctx, "CLIENT", "UNPAUSE").Err())
}

func (n *node) DisconnectClients(ctx context.Context) error {
	return n.classify(n.client().Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err())
}

func (n *node) SetConfig(ctx context.Context, pairs ...string) error {
	args := []any{"CONFIG", "SET"}
	for _, p := range pairs {
		args = append(args, p)
	}
	return n.classify(n.client().Do(ctx, args...).Err())
}

func (n *node) ReloadTLS(ctx context.Context) error {
	// The node's own paths, set again: the node knows where its files are.
	paths, err := n.client().ConfigGet(ctx, "tls-*-file").Result()
	if err != nil {
		return n.classify(err)
	}
	args := []any{"CONFIG", "SET"}
	for _, name := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file"} {
		if paths[name] == "" {
			return fmt.Errorf("the node has no %s: it does not serve TLS", name)
		}
		args = append(args, name, paths[name])
	}
	// One CONFIG SET: Redis applies the three together, never a certificate with another's key.
	return n.classify(n.client().Do(ctx, args...).Err())
}

func (n *node) AddPassword(ctx context.Context, password string) error {
	// masterauth first: a replica that reconnects meanwhile still logs in to a primary that
	// takes both.
	if err := n.client().ConfigSet(ctx, "masterauth", password).Err(); err != nil {
		return n.classify(err)
	}
	return n.classify(n.client().Do(ctx, "ACL", "SETUSER", "default", "on", ">"+password).Err())
}

func (n *node) Masterauth(ctx context.Context) (string, error) {
	masterauth, err := n.client().ConfigGet(ctx, "masterauth").Result()
	if err != nil {
		return "", n.classify(err)
	}
	return masterauth["masterauth"], nil
}

func (n *node) PasswordHashes(ctx context.Context, user string) ([]string, error) {
	fields, err := n.client().Do(ctx, "ACL", "GETUSER", user).Slice()
	if err != nil {
		return nil, n.classify(err)
	}
	var out []string
	for i := 0; i+1 < len(fields); i += 2 {
		if fmt.Sprint(fields[i]) != "passwords" {
			continue
		}
		hashes, _ := fields[i+1].([]any)
		for _, h := range hashes {
			out = append(out, fmt.Sprint(h))
		}
	}
	return out, nil
}

func (n *node) RemovePassword(ctx context.Context, password string) error {
	err := n.client().Do(ctx, "ACL", "SETUSER", "default", "<"+password).Err()
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return n.classify(err)
}

func (n *node) SetUser(ctx context.Context, name string, args []string) error {
	cmd := []any{"ACL", "SETUSER", name}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	err := n.client().Do(ctx, cmd...).Err()
	var reply goredis.Error
	if errors.As(err, &reply) && strings.HasPrefix(err.Error(), "ERR") {
		return fmt.Errorf("%w: %s", ErrRejected, err.Error())
	}
	return n.classify(err)
}

func (n *node) Users(ctx context.Context) ([]string, error) {
	users, err := n.client().Do(ctx, "ACL", "USERS").StringSlice()
	return users, n.classify(err)
}

func (n *node) DeleteUser(ctx context.Context, name string) error {
	return n.classify(n.client().Do(ctx, "ACL", "DELUSER", name).Err())
}

// ErrRejected means Redis refused what it was asked to take (a user's rules).
var ErrRejected = errors.New("redis refused it")

func (n *node) Close() error { return n.client().Close() }

func (n *node) client() *goredis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.c
}

// classify says what err means (ErrAuth, ErrRefused, ErrTLS). A held node whose dial failed gets a
// fresh client: go-redis's pool of one connection answers every later command with the same
// dial error, without dialing, until its own redial succeeds (it tries once a second), and a
// node that is back must be seen at once.
func (n *node) classify(err error) error {
	var op *net.OpError
	if n.held && errors.As(err, &op) && op.Op == "dial" {
		n.mu.Lock()
		old := n.c
		n.c = newClient(old.Options().Addr, n.opts)
		n.mu.Unlock()
		_ = old.Close()
	}
	return classify(err)
}

// ErrAuth means the node refused the password, or asked for one we did not give.
var ErrAuth = errors.New("redis refused the credentials")

// ErrRefused means nothing listens at the node's address: the process is gone.
var ErrRefused = errors.New("connection refused")

// ErrNoPermission means the node refused the operator's user a command or a key (NOPERM): its
// user is not the one this operator defines (a node made by an earlier build). MIGRATE says so
// for the receiving node too ("Target instance replied with error: NOPERM ...").
var ErrNoPermission = errors.New("redis refused the operator's user a command")

func classify(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case isTLSError(err):
		return fmt.Errorf("%w: %s", ErrTLS, msg)
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"),
		strings.Contains(msg, "without any password configured"):
		// The server's words never hold the password; keep them for the user.
		return fmt.Errorf("%w: %s", ErrAuth, msg)
	case strings.Contains(msg, "connection refused"):
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	case strings.Contains(msg, "NOPERM"):
		return fmt.Errorf("%w: %s", ErrNoPermission, msg)
	}
	return err
}

// ParseReplicationInfo reads the fields the operator uses from INFO replication.
func ParseReplicationInfo(raw string) (ReplicationInfo, error) {
	var info ReplicationInfo
	fields := infoFields(raw)
	role, ok := fields["role"]
	if !ok {
		return info, fmt.Errorf("INFO replication has no role")
	}
	info.Role = Role(role)
	var err error
	if info.Offset, err = strconv.ParseInt(fields["master_repl_offset"], 10, 64); err != nil {
		return info, fmt.Errorf("master_repl_offset %q: %w", fields["master_repl_offset"], err)
	}
	if info.Role == RoleReplica {
		info.PrimaryHost = fields["master_host"]
		info.PrimaryPort, _ = strconv.Atoi(fields["master_port"])
		info.LinkUp = fields["master_link_status"] == "up"
		if info.LinkUp {
			info.LastIOSeconds, _ = strconv.ParseInt(fields["master_last_io_seconds_ago"], 10, 64)
		}
	}
	for key, line := range fields {
		// db<n>:keys=<k>,expires=...,avg_ttl=...
		if n, ok := strings.CutPrefix(key, "db"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			keys, _, _ := strings.Cut(strings.TrimPrefix(line, "keys="), ",")
			k, err := strconv.ParseInt(keys, 10, 64)
			if err != nil {
				return info, fmt.Errorf("%s %q: %w", key, line, err)
			}
			info.Keys += k
		}
	}
	for i := 0; ; i++ {
		line, ok := fields["slave"+strconv.Itoa(i)]
		if !ok {
			break
		}
		link, err := parseReplicaLink(line)
		if err != nil {
			return info, fmt.Errorf("slave%d %q: %w", i, line, err)
		}
		info.Replicas = append(info.Replicas, link)
	}
	return info, nil
}

// parseReplicaLink reads a primary's line on one replica: ip=...,port=...,state=...,offset=...,lag=...
func parseReplicaLink(line string) (ReplicaLink, error) {
	kv := map[string]string{}
	for _, part := range strings.Split(line, ",") {
		if k, v, ok := strings.Cut(part, "="); ok {
			kv[k] = v
		}
	}
	var link ReplicaLink
	if kv["ip"] == "" || kv["port"] == "" {
		return link, errors.New("no ip or port")
	}
	link.Addr = net.JoinHostPort(kv["ip"], kv["port"])
	var err error
	if link.Offset, err = strconv.ParseInt(kv["offset"], 10, 64); err != nil {
		return link, fmt.Errorf("offset: %w", err)
	}
	if link.LagSeconds, err = strconv.ParseInt(kv["lag"], 10, 64); err != nil {
		return link, fmt.Errorf("lag: %w", err)
	}
	return link, nil
}

// ParseStats reads INFO clients, memory and stats.
func ParseStats(raw string) (Stats, error) {
	fields := infoFields(raw)
	var s Stats
	for _, f := range []struct {
		key string
		to  *int64
	}{
		{"connected_clients", &s.ConnectedClients}, {"used_memory", &s.UsedMemory}, {"maxmemory", &s.MaxMemory},
		{"evicted_keys", &s.EvictedKeys}, {"expired_keys", &s.ExpiredKeys}, {"instantaneous_ops_per_sec", &s.OpsPerSecond},
	} {
		v, err := strconv.ParseInt(fields[f.key], 10, 64)
		if err != nil {
			return Stats{}, fmt.Errorf("INFO %s %q: %w", f.key, fields[f.key], err)
		}
		*f.to = v
	}
	s.MaxMemoryPolicy = fields["maxmemory_policy"]
	// errorstat_OOM:count=12 (Redis 6.2 and later; absent until the first refusal)
	if v, ok := strings.CutPrefix(fields["errorstat_OOM"], "count="); ok {
		count, _, _ := strings.Cut(v, ",")
		s.RefusedForMemory, _ = strconv.ParseInt(count, 10, 64)
	}
	return s, nil
}

// infoFields are the key:value lines of an INFO reply.
func infoFields(raw string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			fields[k] = v
		}
	}
	return fields
}

// go-redis logs every failed dial on its own; a node that is down is the operator's to report,
// in its own words, once.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { goredis.SetLogger(quietLogger{}) }
