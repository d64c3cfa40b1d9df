package redis

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// SlotRange is the hash slots Start..End, both included.
type SlotRange struct{ Start, End int }

// ParseSlotRange reads a range as String writes it (and CLUSTER NODES): "0-5460", or "7".
func ParseSlotRange(s string) (SlotRange, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	start, err := strconv.Atoi(lo)
	if err != nil {
		return SlotRange{}, fmt.Errorf("slot range %q: %w", s, err)
	}
	end := start
	if isRange {
		if end, err = strconv.Atoi(hi); err != nil {
			return SlotRange{}, fmt.Errorf("slot range %q: %w", s, err)
		}
	}
	return SlotRange{start, end}, nil
}

func (r SlotRange) String() string {
	if r.Start == r.End {
		return strconv.Itoa(r.Start)
	}
	return strconv.Itoa(r.Start) + "-" + strconv.Itoa(r.End)
}

// ClusterNode is one line of CLUSTER NODES: a node as the node that answered sees it.
type ClusterNode struct {
	ID string
	// Addr is the node's ip:port; empty when it has none (noaddr).
	Addr string
	// Bus is its cluster bus port (cport).
	Bus int
	// Flags: myself, master, slave, fail?, fail, handshake, noaddr, nofailover.
	Flags []string
	// PrimaryID is the node a replica replicates; empty for a primary.
	PrimaryID string
	// Connected is the cluster bus link's state.
	Connected bool
	Slots     []SlotRange
	// Importing and Migrating are the node's open slots, on its own line only: a slot it
	// imports from the node id, and a slot it migrates to the node id (CLUSTER SETSLOT).
	Importing map[int]string
	Migrating map[int]string
}

// OpenSlot is true when the node imports or migrates the slot.
func (n ClusterNode) OpenSlot(slot int) bool {
	_, in := n.Importing[slot]
	_, out := n.Migrating[slot]
	return in || out
}

// Serves is true when the node serves the slot.
func (n ClusterNode) Serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r.Start && slot <= r.End {
			return true
		}
	}
	return false
}

func (n ClusterNode) has(flag string) bool { return slices.Contains(n.Flags, flag) }

// Myself is the node that answered.
func (n ClusterNode) Myself() bool { return n.has("myself") }

// IsPrimary is a node that is a primary (with or without slots).
func (n ClusterNode) IsPrimary() bool { return n.has("master") }

// Failed is a node the cluster agreed has failed (fail), not only this node's suspicion.
func (n ClusterNode) Failed() bool { return n.has("fail") }

// AddressTaken is a node whose address answered with another node's ID: Redis forgets the
// address (noaddr) and never pings the node again, so never marks it failed. The process that had
// the address is gone from it; another listens there now (a pod replaced behind its own Service).
func (n ClusterNode) AddressTaken() bool { return n.has("noaddr") }

// Handshake is a node met but not yet known by its ID.
func (n ClusterNode) Handshake() bool { return n.has("handshake") }

// SlotCount is how many slots the node serves.
func (n ClusterNode) SlotCount() int {
	total := 0
	for _, r := range n.Slots {
		total += r.End - r.Start + 1
	}
	return total
}

// ParseClusterNodes reads the answer of CLUSTER NODES. Slots being imported or migrated
// ([slot-<-id], [slot->-id]) are not served ranges: they go to Importing and Migrating.
func ParseClusterNodes(raw string) ([]ClusterNode, error) {
	var out []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: %d fields, want 8 or more", line, len(f))
		}
		n := ClusterNode{ID: f[0], Flags: strings.Split(f[2], ","), Connected: f[7] == "connected"}
		// ip:port@cport[,hostname]
		addr, bus, _ := strings.Cut(f[1], "@")
		if host, port, err := net.SplitHostPort(addr); err == nil && host != "" {
			n.Addr = net.JoinHostPort(host, port)
		}
		bus, _, _ = strings.Cut(bus, ",")
		n.Bus, _ = strconv.Atoi(bus)
		if f[3] != "-" {
			n.PrimaryID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				if err := n.parseOpenSlot(s); err != nil {
					return nil, err
				}
				continue
			}
			r, err := ParseSlotRange(s)
			if err != nil {
				return nil, fmt.Errorf("CLUSTER NODES: %w", err)
			}
			n.Slots = append(n.Slots, r)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseOpenSlot reads [slot->-id] (migrating to id) or [slot-<-id] (importing from id).
