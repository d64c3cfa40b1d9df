package shards

import (
	"fmt"
	"slices"
	"strings"
)

// A pod deleted and created again comes back with its nodes.conf (on its volume), so with its
// node ID, its slots and its place as primary or replica, but with a new pod IP. Every other
// node still looks for it at the old address. When one pod moves, it reaches the others, which
// learn its address from its messages; when every pod moves at once (a node reboot, a namespace
// restarted), no node reaches any other, and the cluster stays down with its data on disk.
// Redis's own answer is a CLUSTER MEET at the new address: the handshake finds a node ID it
// already knows, and Redis updates that node's address instead of adding a node.
//
// The safety rule: a rejoin only tells a node where a node it already knows by ID is now. It
// never assigns, moves or drops a slot, never changes who replicates whom, and is sent only for
// an ID exactly one answering pod claims: when two pods claim one ID (a volume copied), nothing
// at all is sent until one of them is gone, since which of the two the others mean is unknown.

// rejoinMoved are the meets that tell each answering node the address of every other answering
// node it knows by ID at another address (or at none: noaddr).
func rejoinMoved(answering []Member) []Action {
	var out []Action
	for _, m := range answering {
		for _, other := range answering {
			addr, bus := other.Peer()
			if other.Pod == m.Pod || addr == "" {
				continue
			}
			id := selfOf(other).ID
			known, ok := m.node(id)
			if !ok || known.Handshake() || known.Addr == addr {
				continue
			}
			out = append(out, Action{Kind: Rejoin, On: m.Pod, NodeID: id, Addr: addr, Bus: bus})
		}
	}
	return out
}

// movedWaiting says what the cluster waits for while rejoins are sent: the pods whose nodes
// others look for at an old address.
func movedWaiting(rejoin []Action) string {
	var ids []string
	for _, a := range rejoin {
		if !slices.Contains(ids, a.NodeID) {
			ids = append(ids, a.NodeID)
		}
	}
	return fmt.Sprintf("%d Redis nodes came back at new addresses that other nodes do not know yet: they are introduced again", len(ids))
}

// claimedTwice names the pods that claim the same node ID; empty when each ID is one pod's.
func claimedTwice(answering []Member) string {
	byID := map[string][]string{}
	var ids []string
	for _, m := range answering {
		id := selfOf(m).ID
		if len(byID[id]) == 0 {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], m.Pod)
	}
	for _, id := range ids {
		if pods := byID[id]; len(pods) > 1 {
			return fmt.Sprintf("pods %s all claim Redis node ID %s (a copied volume?): no cluster command is sent until only one does; delete the others' nodes.conf",
				strings.Join(pods, ", "), id)
		}
	}
	return ""
}
