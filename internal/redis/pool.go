package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The pool's watch reconnects after a break, waiting longer after each failed attempt.
const (
	watchBackoffMin = 50 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// watchChannel is the channel each watch connection subscribes to. Nothing is published on it:
// a subscribed connection is one the server never times out and that waits on a read, so a
// server that goes away is seen at once.
const watchChannel = "redis-operator:watch"

// ClientName is how the operator's connections show in CLIENT LIST.
const ClientName = "redis-operator"

// Pool holds, for each owner (a RedisCluster), one connection per Redis node that every check
// and command reuses, and one watch connection per node that waits on a read. A redis-server
// that dies closes its sockets: the watch sees it at once and calls onChange with the node's
// owner, without waiting for the next check. onChange is called too when a watch that broke
// connects again (the node is back). A hung node keeps its sockets open and is judged by the
// checks' timeouts, as before.
type Pool[K comparable] struct {
	opts     Options
	onChange func(K)

	mu     sync.Mutex
	sets   map[K]*heldSet
	closed bool
}

// heldSet is one owner's nodes, all logged in with one Login.
type heldSet struct {
	login Login
	nodes map[string]*heldNode // by address
}

// heldNode is a node's command connection and its watch.
type heldNode struct {
	*node
	stop context.CancelFunc
	done chan struct{}
}

// Close keeps the connection: the pool closes it when the node goes.
func (h *heldNode) Close() error { return nil }

// NewPool returns an empty pool whose connections use opts (but not opts.Password: each Hold
// says its own). onChange must not block.
func NewPool[K comparable](opts Options, onChange func(K)) *Pool[K] {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Pool[K]{opts: opts, onChange: onChange, sets: map[K]*heldSet{}}
}

// Hold keeps connections to exactly these addresses for owner, logged in with login: new
// addresses get a connection and a watch, addresses no longer listed are closed, and a changed
// login (password or TLS configuration) reconnects them all. It returns a Dialer over the held
// nodes; an address not held gets a connection of its own, closed by its Close.
func (p *Pool[K]) Hold(owner K, login Login, addrs []string) Dialer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return NewDialer(p.withLogin(login))
	}
	set := p.sets[owner]
	if set != nil && set.login != login {
		set.closeAll()
		set = nil
	}
	if set == nil {
		set = &heldSet{login: login, nodes: map[string]*heldNode{}}
		p.sets[owner] = set
	}
	wanted := map[string]bool{}
	for _, addr := range addrs {
		wanted[addr] = true
		if set.nodes[addr] == nil {
			set.nodes[addr] = p.open(owner, addr, login)
		}
	}
	for addr, n := range set.nodes {
		if !wanted[addr] {
			n.close()
			delete(set.nodes, addr)
		}
	}
	held := make(map[string]*heldNode, len(set.nodes))
	for addr, n := range set.nodes {
		held[addr] = n
	}
	oneShot := NewDialer(p.withLogin(login))
	return func(addr string) Node {
		if n := held[addr]; n != nil {
			return n
		}
		return oneShot(addr)
	}
}

// Release closes owner's connections: its RedisCluster is gone.
func (p *Pool[K]) Release(owner K) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if set := p.sets[owner]; set != nil {
		set.closeAll()
		delete(p.sets, owner)
	}
}

// Close closes every connection; Hold then only gives connections of their own.
func (p *Pool[K]) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for owner, set := range p.sets {
		set.closeAll()
		delete(p.sets, owner)
	}
	p.closed = true
}

// Held is the number of nodes with a held connection, over every owner.
func (p *Pool[K]) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, set := range p.sets {
		n += len(set.nodes)
	}
	return n
}

func (p *Pool[K]) withLogin(login Login) Options {
	return p.opts.WithLogin(login)
}

func (p *Pool[K]) open(owner K, addr string, login Login) *heldNode {
	opts := p.withLogin(login)
	ctx, stop := context.WithCancel(context.Background())
	h := &heldNode{node: &node{c: newClient(addr, opts), opts: opts, held: true}, stop: stop, done: make(chan struct{})}
	watcher := newClient(addr, opts)
	go func() {
		defer close(h.done)
		defer watcher.Close()
		watch(ctx, watcher, func() { p.onChange(owner) })
	}()
	return h
}

func (s *heldSet) closeAll() {
	for addr, n := range s.nodes {
		n.close()
		delete(s.nodes, addr)
	}
}

// close ends the watch, waits for it, and closes the command connection.
func (h *heldNode) close() {
	h.stop()
	<-h.done
	_ = h.client().Close()
}

// watch keeps a subscribed connection to the node until ctx ends, and calls changed when an
// established connection breaks and when a broken one connects again. Attempts that fail
// (nothing listens, the password is refused) wait longer each time, up to watchBackoffMax.
func watch(ctx context.Context, c *goredis.Client, changed func()) {
	backoff := watchBackoffMin
	broken := false
	for ctx.Err() == nil {
		sub := c.Subscribe(ctx, watchChannel)
		// Closing the subscription is what ends a read that waits for ever.
		stopped := context.AfterFunc(ctx, func() { _ = sub.Close() })
		_, err := sub.Receive(ctx) // the subscription's confirmation: logged in and subscribed
		if err != nil {
			broken = true // when it connects, the node is back (or up for the first time)
		} else {
			if broken {
				changed()
			}
			broken, backoff = false, watchBackoffMin
			for err == nil {
				_, err = sub.Receive(ctx)
			}
			if ctx.Err() == nil {
				broken = true
				changed()
			}
		}
		stopped()
		_ = sub.Close()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, watchBackoffMax)
		}
	}
}
