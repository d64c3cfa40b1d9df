package history_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/history"
	"github.com/org/redis-operator/test/redistest"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func write(key string, start, end int, node string, err error) history.Op {
	return history.Op{Client: "c", Kind: history.Write, Key: key, Value: "v" + key, Start: at(start), End: at(end), Node: node, Err: err}
}

func read(key string, start, end int, found bool) history.Op {
	op := history.Op{Client: "c", Kind: history.Read, Key: key, Start: at(start), End: at(end), Found: found}
	if found {
		op.Value = "v" + key
	}
	return op
}

var errCut = errors.New("read tcp 10.0.0.9:41000->10.0.0.1:6379: i/o timeout")

func TestWritesNotAcknowledgedAreCountedByWhy(t *testing.T) {
	ops := []history.Op{
		write("a", 0, 5, "n0", errors.New("NOREPLICAS Not enough good replicas to write.")),
		write("b", 10, 15, "n0", errors.New("NOREPLICAS Not enough good replicas to write.")),
		write("c", 20, 1020, "n0", errCut),
		write("d", 30, 530, "n0", errors.New("no replica acknowledged the write")),
	}
	r := history.Check(ops, nil, nil)
	assert.Equal(t, map[string]int{"NOREPLICAS": 2, "i/o timeout": 1, "no replica acknowledged the write": 1}, r.Unacknowledged)
	assert.Contains(t, r.String(), "not acknowledged: NOREPLICAS x2, i/o timeout x1, no replica acknowledged the write x1")
}

func TestAnAcknowledgedWriteTheHealedClusterLacksIsLost(t *testing.T) {
	ops := []history.Op{write("a", 0, 5, "n0", nil), write("b", 10, 15, "n0", nil), write("c", 20, 1020, "n0", errCut)}
	r := history.Check(ops, map[string]string{"a": "va"}, nil)
	assert.Equal(t, 3, r.Writes)
	assert.Equal(t, 2, r.Acknowledged)
	assert.Equal(t, []string{"b"}, r.Lost, "b was acknowledged and is gone; c never was")
	assert.Equal(t, 5*time.Millisecond, r.SlowestAcknowledged, "c took longer, and was never acknowledged")
	assert.Equal(t, map[string]int{"i/o timeout": 1}, r.Unacknowledged)
	assert.Contains(t, r.String(), "not acknowledged: i/o timeout x1")

	r = history.Check(ops, map[string]string{"a": "va", "b": "other"}, nil)
	assert.Equal(t, []string{"b"}, r.Lost, "another value is not the write")
	assert.Empty(t, history.Check(ops, map[string]string{"a": "va", "b": "vb", "c": "vc"}, nil).Lost)
}

func TestAWriteAcknowledgedByANodeThatWasNotThePrimaryOfRecordIsCounted(t *testing.T) {
	terms := []history.Term{{Primary: "n0", From: at(1)}, {Primary: "n1", From: at(100)}}
	ops := []history.Op{
		write("0", 0, 0, "n9", nil), // before any primary was on record: not judged
		write("a", 0, 5, "n0", nil),
		write("b", 90, 120, "n0", nil), // acknowledged after n1 became primary of record
		write("c", 130, 140, "n1", nil),
		write("d", 150, 160, "", nil), // node unknown: not judged
	}
	r := history.Check(ops, map[string]string{"0": "v0", "a": "va", "b": "vb", "c": "vc", "d": "vd"}, terms)
	assert.Equal(t, []string{"b"}, r.ByNonPrimary)
}

// A polled record knows when n1 became primary only between two polls (sent at 100, the answer
// naming n1 at 140): a write either node acknowledged within that window is not judged, one
// before or after it is.
func TestAWriteWithinTheWindowThePrimaryChangedInIsNotJudged(t *testing.T) {
	terms := []history.Term{{Primary: "n0", From: at(1), Seen: at(5)}, {Primary: "n1", From: at(100), Seen: at(140)}}
	ops := []history.Op{
		write("a", 80, 95, "n1", nil),   // before the window: n0 was primary
		write("b", 100, 110, "n1", nil), // within it: either
		write("c", 110, 130, "n0", nil), // within it: either
		write("d", 130, 140, "n1", nil),
		write("e", 140, 150, "n0", nil), // after it: n1 was primary
		write("f", 120, 130, "n2", nil), // neither
	}
	r := history.Check(ops, map[string]string{"a": "va", "b": "vb", "c": "vc", "d": "vd", "e": "ve", "f": "vf"}, terms)
	assert.Equal(t, []string{"a", "e", "f"}, r.ByNonPrimary)
}

