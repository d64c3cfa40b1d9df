package node

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
)

// Network is a local cluster's own network, as a machine room's switch and its control plane
// machine would be: a namespace (the control plane's) holding a bridge with the control plane's
// address, which every node's namespace joins through a veth pair. Each node's pods live in a
// CIDR of its own; every node and the control plane route each other node's pod CIDR to that
// node, so that pods reach pods on any node, by their own addresses (no masquerade). Cutting a
// node takes its link down: nothing reaches it, and it reaches nothing.
type Network struct {
	// Netns is the control plane's namespace: the API server, the cluster's DNS and what the
	// harness runs beside them listen at ControlPlaneIP there.
	Netns *Netns
	mu    sync.Mutex
	nodes map[string]*attached
}

// attached is a node's place on the network.
type attached struct {
	netns *Netns
	addrs Addrs
	// link is the veth end on the bridge, in the control plane's namespace.
	link string
}

// The network's addresses.
const (
	// ControlPlaneIP is the control plane's address on the network.
	ControlPlaneIP = "10.87.0.1"
	// ServiceCIDR is where the API server allocates ClusterIPs, which kube-proxy routes.
	ServiceCIDR = "10.96.0.0/16"
	// ClusterCIDR holds every node's pod CIDR.
	ClusterCIDR   = "10.244.0.0/16"
	networkSubnet = "/24"
)

// Addrs are a node's addresses: its own on the network, and its pods' CIDR.
type Addrs struct {
	IP, PodCIDR string
}

// AddrsOf are the addresses of the index-th node (from 1): 10.87.0.(10+index), and pods in
// 10.244.<index>.0/24.
func AddrsOf(index int) Addrs {
	return Addrs{IP: "10.87.0." + strconv.Itoa(10+index), PodCIDR: "10.244." + strconv.Itoa(index) + ".0/24"}
}

// CreateNetwork makes the control plane's namespace, name, with the network's bridge. It
// forwards between the nodes (a router's job: the kubelet's namespaces do it for their pods).
// The network is a tenant of the machine until Delete (tenants.go): two clusters may run at once.
func CreateNetwork(name string) (*Network, error) {
	if err := enter(name); err != nil {
		return nil, err
	}
	n, err := CreateNetns(name)
	if err != nil {
		leave(name)
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", "lan0", "type", "bridge"},
		{"addr", "add", ControlPlaneIP + networkSubnet, "dev", "lan0"},
		{"link", "set", "lan0", "up"},
		// A route for every address: ClusterIPs are routed nowhere until kube-proxy's rules
		// rewrite them, and without a route a connection fails before the rules are read.
		{"route", "add", "default", "dev", "lan0"},
	} {
		if err := n.IP(args...); err != nil {
			n.Delete()
			leave(name)
			return nil, err
		}
	}
	if err := n.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		n.Delete()
		leave(name)
		return nil, err
	}
	return &Network{Netns: n, nodes: map[string]*attached{}}, nil
}

// Holds records dir as the network's (a node's directory, the cluster's): what a cluster whose
// test process was killed left there is removed by the next cluster to start (tenants.go).
func (nw *Network) Holds(dir string) error { return addDir(nw.Netns.Name, dir) }

