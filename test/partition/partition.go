// Package partition cuts the network between the parts of a test cluster for real: packet
// filters (iptables) inside the network namespaces of the pods, the operator or a namespace the
// test made, never in the machine's own. A cut drops packets, both ways or one way, between
// members, or between members and an address (the API server's); Heal removes every cut, and
// Close, which a test registers with t.Cleanup through New, removes the filters' chains too, even
// when the test failed.
//
// A member's namespace is held open by a file descriptor of this process from the moment it is
// added: a pod whose container restarts keeps its namespace (the sandbox holds it), and its rules
// can still be removed through the descriptor when the container's process is gone.
//
// A delay holds packets before they go (delay.go): the kernel of this machine has no sch_netem
// (tc's netem qdisc is unknown), so packets are queued to this process (NFQUEUE) and let go late.
package partition

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// chain holds every rule this package adds in a namespace: one jump from INPUT and OUTPUT,
// flushed to heal, deleted to close.
const chain = "TEST-PARTITION"

// Member is one end of a cut: a process's network namespace and the address it is known by.
type Member struct {
	// Name is for messages.
	Name string
	// Netns is the namespace's file: /proc/<pid>/ns/net of one of its processes, or
	// /run/netns/<name>.
	Netns string
	// IP is the member's address as the others see it.
	IP string
}

// Net holds the cuts of one test.
type Net struct {
	mu sync.Mutex
	// open are the namespaces this Net has a chain in, by the path it was given, each held
	// open (its file) so that it can be reached for as long as the test runs.
	open map[string]*os.File
	// queues are the namespaces' delaying queues, by the same path.
	queues map[string]*delayQueue
}

// New is a Net whose cuts and chains are removed when tb ends.
func New(tb testing.TB) *Net {
	n := &Net{open: map[string]*os.File{}, queues: map[string]*delayQueue{}}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Errorf("removing the partition's rules: %v", err)
		}
	})
	return n
}

// Cut drops every packet between each member of a and each member of b, both ways: the rules sit
// in a's namespaces (a member of b may be one the test cannot enter, such as itself).
func (n *Net) Cut(a, b []Member) error {
	for _, m := range a {
		for _, o := range b {
			if err := n.drop(m, "-d", o.IP); err != nil {
				return err
			}
			if err := n.drop(m, "-s", o.IP); err != nil {
				return err
			}
		}
	}
	return nil
}

// CutFrom drops what each member of a sends to each member of b, one way: b's packets still reach
// a (a TCP connection from a to b breaks all the same, its acknowledgements lost; datagrams and
// connections from b to a whose replies a sends are cut too).
func (n *Net) CutFrom(a, b []Member) error {
	for _, m := range a {
		for _, o := range b {
			if err := n.drop(m, "-d", o.IP); err != nil {
				return err
			}
		}
	}
	return nil
}

// CutAddress drops every packet between each member of a and the TCP port of ip, both ways: the
// API server (its ClusterIP as the pod dials it, before any rewrite), or one node's Redis port.
func (n *Net) CutAddress(a []Member, ip string, port int) error {
	p := strconv.Itoa(port)
	for _, m := range a {
		if err := n.drop(m, "-p", "tcp", "-d", ip, "--dport", p); err != nil {
			return err
		}
		if err := n.drop(m, "-p", "tcp", "-s", ip, "--sport", p); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every cut and delay; the chains stay, empty.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for path, f := range n.open {
		if err := iptables(f, "-F", chain); err != nil {
			errs = append(errs, fmt.Errorf("healing %s: %w", path, err))
		}
	}
	for _, q := range n.queues {
		q.active = false
	}
	return errors.Join(errs...)
}

// Close removes every cut and every chain, and lets the namespaces go.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for path, f := range n.open {
		for _, args := range [][]string{{"-D", "INPUT", "-j", chain}, {"-D", "OUTPUT", "-j", chain}, {"-F", chain}, {"-X", chain}} {
			if err := iptables(f, args...); err != nil {
				errs = append(errs, fmt.Errorf("closing %s: %w", path, err))
			}
		}
	}
	// Once nothing is queued any more: a packet queued to a queue that is gone would be dropped
	// (or, --queue-bypass, let through at once).
	for path, q := range n.queues {
		q.close()
		delete(n.queues, path)
	}
	for path, f := range n.open {
		f.Close()
		delete(n.open, path)
	}
	return errors.Join(errs...)
}

// Rules are the rules of m's namespace's chain, as iptables -S lists them: what is cut now.
func (n *Net) Rules(m Member) ([]string, error) {
	f, err := n.enter(m)
	if err != nil {
		return nil, err
	}
	out, err := iptablesOutput(f, "-S", chain)
	if err != nil {
		return nil, err
	}
	var rules []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "-A ") {
			rules = append(rules, line)
		}
	}
	return rules, nil
}

// drop adds a rule dropping the packets that match to m's chain. The chain is reached from INPUT
// and OUTPUT alike: a rule on the remote's address as destination (-d) only matches what m sends,
// one on it as source (-s) only what m receives.
func (n *Net) drop(m Member, match ...string) error {
	f, err := n.enter(m)
	if err != nil {
		return err
	}
	if err := iptables(f, append(append([]string{"-A", chain}, match...), "-j", "DROP")...); err != nil {
		return fmt.Errorf("cutting %s: %w", m.Name, err)
	}
	return nil
}

// enter holds m's namespace open and makes the chain in it, once.
func (n *Net) enter(m Member) (*os.File, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f, ok := n.open[m.Netns]; ok {
		return f, nil
	}
	f, err := os.Open(m.Netns)
	if err != nil {
		return nil, fmt.Errorf("opening the network namespace of %s: %w", m.Name, err)
	}
	for _, args := range [][]string{{"-N", chain}, {"-I", "INPUT", "1", "-j", chain}, {"-I", "OUTPUT", "1", "-j", chain}} {
		if err := iptables(f, args...); err != nil {
			f.Close()
			return nil, fmt.Errorf("making the partition chain for %s: %w", m.Name, err)
		}
	}
	n.open[m.Netns] = f
	return f, nil
}

// iptables runs iptables with args in the namespace f holds open.
func iptables(f *os.File, args ...string) error {
	_, err := iptablesOutput(f, args...)
	return err
}

func iptablesOutput(f *os.File, args ...string) (string, error) {
	// The namespace as this process holds it: valid while f is open, whatever became of the
	// process it was opened through.
	ns := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "--", "iptables", "-w"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
