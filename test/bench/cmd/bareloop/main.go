// Command bareloop is the reference for the operator's health checks in BenchmarkHealthCheck100x3:
// a bare Go loop that holds, for each Redis node, one command connection and one subscribed watch
// connection (as the operator's pool does), and sends each node, every interval, the commands the
// operator sent it per interval (measured from the nodes' INFO commandstats), pipelined in one round
// trip, on the operator's ticks (controllers.untilCheckTick), and nothing else: no Kubernetes, no
// status, no metrics, no decisions. It runs until SIGTERM.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func main() {
	nodes := flag.String("nodes", "", "a file of lines `address password`")
	rates := flag.String("rates", "", "commands per node per interval: name=rate,... (auth, info, ping, role)")
	interval := flag.Duration("interval", time.Second, "how often each node is checked")
	flag.Parse()
	if err := run(*nodes, *rates, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "bareloop:", err)
		os.Exit(1)
	}
}

func run(nodesFile, ratesText string, interval time.Duration) error {
	perCheck := map[string]float64{}
	for _, pair := range strings.Split(ratesText, ",") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("rate %q: want name=rate", pair)
		}
		r, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fmt.Errorf("rate %q: %w", pair, err)
		}
		perCheck[name] = r
	}
	f, err := os.Open(nodesFile)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sc := bufio.NewScanner(f)
	var n int
	for sc.Scan() {
		addr, password, _ := strings.Cut(sc.Text(), " ")
		// Every node's checks on the interval's ticks (counted from the epoch), as the operator's
		// are (controllers.untilCheckTick).
		go checkNode(ctx, addr, password, perCheck, interval, interval-time.Duration(time.Now().UnixNano()%int64(interval)))
		n++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Printf("checking %d nodes every %s: %v per check\n", n, interval, perCheck)
	<-ctx.Done()
	// What it sent, so that the nodes' counts can be held against it: a command the node
	// rejects (NOAUTH after a refused AUTH) or a pipeline that timed out is not in their calls.
	tally.mu.Lock()
	defer tally.mu.Unlock()
	fmt.Printf("bareloop sent %d pipelines: %v; errors: %v\n", tally.pipelines, tally.sent, tally.errors)
	return nil
}

// tally counts what every node's loop sent, and its errors by message.
var tally = struct {
	mu        sync.Mutex
	pipelines int
	sent      map[string]int
	errors    map[string]int
}{sent: map[string]int{}, errors: map[string]int{}}

func checkNode(ctx context.Context, addr, password string, perCheck map[string]float64, interval, offset time.Duration) {
	opts := &goredis.Options{Addr: addr, Password: password, PoolSize: 1, MaxRetries: -1, Protocol: 2, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	c := goredis.NewClient(opts)
	defer c.Close()
	watch := goredis.NewClient(opts).Subscribe(ctx, "bareloop:watch")
	defer func() { _ = watch.Close() }()
	owed := map[string]float64{}
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sent := map[string]int{}
		cmds, _ := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for name, rate := range perCheck {
				owed[name] += rate
				for ; owed[name] >= 1; owed[name]-- {
					send(ctx, p, name, password)
					sent[name]++
				}
			}
			return nil
		})
		tally.mu.Lock()
		tally.pipelines++
		for name, n := range sent {
			tally.sent[name] += n
		}
		for _, cmd := range cmds {
			if cmd.Err() != nil && ctx.Err() == nil {
				tally.errors[cmd.Name()+": "+cmd.Err().Error()]++
			}
		}
		tally.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// send queues the command the operator sends under that name, with its arguments.
func send(ctx context.Context, p goredis.Pipeliner, name, password string) {
	switch name {
	case "auth":
		p.Auth(ctx, password)
	case "info":
		p.Info(ctx, "replication", "keyspace")
	case "ping":
		p.Ping(ctx)
	case "role":
		p.Do(ctx, "ROLE")
	}
}
