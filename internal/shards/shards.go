// Package shards decides how the nodes of a RedisCluster in cluster mode form one Redis
// Cluster: which nodes must meet, which hash slots each shard's primary serves, and which node
// replicates which primary. Decide is pure: it reads what each node said (CLUSTER NODES) and
// returns the commands to send; the executor (executor.go) sends them, and the controller asks
// again.
//
// The safety rule it keeps: no key is lost and no slot is served twice. So it never assigns a
// slot that any node is known to serve, and assigns slots only while every node answers and
// every node is in one cluster; it never makes a node that serves slots a replica (Redis would
// drop its keys; Redis refuses it too), nor repoints a replica whose primary still serves its
// shard's slots from elsewhere (a primary whose volume was lost: Redis promotes the replica);
// it forgets only a node that no pod is, that is gone (the cluster agreed it has failed, or its
// address answers with another node's ID), and that serves no
// slot or that no node replicates (its keys are nowhere), and only while every pod's node
// answers, so that a node that is only restarting is never dropped. It never resets a node or
// flushes data. A node that came back with its node ID at a new address (a restarted pod keeps
// nodes.conf on its volume, not its IP) is introduced again at that address, and nothing else is
// sent until every node knows every other where it is (rejoin.go). A node exposed outside
// (spec.expose) announces its Service's address, and its peers, bus and replicas included, reach
// it there: one address for inside and outside (Redis 7.0 announces one).
package shards

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/org/redis-operator/internal/redis"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = redis.SlotCount

// Member is a pod of a shard, and what its Redis node said.
type Member struct {
	Pod     string
	Shard   int
	Ordinal int
	// Addr is the node's ip:port; empty before the pod has an IP.
	Addr string
	// Nodes is its answer to CLUSTER NODES; nil when it did not answer.
	Nodes []redis.ClusterNode
	// Announcing is the address its node announces (cluster-announce-*; its pod's IP, Own,
	// as the pod starts it); Announce is the one it should: its Service's outside address
	// (spec.expose), or its Own.
	Announcing, Announce redis.Announced
	// Following is, for a replica, the address its replication follows (INFO replication's
	// master_host:master_port); empty when it is no replica or was not asked.
	Following string
}

// followsElsewhere is the address m's replication follows when it is not where m's own table
// has its primary id: Redis 7.0 moves a peer to the new address its gossip tells of without
// moving the replication of that peer's replicas (only a message from the peer itself does), so
// after a whole restart a replica may keep following its primary's old address, its link down.
// Empty when they agree, or when either is not known.
func (m Member) followsElsewhere(id string) string {
	n, ok := m.node(id)
	if m.Following == "" || !ok || n.Addr == "" || n.Addr == m.Following {
		return ""
	}
	return m.Following
}

// Announced is the address a node announces instead of its own (redis.Announced).
type Announced = redis.Announced

// announcements have each node announce what it should (spec.expose): its peers learn the
// address from its next message, and reach it there.
func announcements(answering []Member) []Action {
	var out []Action
	for _, m := range answering {
		if m.Announcing != m.Announce {
			out = append(out, Action{Kind: Announce, On: m.Pod, Announced: m.Announce})
		}
	}
	return out
}

// AtOwnAddresses is true when every member's node answers, announces its pod's own address, and
// is known by every other there: no node is reached through an announced address any more.
func AtOwnAddresses(members []Member) bool {
	for _, m := range members {
		if _, ok := m.Self(); !ok || m.Announcing != m.Own() {
			return false
		}
	}
	return len(rejoinMoved(members)) == 0
}

// Peer is where the node's peers and clients find it: at the address it announces, its pod's
// port where it announces none (bus 0: the port + 10000); empty before its pod has an IP.
func (m Member) Peer() (addr string, bus int) {
	host, port, err := net.SplitHostPort(m.Addr)
	if err != nil {
		return m.Addr, 0
	}
	if a := m.Announcing; a.IP != "" {
		host, bus = a.IP, a.BusPort
		if a.Port != 0 {
			port = strconv.Itoa(a.Port)
		}
	}
	return net.JoinHostPort(host, port), bus
}