// AddNode makes the namespace of node name, the index-th (from 1), joined to the network with
// the addresses AddrsOf(index), and routes its pod CIDR from the control plane and every other
// node (and theirs from it). The namespace is named after the network's (<network>-<index>):
// node names repeat from one cluster to the next, and two clusters may run at once.
func (nw *Network) AddNode(name string, index int) (*Netns, Addrs, error) {
	addrs := AddrsOf(index)
	n, err := CreateNetns(nw.Netns.Name + "-" + strconv.Itoa(index))
	if err != nil {
		return nil, addrs, err
	}
	link := "veth" + strconv.Itoa(index)
	fail := func(err error) (*Netns, Addrs, error) {
		_ = nw.Netns.IP("link", "delete", link)
		n.Delete()
		return nil, addrs, err
	}
	// Both ends are made in the control plane's namespace, then one moves into the node's.
	if err := nw.Netns.IP("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", n.Name); err != nil {
		return fail(err)
	}
	for _, args := range [][]string{
		{"link", "set", link, "master", "lan0"},
		{"link", "set", link, "up"},
		{"route", "add", addrs.PodCIDR, "via", addrs.IP},
	} {
		if err := nw.Netns.IP(args...); err != nil {
			return fail(err)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", addrs.IP + networkSubnet, "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", ControlPlaneIP},
	} {
		if err := n.IP(args...); err != nil {
			return fail(err)
		}
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, other := range nw.nodes {
		if err := other.netns.IP("route", "add", addrs.PodCIDR, "via", addrs.IP); err != nil {
			return fail(err)
		}
		if err := n.IP("route", "add", other.addrs.PodCIDR, "via", other.addrs.IP); err != nil {
			return fail(err)
		}
	}
	nw.nodes[name] = &attached{netns: n, addrs: addrs, link: link}
	return n, addrs, nil
}

// RemoveNode deletes a node's namespace and its routes (its link goes with the namespace).
func (nw *Network) RemoveNode(name string) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	a, ok := nw.nodes[name]
	if !ok {
		return
	}
	delete(nw.nodes, name)
	for _, other := range nw.nodes {
		_ = other.netns.IP("route", "delete", a.addrs.PodCIDR)
	}
	_ = nw.Netns.IP("route", "delete", a.addrs.PodCIDR)
	a.netns.Delete()
}

// Cut takes a node's link down: it reaches no other node and not the control plane, and
// nothing reaches it, as when its cable is pulled. Join puts it back.
func (nw *Network) Cut(name string) error { return nw.setLink(name, "down") }

// Join puts a node's link back up.
func (nw *Network) Join(name string) error { return nw.setLink(name, "up") }

func (nw *Network) setLink(name, state string) error {
	nw.mu.Lock()
	a, ok := nw.nodes[name]
	nw.mu.Unlock()
	if !ok {
		return fmt.Errorf("no node %s on the network", name)
	}
	if err := nw.Netns.IP("link", "set", a.link, state); err != nil {
		return err
	}
	if state == "up" {
		// A link that was down lost the routes through it; the node's own are kept (its end
		// stayed up).
		return nw.Netns.IP("route", "replace", a.addrs.PodCIDR, "via", a.addrs.IP)
	}
	return nil
}

// ExposeToPods makes addr (127.0.0.1:<port> on the machine: an S3 server the test runs) answer
// at the control plane's address, same port, which pods of every node reach; it returns that
// address. The listener closes with stop.
func (nw *Network) ExposeToPods(addr string) (exposed string, stop func(), err error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, err
	}
	exposed = net.JoinHostPort(ControlPlaneIP, port)
	stop, err = nw.forward(exposed, addr)
	return exposed, stop, err
}

// ForwardFromMachine makes addr (127.0.0.1:<port> on the machine: the registry) answer at the
// same address inside the control plane's namespace, where OLM's processes pull from it as the
// nodes' containerd do in theirs. The listener closes with stop.
func (nw *Network) ForwardFromMachine(addr string) (stop func(), err error) {
	return nw.forward(addr, addr)
}

// forward listens at at inside the control plane's namespace and joins each connection to one
// to the machine's to; the listener closes with stop.
func (nw *Network) forward(at, to string) (stop func(), err error) {
	l, err := nw.Netns.Listen("tcp", at)
	if err != nil {
		return nil, fmt.Errorf("listening on %s in the control plane's namespace: %w", at, err)
	}
	go Forward(l, func() (net.Conn, error) { return net.Dial("tcp", to) })
	return func() { _ = l.Close() }, nil
}

// Delete removes every node's namespace and the network's.
func (nw *Network) Delete() {
	nw.mu.Lock()
	names := make([]string, 0, len(nw.nodes))
	for name := range nw.nodes {
		names = append(names, name)
	}
	nw.mu.Unlock()
	for _, name := range names {
		nw.RemoveNode(name)
	}
	nw.Netns.Delete()
	leave(nw.Netns.Name)
}

// Sysctl writes a network sysctl of the namespace (its own copy: net.ipv4.ip_forward, ...).
func (n *Netns) Sysctl(key, value string) error {
	return n.do(func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	})
}

// AddOutside makes a namespace of a machine on the network that is no node: the index-th
// address (AddrsOf(index).IP), a route to the network's /24 only, no kube-proxy, no route to
// the pods or to Services. What it reaches it reaches as a client outside the cluster would: the
// nodes' addresses, and the addresses a load balancer answers ARP for. remove deletes it.
func (nw *Network) AddOutside(index int) (n *Netns, ip string, remove func(), err error) {
	ip = AddrsOf(index).IP
	n, err = CreateNetns(nw.Netns.Name + "-" + strconv.Itoa(index))
	if err != nil {
		return nil, "", nil, err
	}
	link := "veth" + strconv.Itoa(index)
	remove = func() {
		_ = nw.Netns.IP("link", "delete", link)
		n.Delete()
	}
	if err := nw.Netns.IP("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", n.Name); err != nil {
		remove()
		return nil, "", nil, err
	}
	for _, step := range []struct {
		ns   *Netns
		args []string
	}{
		{nw.Netns, []string{"link", "set", link, "master", "lan0"}},
		{nw.Netns, []string{"link", "set", link, "up"}},
		{n, []string{"addr", "add", ip + networkSubnet, "dev", "eth0"}},
		{n, []string{"link", "set", "eth0", "up"}},
	} {
		if err := step.ns.IP(step.args...); err != nil {
			remove()
			return nil, "", nil, err
		}
	}
	return n, ip, remove, nil
}