func (n *ClusterNode) parseOpenSlot(s string) error {
	body := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	into := &n.Migrating
	slot, id, ok := strings.Cut(body, "->-")
	if !ok {
		into = &n.Importing
		slot, id, ok = strings.Cut(body, "-<-")
	}
	number, err := strconv.Atoi(slot)
	if !ok || err != nil || id == "" {
		return fmt.Errorf("CLUSTER NODES open slot %q: want [slot->-id] or [slot-<-id]", s)
	}
	if *into == nil {
		*into = map[int]string{}
	}
	(*into)[number] = id
	return nil
}

// ClusterInfo is the part of CLUSTER INFO the operator reads.
type ClusterInfo struct {
	// State is ok when every slot is served.
	State         string
	SlotsAssigned int
	KnownNodes    int
}

// ParseClusterInfo reads the answer of CLUSTER INFO.
func ParseClusterInfo(raw string) ClusterInfo {
	var info ClusterInfo
	for _, line := range strings.Split(raw, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "cluster_state":
			info.State = v
		case "cluster_slots_assigned":
			info.SlotsAssigned, _ = strconv.Atoi(v)
		case "cluster_known_nodes":
			info.KnownNodes, _ = strconv.Atoi(v)
		}
	}
	return info
}

// ClusterNodes is the cluster as the node sees it.
func (n *node) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	raw, err := n.client().ClusterNodes(ctx).Result()
	if err != nil {
		return nil, n.classify(err)
	}
	return ParseClusterNodes(raw)
}

// ClusterInfo is the cluster's state as the node sees it.
func (n *node) ClusterInfo(ctx context.Context) (ClusterInfo, error) {
	raw, err := n.client().ClusterInfo(ctx).Result()
	if err != nil {
		return ClusterInfo{}, n.classify(err)
	}
	return ParseClusterInfo(raw), nil
}

// ClusterMeet makes the node shake hands with the node at addr (ip:port), which joins its
// cluster.
func (n *node) ClusterMeet(ctx context.Context, addr string, bus int) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("node address %q: %w", addr, err)
	}
	args := []any{"CLUSTER", "MEET", host, port}
	if bus != 0 {
		args = append(args, bus)
	}
	return n.classify(n.client().Do(ctx, args...).Err())
}

// Announced is the address a cluster node gives its peers and its clients (in the bus, MOVED,
// CLUSTER SHARDS and SLOTS) instead of its own: an IP, the port clients use (the TLS port
// when the cluster speaks TLS) and the bus port. A zero field is the node's own.
type Announced struct {
	IP      string
	Port    int
	BusPort int
}

// announcedPort is the directive of the port a node announces: the TLS port's when it speaks
// only TLS (tls-cluster: its peers and clients use that one).
func (n *node) announcedPort() string {
	if n.opts.TLS != nil {
		return "cluster-announce-tls-port"
	}
	return "cluster-announce-port"
}

// ClusterAnnounced is what the node announces (cluster-announce-ip, -port or -tls-port,
// -bus-port).
func (n *node) ClusterAnnounced(ctx context.Context) (Announced, error) {
	got, err := n.client().ConfigGet(ctx, "cluster-announce-*").Result()
	if err != nil {
		return Announced{}, n.classify(err)
	}
	a := Announced{IP: got["cluster-announce-ip"]}
	a.Port, _ = strconv.Atoi(got[n.announcedPort()])
	a.BusPort, _ = strconv.Atoi(got["cluster-announce-bus-port"])
	return a, nil
}

// ClusterAnnounce makes the node announce a, live, in one CONFIG SET. Its peers learn the new
// address from its next message.
func (n *node) ClusterAnnounce(ctx context.Context, a Announced) error {
	return n.classify(n.client().Do(ctx, "CONFIG", "SET", "cluster-announce-ip", a.IP,
		n.announcedPort(), a.Port, "cluster-announce-bus-port", a.BusPort).Err())
}