// Own is what the node announces by itself: its pod's IP (the pod starts Redis with it), its own
// ports.
func (m Member) Own() Announced {
	host, _, _ := net.SplitHostPort(m.Addr)
	return Announced{IP: host}
}

// Self is the node's own entry; false when it did not answer.
func (m Member) Self() (redis.ClusterNode, bool) {
	for _, n := range m.Nodes {
		if n.Myself() {
			return n, true
		}
	}
	return redis.ClusterNode{}, false
}

// node is the member's entry for the node id; false when its table has none.
func (m Member) node(id string) (redis.ClusterNode, bool) {
	for _, n := range m.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return redis.ClusterNode{}, false
}

// knows is true when the member's node has the node id in its table, past the handshake.
func (m Member) knows(id string) bool {
	n, ok := m.node(id)
	return ok && !n.Handshake()
}

// ActionKind is a cluster command.
type ActionKind string

const (
	// Meet: CLUSTER MEET Addr (Bus), sent to On.
	Meet ActionKind = "Meet"
	// Announce: On announces Announced (cluster-announce-*, CONFIG SET).
	Announce ActionKind = "Announce"
	// AddSlots: CLUSTER ADDSLOTSRANGE Ranges, sent to On, the shard's primary.
	AddSlots ActionKind = "AddSlots"
	// Replicate: CLUSTER REPLICATE NodeID, sent to On; Addr, when set, is the old address its
	// replication follows instead of NodeID's.
	Replicate ActionKind = "Replicate"
	// Forget: CLUSTER FORGET NodeID, sent to On (to every node, within a minute).
	Forget ActionKind = "Forget"
	// Rejoin: CLUSTER MEET Addr, sent to On, whose table has the node NodeID at another
	// address: the handshake finds an ID it knows, and Redis moves that node to the new address.
	Rejoin ActionKind = "Rejoin"
)

// Action is one command to one node.
type Action struct {
	Kind ActionKind
	// On is the pod whose node gets the command.
	On   string
	Addr string
	// Bus is Addr's cluster bus port, 0 for its port + 10000.
	Bus       int
	Announced redis.Announced
	Ranges    []redis.SlotRange
	NodeID    string
	// Slot is the slot of Stable.
	Slot int
}

func (a Action) String() string {
	switch a.Kind {
	case Meet:
		return fmt.Sprintf("%s meets %s", a.On, a.Addr)
	case Announce:
		if a.Announced.Port == 0 {
			return fmt.Sprintf("%s announces its pod's address %s again", a.On, a.Announced.IP)
		}
		return fmt.Sprintf("%s announces %s:%d (bus port %d)", a.On, a.Announced.IP, a.Announced.Port, a.Announced.BusPort)
	case AddSlots:
		return fmt.Sprintf("%s serves slots %v", a.On, a.Ranges)
	case Replicate:
		if a.Addr != "" {
			return fmt.Sprintf("%s replicates %s at its address now: its replication still followed %s", a.On, a.NodeID, a.Addr)
		}
		return fmt.Sprintf("%s replicates %s", a.On, a.NodeID)
	case Stable:
		return fmt.Sprintf("%s closes slot %d, whose other end is gone", a.On, a.Slot)
	case Rejoin:
		return fmt.Sprintf("%s meets %s at its new address %s", a.On, a.NodeID, a.Addr)
	}
	return fmt.Sprintf("%s forgets %s", a.On, a.NodeID)
}

// Shard is one shard as the nodes see it.
type Shard struct {
	Index int
	// Primary is the pod serving the shard's slots; empty when none does.
	Primary  string
	Replicas []string
	Slots    []redis.SlotRange
}

// Plan is what Decide found, and what to send.
type Plan struct {
	Actions []Action
	// Moves are the slots to move, in order, once Actions are done (moves.go).
	Moves  []Move
	Shards []Shard
	// Drained are the shards being removed (at or past the shards wanted) that serve no slot:
	// their pods may go.
	Drained []int
	// Waiting says what the cluster waits for before it is whole; empty when it is.
	Waiting string
}

// SlotsOf is the range of hash slots shard serves out of shards, spread evenly.
func SlotsOf(shard, shards int) redis.SlotRange {
	return redis.SlotRange{Start: shard * redis.SlotCount / shards, End: (shard+1)*redis.SlotCount/shards - 1}
}

