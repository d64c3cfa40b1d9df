// Package history records what clients did to a Redis while a test broke its network, and checks
// the record once the network is healed: which acknowledged writes are lost, which were
// acknowledged by a node that was not the primary of record, which reads missed a write
// acknowledged before they began (and for how long such reads went on), and how long no write
// could be made. Each key is written once, with a value of its own, so that a read tells which
// write it saw. The checker is pure: the partition tests feed it, and its own tests feed it
// histories written by hand.
package history

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind int

const (
	Write Kind = iota
	Read
)

// Op is one operation, as its client saw it.
type Op struct {
	Client string
	Kind   Kind
	Key    string
	// Value is what was written, or what was read (Found says whether the key was there).
	Value string
	Found bool
	// Start is when the client sent it, End when the answer came (or the client gave up).
	Start, End time.Time
	// Err is nil when the write was acknowledged (its node took it, and as many replicas as
	// the workload waits for) or the read answered.
	Err error
	// Node is the node that answered, as the test names it; empty when unknown.
	Node string
}

// Term is the primary of record from From until the next Term's From. A test that learns of the
// primary by polling knows a term's start only within a window: From is the latest time it is
// known not to have begun (when the last poll still naming the previous primary was sent), Seen
// when a poll first named it. Within that window the record cannot tell the two primaries apart,
// and a write either of them acknowledged is not judged. A zero Seen is From: the start is exact.
type Term struct {
	Primary    string
	From, Seen time.Time
}

// Recorder collects the operations of several clients.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
	// acked are the keys of the acknowledged writes, for reads to choose from.
	acked []string
}

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if op.Kind == Write && op.Err == nil {
		r.acked = append(r.acked, op.Key)
	}
}

// anyAcknowledged is the key of an acknowledged write, chosen at random; false before there is one.
func (r *Recorder) anyAcknowledged() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acked) == 0 {
		return "", false
	}
	return r.acked[rand.IntN(len(r.acked))], true
}

// Ops are the operations recorded so far, in the order they ended.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Acknowledged are the keys whose writes were acknowledged so far, with their values.
func (r *Recorder) Acknowledged() map[string]string {
	out := map[string]string{}
	for _, op := range r.Ops() {
		if op.Kind == Write && op.Err == nil {
			out[op.Key] = op.Value
		}
	}
	return out
}

// Report is what Check found.
type Report struct {
	Writes, Acknowledged int
	// Lost are the acknowledged writes the healed cluster does not hold (keys).
	Lost []string
	// ByNonPrimary are the acknowledged writes whose node was not the primary of record when
	// they were acknowledged (keys); only writes whose node is known, acknowledged once a
	// primary was on record, are judged.
	ByNonPrimary []string
	Reads        int
	// StaleReads are reads that missed a write acknowledged before they began; StaleWindow is
	// the longest time from such a write's acknowledgement to the start of a read missing it.
	StaleReads  int
	StaleWindow time.Duration
	// NoWritablePrimary is the longest time no write was acknowledged while writes were tried:
	// from the last acknowledgement before a failed write to the first one after it.
	NoWritablePrimary time.Duration
	// Gaps are the stretches NoWritablePrimary is the longest of, in order.
	Gaps []Gap
	// SlowestAcknowledged is the longest an acknowledged write took (a slow link shows here).
	SlowestAcknowledged time.Duration
	// Unacknowledged counts the writes not acknowledged by why: the error's first word (a
	// Redis error's code, such as NOREPLICAS), or the whole error when it has no code.
	Unacknowledged map[string]int
}

