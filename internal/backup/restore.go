package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The files a restore lays out in a node's data directory, as Redis 7 names them.
const (
	RDBFile      = "dump.rdb"
	AOFDir       = "appendonlydir"
	aofBaseFile  = "appendonly.aof.1.base.rdb"
	aofManifest  = "appendonly.aof.manifest"
	restoredMark = ".restored-from"
	partialFile  = "restore.rdb.partial"
)

// ErrDataPresent means the data directory already holds Redis data: a restore never replaces it.
var ErrDataPresent = errors.New("the data directory already holds data")

// ErrChecksum means the stored object is not the snapshot the backup recorded.
var ErrChecksum = errors.New("checksum mismatch")

// RestoreOptions say what to restore where.
type RestoreOptions struct {
	Store Destination
	Key   string
	// Checksum is the backup's recorded sha256:<hex>.
	Checksum string
	DataDir  string
	// AOF: the node runs with appendonly yes, and loads an AOF's base file rather than dump.rdb.
	AOF bool
}

// Restore puts the snapshot in the data directory, before Redis starts, for Redis to load:
// dump.rdb, or the base of an AOF (with appendonly yes Redis ignores dump.rdb). The object is
// written aside, checked against the recorded checksum and its RDB header, and only then moved
// in place: a missing or corrupt object leaves the directory as it was. A directory with data
// is refused, unless that data is this restore's own (a restarted pod): the restore is done
// once.
func Restore(ctx context.Context, o RestoreOptions) (restored bool, err error) {
	mark := filepath.Join(o.DataDir, restoredMark)
	if got, err := os.ReadFile(mark); err == nil {
		if strings.TrimSpace(string(got)) == o.Checksum {
			return false, nil
		}
		return false, fmt.Errorf("%w: restored from another backup (%s)", ErrDataPresent, strings.TrimSpace(string(got)))
	}
	for _, f := range []string{RDBFile, AOFDir} {
		if _, err := os.Stat(filepath.Join(o.DataDir, f)); err == nil {
			return false, fmt.Errorf("%w (%s); a restore never replaces data: restore into a new RedisCluster with new volumes", ErrDataPresent, f)
		}
	}
	partial := filepath.Join(o.DataDir, partialFile)
	if err := download(ctx, o, partial); err != nil {
		_ = os.Remove(partial)
		return false, err
	}
	target := filepath.Join(o.DataDir, RDBFile)
	if o.AOF {
		dir := filepath.Join(o.DataDir, AOFDir)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return false, err
		}
		target = filepath.Join(dir, aofBaseFile)
		if err := writeFileSynced(filepath.Join(dir, aofManifest), []byte("file "+aofBaseFile+" seq 1 type b\n")); err != nil {
			return false, err
		}
	}
	if err := os.Rename(partial, target); err != nil {
		return false, err
	}
	return true, writeFileSynced(mark, []byte(o.Checksum+"\n"))
}

func download(ctx context.Context, o RestoreOptions, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	hash := sha256.New()
	head := &headBuffer{}
	w := bufio.NewWriterSize(io.MultiWriter(f, hash, head), 1<<20)
	if _, err := o.Store.Download(ctx, o.Key, w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if got := ChecksumPrefix + hex.EncodeToString(hash.Sum(nil)); got != o.Checksum {
		return fmt.Errorf("%w: %s is %s, the backup recorded %s; Redis was not started on it", ErrChecksum, o.Store.Location(o.Key), got, o.Checksum)
	}
	if string(head.b) != "REDIS" {
		return fmt.Errorf("%s is not an RDB snapshot", o.Store.Location(o.Key))
	}
	return f.Sync()
}

// headBuffer keeps the first five bytes: an RDB starts with REDIS.
type headBuffer struct{ b []byte }

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := 5 - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func writeFileSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}