// Layout is the slots each shard is given when no node serves them, by shard index.
type Layout [][]redis.SlotRange

// EvenLayout gives shard i SlotsOf(i, shards): a new cluster's slots, spread evenly.
func EvenLayout(shards int) Layout {
	out := make(Layout, shards)
	for i := range shards {
		out[i] = []redis.SlotRange{SlotsOf(i, shards)}
	}
	return out
}

// Covers is true when the layout gives every slot to exactly one of shards shards.
func (l Layout) Covers(shards int) bool {
	if len(l) != shards {
		return false
	}
	seen := make([]bool, redis.SlotCount)
	n := 0
	for _, ranges := range l {
		for _, r := range ranges {
			for s := r.Start; s <= r.End; s++ {
				if s < 0 || s >= redis.SlotCount || seen[s] {
					return false
				}
				seen[s] = true
				n++
			}
		}
	}
	return n == redis.SlotCount
}

// Decide returns the commands that bring the members to one cluster of shards shards, each
// with its primary serving its slots and the others replicating it, and the slots to move so
// that the slots are spread evenly (see the package's safety rule, and moves.go's). Members of
// shards at or past shards are of shards being removed: their slots move to the others.
func Decide(members []Member, shards int) Plan {
	return DecideLayout(members, shards, EvenLayout(shards))
}

// DecideLayout is Decide for a cluster whose unserved slots go to the shards as layout says (a
// restore gives each shard the slots its backup recorded); a layout that does not give every
// slot to exactly one shard is not used: the slots are spread evenly instead.
func DecideLayout(members []Member, shards int, layout Layout) Plan {
	if !layout.Covers(shards) {
		layout = EvenLayout(shards)
	}
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b Member) int { return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Ordinal, b.Ordinal)) })
	var answering []Member
	for _, m := range members {
		if _, ok := m.Self(); ok {
			answering = append(answering, m)
		}
	}
	plan := Plan{}
	if len(answering) == 0 {
		plan.Waiting = "no Redis node answers yet"
		return plan
	}
	if twice := claimedTwice(answering); twice != "" {
		// Which of them the others mean by that ID is unknown: nothing is sent.
		plan.Waiting = twice
		return plan
	}
	all := len(answering) == len(members)

	plan.Actions = append(plan.Actions, announcements(answering)...)

	// Every node meets the first: gossip then introduces them all to each other.
	anchor := answering[0]
	joined := true
	for _, m := range answering[1:] {
		self, _ := m.Self()
		if !anchor.knows(self.ID) {
			joined = false
			if addr, bus := m.Peer(); addr != "" {
				plan.Actions = append(plan.Actions, Action{Kind: Meet, On: anchor.Pod, Addr: addr, Bus: bus})
			}
		}
	}

	// A slot any answering node sees served is never given again.
	owned := servedSlots(answering)

	total := shards
	for _, m := range members {
		total = max(total, m.Shard+1)
	}
	for i := range total {
		var want []redis.SlotRange
		if i < shards {
			want = layout[i]
		}
		shard, actions, waiting := decideShard(i, want, answering, owned, all && joined)
		plan.Shards = append(plan.Shards, shard)
		plan.Actions = append(plan.Actions, actions...)
		if plan.Waiting == "" {
			plan.Waiting = waiting
		}
	}

	if all {
		forget, waiting := forgetGone(answering)
		plan.Actions = append(plan.Actions, forget...)
		if plan.Waiting == "" {
			plan.Waiting = waiting
		}
	} else if plan.Waiting == "" {
		plan.Waiting = fmt.Sprintf("%d of %d Redis nodes answer", len(answering), len(members))
	}
	if !joined && plan.Waiting == "" {
		plan.Waiting = "nodes are meeting"
	}
	if rejoin := rejoinMoved(answering); len(rejoin) > 0 {
		// Every other command waits for a view in which the nodes reach each other.
		plan.Actions = rejoin
		plan.Waiting = movedWaiting(rejoin)
		return plan
	}
	if plan.Waiting == "" && len(plan.Actions) == 0 {
		var stable []Action
		plan.Moves, stable, plan.Drained, plan.Waiting = decideMoves(plan, answering, shards)
		plan.Actions = append(plan.Actions, stable...)
	}
	return plan
}

