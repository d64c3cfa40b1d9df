package redistest

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// AOFWritten is true when the Redis behind c has written to its append-only file every write it
// acknowledged (INFO persistence: aof_buffer_length:0), or keeps no such file.
//
// A killed process keeps what it wrote (the kernel has it) and loses what it had not. With
// appendfsync everysec (the operator's default) Redis answers a write before it writes it, and
// while its last fsync still runs (a busy disk) it holds the writes back, up to 2 s, as Redis
// documents. Reproduced with redis-server 7.0.15 alone: 3000 pipelined writes, SIGKILL right after
// their answers, a disk busy with dd: 2395 lost in 1 round of 7. A test that kills every copy of
// some data and asks for it back waits for this first: it tests the nodes coming back, not Redis's
// fsync policy (appendfsync always closes the window; see docs/replication.md).
func AOFWritten(ctx context.Context, c goredis.Cmdable) (bool, error) {
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return false, err
	}
	return strings.Contains(info, "aof_enabled:0") || strings.Contains(info, "aof_buffer_length:0\r\n"), nil
}