func TestAReadMissingAWriteAcknowledgedBeforeItBeganIsStaleWithItsWindow(t *testing.T) {
	ops := []history.Op{
		write("a", 0, 10, "n0", nil),
		read("a", 5, 12, false),    // began before a was acknowledged: not stale
		read("a", 110, 115, false), // 100ms after: stale
		read("a", 410, 415, false), // 400ms after: stale, the window
		read("a", 500, 505, true),
		read("zz", 500, 505, false), // never acknowledged
	}
	r := history.Check(ops, map[string]string{"a": "va"}, nil)
	assert.Equal(t, 5, r.Reads)
	assert.Equal(t, 2, r.StaleReads)
	assert.Equal(t, 400*time.Millisecond, r.StaleWindow)
}

func TestTheLongestTimeWithoutAWritablePrimaryIsFromTheLastAcknowledgementToTheNext(t *testing.T) {
	ops := []history.Op{
		write("a", 0, 10, "n0", nil),
		write("b", 20, 1020, "n0", errCut),
		write("c", 1030, 2030, "n0", errCut),
		write("d", 2040, 2050, "n1", nil), // 10 -> 2050
		write("e", 2060, 2070, "n1", nil),
		write("f", 2080, 2580, "n1", errCut), // the run ends failing: 2070 -> 2580
	}
	r := history.Check(ops, map[string]string{}, nil)
	assert.Equal(t, 2040*time.Millisecond, r.NoWritablePrimary)

	healthy := []history.Op{write("a", 0, 10, "n0", nil), write("b", 500, 510, "n0", nil)}
	assert.Zero(t, history.Check(healthy, nil, nil).NoWritablePrimary, "a pause between writes is not an outage")
}

// redisClient is a history.Client of one real redis-server: SET, then GET.
type redisClient struct{ c *goredis.Client }

func (r redisClient) Write(ctx context.Context, key, value string) (string, error) {
	return "n0", r.c.Set(ctx, key, value, 0).Err()
}

func (r redisClient) Read(ctx context.Context, key string) (string, bool, string, error) {
	v, err := r.c.Get(ctx, key).Result()
	if errors.Is(err, goredis.Nil) {
		return "", false, "n0", nil
	}
	return v, err == nil, "n0", err
}

// The workload against a real redis-server: every write it records as acknowledged is there, and
// a key deleted behind the clients' backs is found lost.
func TestAWorkloadAgainstARealServerRecordsWhatTheCheckerJudges(t *testing.T) {
	server, err := redistest.StartIn(t.TempDir(), "node-0", "")
	require.NoError(t, err)
	t.Cleanup(server.Kill)
	rdb := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer rdb.Close()
	rec := &history.Recorder{}
	w := history.Workload{Clients: map[string]history.Client{"one": redisClient{rdb}, "two": redisClient{rdb}},
		Interval: 5 * time.Millisecond, Recorder: rec}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = rdb.Del(context.Background(), "one:0").Err() // lost, behind the clients' backs
	}()
	w.Run(ctx)
	cancel()

	ops := rec.Ops()
	final := map[string]string{}
	for key := range rec.Acknowledged() {
		if v, err := rdb.Get(context.Background(), key).Result(); err == nil {
			final[key] = v
		}
	}
	r := history.Check(ops, final, nil)
	t.Log(r)
	assert.Greater(t, r.Acknowledged, 20)
	assert.Equal(t, []string{"one:0"}, r.Lost)
	assert.Positive(t, r.Reads)
	assert.Zero(t, r.NoWritablePrimary)
}
