package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/org/redis-operator/internal/redis"
)

// Result is a stored snapshot.
type Result struct {
	redis.SnapshotInfo
	// Checksum is sha256:<hex> of the stored bytes.
	Checksum string
}

// ChecksumPrefix starts every recorded checksum, naming its algorithm.
const ChecksumPrefix = "sha256:"

// Snapshots take nodes' snapshots, each over a connection of its own made with Redis's options
// (the timeout, the fault suite's hook) and the caller's login.
type Snapshots struct {
	Redis redis.Options
}

// ErrSnapshot means the node did not produce a whole snapshot: it refused the sync, or the
// stream broke.
var ErrSnapshot = redis.ErrSnapshot

// Take streams the snapshot of the node at addr to key in the store, hashing it on the way:
// the node's RDB flows through a pipe into the upload (an S3 upload's parts, or a file on a
// volume), so no more than a part is held.
// If either side fails, the other stops, and the upload is aborted: nothing is stored.
func (s Snapshots) Take(ctx context.Context, addr string, login redis.Login, store Destination, key string) (Result, error) {
	opts := s.Redis.WithLogin(login)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	hash := sha256.New()
	type snapshot struct {
		info redis.SnapshotInfo
		err  error
	}
	done := make(chan snapshot, 1)
	go func() {
		info, err := redis.Snapshot(ctx, addr, opts, io.MultiWriter(pw, hash))
		// A nil error ends the upload's input cleanly (io.EOF).
		pw.CloseWithError(err)
		done <- snapshot{info, err}
	}()
	size, uploadErr := store.Upload(ctx, key, pr)
	// A failed upload stops reading: the snapshot's next write fails instead of blocking.
	pr.CloseWithError(errors.New("the upload stopped"))
	if uploadErr != nil {
		cancel()
	}
	snap := <-done
	switch {
	case snap.err != nil:
		return Result{}, snap.err
	case uploadErr != nil:
		return Result{}, uploadErr
	case size != snap.info.Size:
		// Cannot happen unless the pipe lies; never record such an object as a backup.
		_ = store.Delete(context.WithoutCancel(ctx), key)
		return Result{}, fmt.Errorf("stored %d bytes of a %d-byte snapshot", size, snap.info.Size)
	}
	return Result{SnapshotInfo: snap.info, Checksum: ChecksumPrefix + hex.EncodeToString(hash.Sum(nil))}, nil
}

// resultJSON is a Result as a volume backup's pod reports it in its termination message.
type resultJSON struct {
	Size              int64  `json:"size"`
	Checksum          string `json:"checksum"`
	ReplicationID     string `json:"replicationID"`
	ReplicationOffset int64  `json:"replicationOffset"`
}

// EncodeResult is the termination message of a volume backup's pod that stored r.
func EncodeResult(r Result) string {
	raw, _ := json.Marshal(resultJSON{r.Size, r.Checksum, r.ReplicationID, r.ReplicationOffset})
	return string(raw)
}

// DecodeResult reads the termination message of a volume backup's pod that succeeded.
func DecodeResult(msg string) (Result, error) {
	var j resultJSON
	if err := json.Unmarshal([]byte(strings.TrimSpace(msg)), &j); err != nil || j.Size == 0 || !strings.HasPrefix(j.Checksum, ChecksumPrefix) {
		return Result{}, fmt.Errorf("the backup pod reported %q, not the stored snapshot's size and checksum", msg)
	}
	return Result{SnapshotInfo: redis.SnapshotInfo{Size: j.Size, ReplicationID: j.ReplicationID, ReplicationOffset: j.ReplicationOffset},
		Checksum: j.Checksum}, nil
}
