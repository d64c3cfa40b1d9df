package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// serverTime is what a set of redis-servers spent so far, by their own word: their CPU (INFO cpu,
// every thread: the main one, the background ones, a fork's not) and their main threads' time in
// each command (INFO commandstats' usec). Where a benchmark's writer waits, this says on what.
type serverTime struct {
	cpu      time.Duration
	commands map[string]time.Duration
	calls    map[string]int64
}

// readServerTime asks each node at addrs, logged in with password.
func readServerTime(b *testing.B, ctx context.Context, addrs []string, password string) serverTime {
	out := serverTime{commands: map[string]time.Duration{}, calls: map[string]int64{}}
	for _, addr := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, Protocol: 2, DisableIdentity: true})
		info, err := c.Info(ctx, "cpu", "commandstats").Result()
		_ = c.Close()
		require.NoError(b, err, addr)
		for _, line := range strings.Split(info, "\r\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case name == "used_cpu_sys" || name == "used_cpu_user":
				s, err := strconv.ParseFloat(value, 64)
				require.NoError(b, err, line)
				out.cpu += time.Duration(s * float64(time.Second))
			case strings.HasPrefix(name, "cmdstat_"):
				command := strings.TrimPrefix(name, "cmdstat_")
				for _, field := range strings.Split(value, ",") {
					key, number, _ := strings.Cut(field, "=")
					if key != "usec" && key != "calls" {
						continue
					}
					n, err := strconv.ParseInt(number, 10, 64)
					require.NoError(b, err, line)
					if key == "usec" {
						out.commands[command] += time.Duration(n) * time.Microsecond
					} else {
						out.calls[command] += n
					}
				}
			}
		}
	}
	return out
}

// since is what the servers spent from before until s; a server before did not hear of counts
// from zero (a new process).
func (s serverTime) since(before serverTime) serverTime {
	out := serverTime{cpu: s.cpu - before.cpu, commands: map[string]time.Duration{}, calls: map[string]int64{}}
	for name, d := range s.commands {
		out.commands[name] = d - before.commands[name]
		out.calls[name] = s.calls[name] - before.calls[name]
	}
	return out
}

// over says, for a window of d: the servers' CPU in cores, and the commands that took most of the
// main threads' time, each with its calls and its time per call (a client's command waits behind
// one such call at most on its node).
func (s serverTime) over(d time.Duration) string {
	names := slices.SortedFunc(maps.Keys(s.commands), func(a, b string) int { return cmp.Compare(s.commands[b], s.commands[a]) })
	var top []string
	for _, name := range names[:min(4, len(names))] {
		top = append(top, fmt.Sprintf("%s %.2f s (%d calls, %.2f ms each)", name, s.commands[name].Seconds(), s.calls[name],
			s.commands[name].Seconds()*1000/float64(max(1, s.calls[name]))))
	}
	return fmt.Sprintf("%.2f cores; main threads in %s", s.cpu.Seconds()/d.Seconds(), strings.Join(top, ", "))
}