// shardPrimary is the primary among the answering members of one shard: the node that serves
// slots (after a failover, the promoted replica; the one serving most, should two claim some);
// on a new cluster, the shard's first node that is a primary. Nil when none is a primary.
func shardPrimary(in []Member) *Member {
	var primary *Member
	for k := range in {
		self, _ := in[k].Self()
		if self.IsPrimary() && self.SlotCount() > 0 && (primary == nil || self.SlotCount() > selfOf(*primary).SlotCount()) {
			primary = &in[k]
		}
	}
	if primary == nil {
		for k := range in {
			if selfOf(in[k]).IsPrimary() {
				primary = &in[k]
				break
			}
		}
	}
	return primary
}

// Primaries are each shard's primary pod (shardPrimary), by shard index; a shard none of whose
// nodes answers as a primary has none.
func Primaries(members []Member) map[int]string {
	byShard := map[int][]Member{}
	for _, m := range members {
		if _, ok := m.Self(); ok {
			byShard[m.Shard] = append(byShard[m.Shard], m)
		}
	}
	out := map[int]string{}
	for shard, in := range byShard {
		if p := shardPrimary(in); p != nil {
			out[shard] = p.Pod
		}
	}
	return out
}

// servedSlots are the slots any of the members sees served.
func servedSlots(members []Member) []bool {
	owned := make([]bool, redis.SlotCount)
	for _, m := range members {
		for _, n := range m.Nodes {
			for _, r := range n.Slots {
				for s := max(r.Start, 0); s <= r.End && s < redis.SlotCount; s++ {
					owned[s] = true
				}
			}
		}
	}
	return owned
}

// decideShard finds the shard's primary, gives it the slots of want no node serves when assign
// allows, and attaches the shard's other nodes to it.
func decideShard(i int, want []redis.SlotRange, answering []Member, owned []bool, assign bool) (Shard, []Action, string) {
	shard := Shard{Index: i}
	var in []Member
	for _, m := range answering {
		if m.Shard == i {
			in = append(in, m)
		}
	}
	if len(in) == 0 {
		return shard, nil, fmt.Sprintf("no node of shard %d answers", i)
	}
	primary := shardPrimary(in)
	if primary == nil {
		return shard, nil, fmt.Sprintf("shard %d has no primary", i)
	}
	p := selfOf(*primary)
	if p.SlotCount() == 0 {
		if r, ok := replicaOfServingPrimary(in); ok {
			// The shard's data lives on in a replica whose primary is no pod's now (its volume
			// was lost): Redis Cluster promotes it once the primary is agreed failed. Pointing
			// it at an empty node would drop the data.
			return shard, nil, fmt.Sprintf("%s replicates a primary that serves shard %d's slots and is gone; it takes them over once the cluster agrees the primary failed", r, i)
		}
	}
	shard.Primary = primary.Pod
	var actions []Action
	waiting := ""
	var missing []redis.SlotRange
	for _, r := range want {
		missing = append(missing, unowned(r, owned)...)
	}
	if len(missing) > 0 {
		if assign {
			actions = append(actions, Action{Kind: AddSlots, On: primary.Pod, Ranges: missing})
		} else {
			waiting = "slots wait until every node answers and has joined"
		}
	}
	shard.Slots = p.Slots
	for _, m := range in {
		if m.Pod == primary.Pod {
			continue
		}
		self := selfOf(m)
		switch {
		case self.PrimaryID == p.ID && m.followsElsewhere(p.ID) != "":
			// Telling it its primary again moves its replication to the primary's address in
			// its table. Safe: it serves no slots, and it keeps following the same node.
			actions = append(actions, Action{Kind: Replicate, On: m.Pod, NodeID: p.ID, Addr: m.followsElsewhere(p.ID)})
		case self.PrimaryID == p.ID:
			shard.Replicas = append(shard.Replicas, m.Pod)
		case self.SlotCount() > 0:
			// Never: it would drop the keys of its slots.
			waiting = fmt.Sprintf("%s serves slots but belongs to shard %d, whose primary is %s", m.Pod, i, primary.Pod)
		case m.knows(p.ID):
			actions = append(actions, Action{Kind: Replicate, On: m.Pod, NodeID: p.ID})
		default:
			waiting = fmt.Sprintf("%s does not know %s yet", m.Pod, primary.Pod)
		}
	}
	return shard, actions, waiting
}