// Check judges ops against final, what the healed cluster holds of the keys written (key to
// value; a key missing is not there), and terms, the primary of record over time.
func Check(ops []Op, final map[string]string, terms []Term) Report {
	var r Report
	acked := map[string]Op{}
	var writes []Op
	for _, op := range ops {
		if op.Kind != Write {
			continue
		}
		r.Writes++
		writes = append(writes, op)
		if op.Err != nil {
			if r.Unacknowledged == nil {
				r.Unacknowledged = map[string]int{}
			}
			r.Unacknowledged[why(op.Err)]++
			continue
		}
		r.Acknowledged++
		acked[op.Key] = op
		r.SlowestAcknowledged = max(r.SlowestAcknowledged, op.End.Sub(op.Start))
		if v, ok := final[op.Key]; !ok || v != op.Value {
			r.Lost = append(r.Lost, op.Key)
		}
		if op.Node != "" && !mayBePrimaryAt(terms, op.End, op.Node) {
			r.ByNonPrimary = append(r.ByNonPrimary, op.Key)
		}
	}
	slices.Sort(r.Lost)
	slices.Sort(r.ByNonPrimary)
	for _, op := range ops {
		if op.Kind != Read || op.Err != nil {
			continue
		}
		r.Reads++
		w, ok := acked[op.Key]
		if !ok || !w.End.Before(op.Start) {
			continue // no acknowledged write of the key before the read began: anything goes
		}
		if !op.Found || op.Value != w.Value {
			r.StaleReads++
			r.StaleWindow = max(r.StaleWindow, op.Start.Sub(w.End))
		}
	}
	r.Gaps = gapsWithoutWrite(writes)
	for _, g := range r.Gaps {
		r.NoWritablePrimary = max(r.NoWritablePrimary, g.Length())
	}
	return r
}

// Gap is a stretch without an acknowledged write while writes were tried.
type Gap struct{ From, To time.Time }

// Length is how long the gap lasted.
func (g Gap) Length() time.Duration { return g.To.Sub(g.From) }

// mayBePrimaryAt is whether the record allows node to be the primary at t: it names the last term
// that began at or before t, or the term before it while t is within the last one's window. Before
// the first term nothing is on record, and anything goes.
func mayBePrimaryAt(terms []Term, t time.Time, node string) bool {
	i := -1
	for i+1 < len(terms) && !terms[i+1].From.After(t) {
		i++
	}
	switch {
	case i < 0:
		return true
	case terms[i].Primary == node:
		return true
	default:
		return i > 0 && !t.After(terms[i].Seen) && terms[i-1].Primary == node
	}
}

// gapsWithoutWrite are the stretches between two acknowledgements (or the first write's start
// and the first acknowledgement, or the last acknowledgement and the last write's end) during
// which a write was tried and failed.
func gapsWithoutWrite(writes []Op) []Gap {
	if len(writes) == 0 {
		return nil
	}
	slices.SortFunc(writes, func(a, b Op) int { return a.End.Compare(b.End) })
	var gaps []Gap
	last := slices.MinFunc(writes, func(a, b Op) int { return a.Start.Compare(b.Start) }).Start
	failed := false
	for _, w := range writes {
		if w.Err != nil {
			failed = true
			continue
		}
		if failed {
			gaps = append(gaps, Gap{From: last, To: w.End})
		}
		last, failed = w.End, false
	}
	if failed {
		gaps = append(gaps, Gap{From: last, To: writes[len(writes)-1].End})
	}
	return gaps
}