// ClusterAddSlots makes the node serve the slot ranges; Redis refuses a slot another node
// already serves, as far as this node knows.
func (n *node) ClusterAddSlots(ctx context.Context, ranges []SlotRange) error {
	args := []any{"CLUSTER", "ADDSLOTSRANGE"}
	for _, r := range ranges {
		args = append(args, r.Start, r.End)
	}
	return n.classify(n.client().Do(ctx, args...).Err())
}

// ClusterReplicate makes the node a replica of the node primaryID; Redis refuses it for a node
// that serves slots or holds keys.
func (n *node) ClusterReplicate(ctx context.Context, primaryID string) error {
	return n.classify(n.client().Do(ctx, "CLUSTER", "REPLICATE", primaryID).Err())
}

// ClusterForget makes the node drop the node id from its table (for 60 seconds, in which the
// others are told to as well).
func (n *node) ClusterForget(ctx context.Context, id string) error {
	return n.classify(n.client().Do(ctx, "CLUSTER", "FORGET", id).Err())
}

// SlotState is what CLUSTER SETSLOT makes of a slot on a node.
type SlotState string

const (
	// SlotImporting: the node accepts, after ASKING, commands for the slot's keys, which the
	// node id serves.
	SlotImporting SlotState = "IMPORTING"
	// SlotMigrating: the node sends clients to the node id (ASK) for the slot's keys it no
	// longer has.
	SlotMigrating SlotState = "MIGRATING"
	// SlotNode: the node takes the node id as the slot's owner, which closes the slot's move on
	// it. Redis refuses to give away a slot the node still holds keys of.
	SlotNode SlotState = "NODE"
)

// ClusterSetSlots sets the slots to state toward the node id, pipelined: one round trip, and
// one write of nodes.conf, for them all. The first refusal is returned.
func (n *node) ClusterSetSlots(ctx context.Context, state SlotState, id string, slots ...int) error {
	cmds, err := n.client().Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, slot := range slots {
			p.Do(ctx, "CLUSTER", "SETSLOT", slot, string(state), id)
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil {
			return n.classify(fmt.Errorf("slot %v: %w", c.Args()[2], c.Err()))
		}
	}
	return n.classify(err)
}

// ClusterFailover makes the node, a replica, take its primary's place once it has every write
// the primary acknowledged: the primary stops its clients meanwhile (a manual failover, not
// FORCE). Redis answers at once and carries it out within moments.
func (n *node) ClusterFailover(ctx context.Context) error {
	return n.classify(n.client().Do(ctx, "CLUSTER", "FAILOVER").Err())
}

// ClusterSetSlotStable drops the node's importing or migrating state of the slot.
func (n *node) ClusterSetSlotStable(ctx context.Context, slot int) error {
	return n.classify(n.client().Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err())
}

// ClusterKeysInSlot are up to count of the node's keys in the slot.
func (n *node) ClusterKeysInSlot(ctx context.Context, slot, count int) ([]string, error) {
	keys, err := n.client().ClusterGetKeysInSlot(ctx, slot, count).Result()
	return keys, n.classify(err)
}

// Migrate moves the keys (all of one slot) to the node at addr, logged in there as on this
// node: the target restores each (RESTORE-ASKING), then this node deletes it, atomically for
// the batch. A copy the target already holds is replaced (REPLACE): this node serves the slot
// and every key it still holds, so its copy is the one clients read and wrote. The target's is
// left by an earlier MIGRATE whose reply came after its timeout (the target had restored the
// keys, this node kept them and went on serving them) or by a move abandoned half way; refused
// (BUSYKEY), it stopped the move for good (a CI run on a loaded machine, 2026-12-06).
func (n *node) Migrate(ctx context.Context, addr string, keys []string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("node address %q: %w", addr, err)
	}
	timeout := n.opts.Timeout / 2
	if timeout <= 0 {
		timeout = time.Second
	}
	args := []any{"MIGRATE", host, port, "", 0, timeout.Milliseconds(), "REPLACE"}
	switch {
	case n.opts.Username != "":
		args = append(args, "AUTH2", n.opts.Username, n.opts.Password)
	case n.opts.Password != "":
		args = append(args, "AUTH", n.opts.Password)
	}
	args = append(args, "KEYS")
	for _, k := range keys {
		args = append(args, k)
	}
	return n.classify(n.client().Do(ctx, args...).Err())
}