// replicaOfServingPrimary is a member that replicates a node that is none of the shard's pods
// and serves slots, as the member's own table says: the shard's data lives on in it.
func replicaOfServingPrimary(in []Member) (string, bool) {
	ids := map[string]bool{}
	for _, m := range in {
		ids[selfOf(m).ID] = true
	}
	for _, m := range in {
		self := selfOf(m)
		if self.PrimaryID == "" || ids[self.PrimaryID] {
			// Its primary is one of the shard's pods (one importing its first slots, seen by
			// the replica as their owner before it sees itself so): not gone.
			continue
		}
		if n, ok := m.node(self.PrimaryID); ok && n.SlotCount() > 0 {
			return m.Pod, true
		}
	}
	return "", false
}

// forgetGone forgets, on every node, the nodes that no pod is and that are gone: the cluster
// agreed they have failed, or their address answers with another node's ID (Redis then never
// marks them failed: with spec.expose a replaced pod keeps its Service's address, and its new
// node answers there at once). A pod that came back without its data directory is a new node,
// and the nodes of a removed shard are gone; each stays in every table until forgotten. Until
// such a node is gone, the cluster waits for it. A gone node that still serves slots is
// forgotten only when no node replicates it: every node of its shard came back without its data
// (no spec.storage), so its keys are nowhere, and its slots, free once it is forgotten, are given
// to its shard's new primary (a loss the controller reports). While a replica of it lives, Redis
// Cluster promotes that replica instead.
func forgetGone(answering []Member) ([]Action, string) {
	ids := map[string]bool{}
	replicated := map[string]bool{}
	for _, m := range answering {
		self := selfOf(m)
		ids[self.ID] = true
		if self.PrimaryID != "" {
			replicated[self.PrimaryID] = true
		}
	}
	var actions []Action
	waiting := ""
	for _, n := range knownNodes(answering) {
		if ids[n.ID] {
			continue
		}
		if !n.gone || (n.serves && replicated[n.ID]) {
			if waiting == "" {
				waiting = fmt.Sprintf("node %s at %s is no pod's; it is forgotten once the cluster agrees it has failed and no node replicates it", n.ID, cmp.Or(n.Addr, "an address another node took"))
			}
			continue
		}
		for _, m := range answering {
			if m.knows(n.ID) {
				actions = append(actions, Action{Kind: Forget, On: m.Pod, NodeID: n.ID})
			}
		}
	}
	return actions, waiting
}

// knownNode is a node as all the answering tables describe it.
type knownNode struct {
	redis.ClusterNode
	gone   bool // a table says the cluster agreed it failed, or that its address answers with another node's ID
	serves bool // a table says it serves slots
}

// knownNodes are the nodes past the handshake in any answering member's table, each once, in
// the order the members list them. A node that only some tables still hold (its member did not
// answer when the others forgot it, or learnt of it later) is forgotten there too; judging it by
// every table keeps the rule of forgetGone: gone if one says so, serving if one says so.
func knownNodes(answering []Member) []knownNode {
	var out []knownNode
	at := map[string]int{}
	for _, m := range answering {
		for _, n := range m.Nodes {
			if n.Handshake() {
				continue
			}
			i, ok := at[n.ID]
			if !ok {
				i = len(out)
				at[n.ID] = i
				out = append(out, knownNode{ClusterNode: n})
			}
			out[i].gone = out[i].gone || n.Failed() || n.AddressTaken()
			out[i].serves = out[i].serves || n.SlotCount() > 0
		}
	}
	return out
}

func selfOf(m Member) redis.ClusterNode {
	self, _ := m.Self()
	return self
}

// unowned are the ranges of r that no node serves.
func unowned(r redis.SlotRange, owned []bool) []redis.SlotRange {
	var out []redis.SlotRange
	for s := r.Start; s <= r.End; s++ {
		if owned[s] {
			continue
		}
		if len(out) > 0 && out[len(out)-1].End == s-1 {
			out[len(out)-1].End = s
		} else {
			out = append(out, redis.SlotRange{Start: s, End: s})
		}
	}
	return out
}