// why names an error for counting: a Redis error by its code (its first word, in capitals, such as
// NOREPLICAS), any other by what follows its last colon (an i/o timeout, without the addresses).
func why(err error) string {
	msg := err.Error()
	if code, _, _ := strings.Cut(msg, " "); code != "" && strings.Trim(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		return code
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// String is the report as one line of figures.
func (r Report) String() string {
	return fmt.Sprintf("writes %d, acknowledged %d (slowest %s), lost %d, acknowledged by a non-primary %d; reads %d, stale %d (window %s); longest without a writable primary %s",
		r.Writes, r.Acknowledged, r.SlowestAcknowledged.Round(time.Millisecond), len(r.Lost), len(r.ByNonPrimary), r.Reads, r.StaleReads,
		r.StaleWindow.Round(time.Millisecond), r.NoWritablePrimary.Round(time.Millisecond)) + r.unacknowledged()
}

// Client is what a workload needs of one client of the cluster.
type Client interface {
	// Write sets key to value and waits for its acknowledgement; node is who answered.
	Write(ctx context.Context, key, value string) (node string, err error)
	// Read gets key; found is false when it is not there.
	Read(ctx context.Context, key string) (value string, found bool, node string, err error)
}

// Workload runs each client in a loop until ctx ends: a write of a key of its own, then a read
// of a key some client's write was acknowledged for (any client's, chosen at random: a client on
// one side of a cut reads what one on the other side wrote), every Interval.
type Workload struct {
	Clients  map[string]Client
	Interval time.Duration
	// OpTimeout bounds each operation; a client on the wrong side of a cut waits no longer.
	OpTimeout time.Duration
	Recorder  *Recorder
}

// Run runs the clients until ctx ends.
func (w Workload) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for name, c := range w.Clients {
		wg.Go(func() {
			tick := time.NewTicker(cmp.Or(w.Interval, 20*time.Millisecond))
			defer tick.Stop()
			for i := 0; ctx.Err() == nil; i++ {
				key := name + ":" + strconv.Itoa(i)
				op := Op{Client: name, Kind: Write, Key: key, Value: strconv.Itoa(i), Start: time.Now()}
				octx, cancel := context.WithTimeout(ctx, cmp.Or(w.OpTimeout, time.Second))
				op.Node, op.Err = c.Write(octx, key, op.Value)
				cancel()
				op.End = time.Now()
				if ctx.Err() != nil && op.Err != nil {
					return // cut short by the end of the run: not a failure of the cluster's
				}
				w.Recorder.Add(op)
				if key, ok := w.Recorder.anyAcknowledged(); ok {
					read := Op{Client: name, Kind: Read, Key: key, Start: time.Now()}
					octx, cancel := context.WithTimeout(ctx, cmp.Or(w.OpTimeout, time.Second))
					read.Value, read.Found, read.Node, read.Err = c.Read(octx, key)
					cancel()
					read.End = time.Now()
					if ctx.Err() == nil || read.Err == nil {
						w.Recorder.Add(read)
					}
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
}

// unacknowledged lists the reasons writes were not acknowledged, the commonest first.
func (r Report) unacknowledged() string {
	if len(r.Unacknowledged) == 0 {
		return ""
	}
	reasons := slices.SortedFunc(maps.Keys(r.Unacknowledged), func(a, b string) int {
		return cmp.Or(cmp.Compare(r.Unacknowledged[b], r.Unacknowledged[a]), cmp.Compare(a, b))
	})
	var parts []string
	for _, reason := range reasons {
		parts = append(parts, fmt.Sprintf("%s x%d", reason, r.Unacknowledged[reason]))
	}
	return "; not acknowledged: " + strings.Join(parts, ", ")
}

// Timeline says, client by client, how the writes that ended within [from, to] went: each change
// of outcome (acknowledged by which node, or why not) with its time after from. It explains a gap.
func Timeline(ops []Op, from, to time.Time) string {
	byClient := map[string][]Op{}
	for _, op := range ops {
		if op.Kind == Write && !op.End.Before(from) && !op.End.After(to) {
			byClient[op.Client] = append(byClient[op.Client], op)
		}
	}
	var b strings.Builder
	for _, c := range slices.Sorted(maps.Keys(byClient)) {
		writes := byClient[c]
		slices.SortFunc(writes, func(a, b Op) int { return a.End.Compare(b.End) })
		b.WriteString(c + ":")
		last := ""
		for _, w := range writes {
			outcome := "ok " + w.Node
			if w.Err != nil {
				outcome = why(w.Err)
			}
			if outcome != last {
				fmt.Fprintf(&b, " +%dms %s;", w.End.Sub(from).Milliseconds(), outcome)
				last = outcome
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
