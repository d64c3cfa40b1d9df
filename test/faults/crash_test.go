//go:build faults

package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"k8s.io/client-go/rest"
)

var (
	crashParallel = flag.Int("faults.crash-parallel", 4, "crash points tried at once (go test -parallel must allow as many)")
	crashRounds   = flag.Int("faults.crash-rounds", 1, "times each scenario's writes are listed and crashed at")
)

// errCrashed is what every request of a crashed operator gets: from the crash on, it sends
// nothing to the API server or to Redis, as a process that died would not.
var errCrashed = errors.New("the operator crashed here (fault suite)")

// crashAfter stands for an operator process that dies right after its limit-th write: a
// create, update, patch or delete the API server carried out, or a Redis command that changes
// a node (REPLICAOF, CONFIG SET, ACL SETUSER, CLIENT PAUSE/UNPAUSE/KILL, FAILOVER). From then on nothing it
// sends goes out. With limit 0 it never crashes and only lists its writes.
//
// An Event is listed but is no crash point: nothing reads Events back, so a crash right after one
// leaves what a crash right after the write before it leaves, and where an Event falls among the
// writes is its broadcaster's timing (it posts them from a goroutine of its own), not the
// operator's logic. (They were 34 of 233 points, 2026-12-07.)
type crashAfter struct {
	limit   int
	crashed chan struct{}

	mu        sync.Mutex
	writes    []string
	points    int // the writes that are crash points
	lastWrite time.Time
	dead      bool
}

// isCrashPoint is whether a write, as crashAfter lists it, is a crash point: any but an Event's.
func isCrashPoint(write string) bool {
	_, path, _ := strings.Cut(write, " ")
	return path != "events" && !strings.HasPrefix(path, "events/")
}

// crashPoints counts the crash points among writes.
func crashPoints(writes []string) int {
	n := 0
	for _, w := range writes {
		if isCrashPoint(w) {
			n++
		}
	}
	return n
}

func newCrashAfter(limit int) *crashAfter {
	return &crashAfter{limit: limit, crashed: make(chan struct{})}
}

func (c *crashAfter) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// wrote records a write that took effect, and dies if it was the limit-th crash point.
func (c *crashAfter) wrote(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	c.writes = append(c.writes, what)
	c.lastWrite = time.Now()
	if !isCrashPoint(what) {
		return
	}
	c.points++
	if c.points == c.limit {
		c.dead = true
		close(c.crashed)
	}
}

// Writes are the writes so far, in order.
func (c *crashAfter) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.writes...)
}

// quietFor is how long the operator has written nothing since its last write; 0 before its first.
// Every operator writes once it works (it gives each node its own user), and one slow to start
// on a loaded machine wrote nothing for seconds: counted from its start, it looked converged while
// the status it read was the crashed operator's (a CI run judged such a status, 2026-12-07).
func (c *crashAfter) quietFor() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastWrite.IsZero() {
		return 0
	}
	return time.Since(c.lastWrite)
}

// wrap returns a copy of cfg whose requests go through c: refused once dead, and counted when
// they are writes the API server carried out.
func (c *crashAfter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if c.isDead() {
				return nil, errCrashed
			}
			resp, err := rt.RoundTrip(req)
			switch req.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				// A review (may I?) is a POST that stores nothing: not a write to crash after.
				if err == nil && resp.StatusCode < 300 && !strings.HasSuffix(req.URL.Path, "reviews") {
					c.wrote(req.Method + " " + objectPath(req.URL.Path))
				}
			}
			return resp, err
		})
	})
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// objectPath is the part of a request path after the namespace: "pods/sessions-0",
// "redisclusters/sessions/status", "events".
func objectPath(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return strings.Join(parts[i+2:], "/")
		}
	}
	return path
}

// redisHook is c as a go-redis hook, for the operator's Redis clients.
type redisHook struct{ c *crashAfter }

func (h redisHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.c.isDead() {
			return nil, errCrashed
		}
		return next(ctx, network, addr)
	}
}

func (h redisHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.c.isDead() {
			cmd.SetErr(errCrashed)
			return errCrashed
		}
		err := next(ctx, cmd)
		if what := redisWrite(cmd); what != "" && err == nil {
			h.c.wrote(what)
		}
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if h.c.isDead() {
			for _, cmd := range cmds {
				cmd.SetErr(errCrashed)
			}
			return errCrashed
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if what := redisWrite(cmd); what != "" && cmd.Err() == nil {
				h.c.wrote(what)
			}
		}
		return err
	}
}

// redisWrite names a command that changes a node ("" for reads), without its secret values:
// "redis REPLICAOF 127.0.0.7 6379", "redis CONFIG SET requirepass".
func redisWrite(cmd goredis.Cmder) string {
	args := cmd.Args()
	word := func(i int) string {
		if i < len(args) {
			return strings.ToUpper(fmt.Sprint(args[i]))
		}
		return ""
	}
	switch cmd.Name() {
	case "replicaof", "slaveof":
		return strings.TrimSpace("redis REPLICAOF " + word(1) + " " + word(2))
	case "failover":
		return "redis FAILOVER"
	case "acl":
		if word(1) == "SETUSER" || word(1) == "DELUSER" {
			return "redis ACL " + word(1) + " " + strings.ToLower(word(2)) // the user, never its password
		}
	case "config":
		if word(1) == "SET" {
			return "redis CONFIG SET " + strings.ToLower(word(2))
		}
	case "client":
		switch word(1) {
		case "PAUSE", "UNPAUSE", "KILL":
			return "redis CLIENT " + word(1)
		}
	case "cluster":
		switch word(1) {
		case "MEET", "ADDSLOTSRANGE", "REPLICATE", "FORGET":
			return "redis CLUSTER " + word(1)
		case "SETSLOT":
			return "redis CLUSTER SETSLOT " + word(2) + " " + word(3)
		}
	case "migrate":
		// MIGRATE host port "" db timeout [AUTH2 user password] KEYS key...: the keys only.
		for i, a := range args {
			if strings.EqualFold(fmt.Sprint(a), "KEYS") {
				return fmt.Sprintf("redis MIGRATE %d keys", len(args)-i-1)
			}
		}
		return "redis MIGRATE"
	}
	return ""
}
