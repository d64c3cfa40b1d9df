package redistest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Writer is the client of every test that checks that no acknowledged write is lost: it writes
// unique keys one at a time until stopped, and keeps those whose write was acknowledged.
type Writer struct {
	stop func()

	mu     sync.Mutex
	acked  []string
	tried  int
	errors []string
}

// WriterOptions say how a Writer reaches Redis and what counts as acknowledged.
type WriterOptions struct {
	// Client is the client of the next write, or an error when there is none now (a failover
	// under way, no pod labelled primary): that write is not sent and the error is counted.
	Client func(ctx context.Context) (goredis.UniversalClient, error)
	// CloseEach closes the client after each write: each write opens a connection of its own
	// (through a Service, kube-proxy picks the endpoint when a connection opens).
	CloseEach bool
	// Wait, when set, is the timeout of WAIT 1 after each SET: a write is acknowledged when a
	// replica has it. Zero: when the node took it (cluster mode, where the test checks slots).
	Wait time.Duration
	// Every is the pause between two writes.
	Every time.Duration
	// Prefix starts every key, followed by the write's number.
	Prefix string
}

// StartWriter starts writing; Stop ends it.
func StartWriter(opts WriterOptions) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{}
	done := make(chan struct{})
	w.stop = sync.OnceFunc(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			w.write(ctx, opts, fmt.Sprintf("%s%06d", opts.Prefix, i))
			select {
			case <-ctx.Done():
			case <-time.After(opts.Every):
			}
		}
	}()
	return w
}

func (w *Writer) write(ctx context.Context, opts WriterOptions, key string) {
	c, err := opts.Client(ctx)
	if err != nil {
		w.record(ctx, "", fmt.Errorf("no client: %w", err))
		// Not a hot loop while there is nothing to write to.
		time.Sleep(max(opts.Every, 20*time.Millisecond))
		return
	}
	if opts.CloseEach {
		defer func() { _ = c.Close() }()
	}
	w.mu.Lock()
	w.tried++
	w.mu.Unlock()
	if err := c.Set(ctx, key, key, 0).Err(); err != nil {
		w.record(ctx, "", err)
		return
	}
	if opts.Wait > 0 {
		if n, err := c.Do(ctx, "WAIT", 1, opts.Wait.Milliseconds()).Int(); err != nil || n < 1 {
			return // written, but no replica said so in time: not counted either way
		}
	}
	w.record(ctx, key, nil)
}

func (w *Writer) record(ctx context.Context, acked string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case acked != "":
		w.acked = append(w.acked, acked)
	case ctx.Err() == nil: // a write cut short by Stop is no error
		w.errors = append(w.errors, err.Error())
	}
}

// Stop ends the writes and waits for the one under way; it may be called more than once.
func (w *Writer) Stop() { w.stop() }

// Acked is the number of writes acknowledged so far.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Result is what the writer did: the keys acknowledged, the writes sent, and the errors of
// those that failed (and of the writes that found no client), in order.
func (w *Writer) Result() (acked []string, tried int, errors []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked), w.tried, slices.Clone(w.errors)
}

// Missing are the keys that c does not have.
func Missing(ctx context.Context, c goredis.Cmdable, keys []string) []string {
	var out []string
	for _, k := range keys {
		if c.Exists(ctx, k).Val() != 1 {
			out = append(out, k)
		}
	}
	return out
}

// Held is a WriterOptions.Client that writes every key through c.
func Held(c goredis.UniversalClient) func(context.Context) (goredis.UniversalClient, error) {
	return func(context.Context) (goredis.UniversalClient, error) { return c, nil }
}
