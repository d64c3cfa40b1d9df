package backup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/test/redistest"
	"github.com/org/redis-operator/test/s3server"
)

// Real redis-server processes and a real S3 server (the Versity S3 Gateway), nothing faked.

func startRedis(t *testing.T, dir, conf string) *redistest.Server {
	t.Helper()
	s, err := redistest.StartIn(dir, filepath.Base(dir), conf)
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	return s
}

func store(t *testing.T, srv *s3server.Server, bucket string) *backup.Store {
	t.Helper()
	st, err := backup.NewStore(*srv.Destination(bucket, "unused").S3, backup.Credentials{AccessKeyID: s3server.AccessKeyID, SecretAccessKey: s3server.SecretAccessKey}, nil)
	require.NoError(t, err)
	return st
}

func TestABackupRestoresExactlyItsKeysAndTTLs(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.CreateBucket(t, "backups")
	st := store(t, srv, "backups")

	source := startRedis(t, filepath.Join(t.TempDir(), "source"), "appendonly no\nsave \"\"\n")
	c := goredis.NewClient(&goredis.Options{Addr: source.Addr()})
	defer c.Close()
	for i := range 1000 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i), 0).Err())
	}
	require.NoError(t, c.Set(ctx, "expiring", "soon", time.Hour).Err())

	res, err := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, source.Addr(), redis.Login{}, st, "ns/src/b1.rdb")
	require.NoError(t, err)
	info, err := c.Info(ctx, "replication").Result()
	require.NoError(t, err)
	assert.Positive(t, res.Size)
	assert.True(t, strings.HasPrefix(res.Checksum, backup.ChecksumPrefix))
	assert.Contains(t, info, "master_replid:"+res.ReplicationID, "the snapshot records the replication stream it was taken at")

	// Keys written after the backup are not restored.
	require.NoError(t, c.Set(ctx, "after", "x", 0).Err())

	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("aof=%t", aof), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "restored")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			restored, err := backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/b1.rdb", Checksum: res.Checksum, DataDir: dir, AOF: aof})
			require.NoError(t, err)
			assert.True(t, restored)
			conf := "appendonly no\n"
			if aof {
				conf = "appendonly yes\n"
			}
			target := startRedis(t, dir, conf)
			tc := goredis.NewClient(&goredis.Options{Addr: target.Addr()})
			defer tc.Close()
			require.Eventually(t, func() bool { return tc.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
			assert.Equal(t, int64(1001), tc.DBSize(ctx).Val(), "exactly the keys of the backup")
			assert.Equal(t, "value-999", tc.Get(ctx, "key:999").Val())
			assert.Zero(t, tc.Exists(ctx, "after").Val())
			ttl := tc.TTL(ctx, "expiring").Val()
			assert.True(t, ttl > 59*time.Minute && ttl <= time.Hour, "the TTL is kept: %s", ttl)

			// A second run (the pod restarted) does nothing; other data in the directory is refused.
			target.Kill()
			restored, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/b1.rdb", Checksum: res.Checksum, DataDir: dir, AOF: aof})
			require.NoError(t, err)
			assert.False(t, restored)
			_, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/b1.rdb", Checksum: "sha256:00", DataDir: dir, AOF: aof})
			assert.ErrorIs(t, err, backup.ErrDataPresent)
		})
	}

	t.Run("a directory holding data is refused", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, backup.RDBFile), []byte("REDIS0010"), 0o600))
		_, err := backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/b1.rdb", Checksum: res.Checksum, DataDir: dir})
		require.ErrorIs(t, err, backup.ErrDataPresent)
		got, _ := os.ReadFile(filepath.Join(dir, backup.RDBFile))
		assert.Equal(t, "REDIS0010", string(got), "nothing is overwritten")
	})

	t.Run("a corrupt object is refused and nothing is laid out", func(t *testing.T) {
		raw := &strings.Builder{}
		_, err := st.Download(ctx, "ns/src/b1.rdb", raw)
		require.NoError(t, err)
		corrupt := []byte(raw.String())
		corrupt[len(corrupt)/2] ^= 0xFF
		_, err = srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("backups"), Key: aws.String("ns/src/corrupt.rdb"),
			Body: strings.NewReader(string(corrupt))})
		require.NoError(t, err)
		dir := t.TempDir()
		_, err = backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/corrupt.rdb", Checksum: res.Checksum, DataDir: dir})
		require.ErrorIs(t, err, backup.ErrChecksum)
		entries, _ := os.ReadDir(dir)
		assert.Empty(t, entries, "no file is left for Redis to load")
	})

	t.Run("a missing object is a storage error", func(t *testing.T) {
		_, err := backup.Restore(ctx, backup.RestoreOptions{Store: st, Key: "ns/src/missing.rdb", Checksum: res.Checksum, DataDir: t.TempDir()})
		require.ErrorIs(t, err, backup.ErrStorage)
		assert.Contains(t, err.Error(), "not found")
	})
}

func TestStorageErrorsSayWhatTheStoreSaid(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.CreateBucket(t, "backups")

	wrong, err := backup.NewStore(*srv.Destination("backups", "unused").S3, backup.Credentials{AccessKeyID: s3server.AccessKeyID, SecretAccessKey: "wrong"}, nil)
	require.NoError(t, err)
	_, err = wrong.Upload(ctx, "k", strings.NewReader("data"))
	require.ErrorIs(t, err, backup.ErrStorage)
	assert.Contains(t, err.Error(), "refused the credentials")

	_, err = store(t, srv, "no-such-bucket").Upload(ctx, "k", strings.NewReader("data"))
	require.ErrorIs(t, err, backup.ErrStorage)
	assert.Contains(t, err.Error(), "bucket does not exist")
}

// stallingReader yields n bytes, then waits for release before it ends.
type stallingReader struct {
	n       int
	stalled chan struct{}
	release chan struct{}
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		close(r.stalled)
		<-r.release
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = byte(i)
	}
	r.n -= k
	return k, nil
}

func TestAnUploadCutOffByTheStoreLeavesNoObject(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.CreateBucket(t, "backups")
	st := store(t, srv, "backups")

	// Two parts are stored, then the store goes down before the third.
	r := &stallingReader{n: 2*backup.PartSize + 1, stalled: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := st.Upload(ctx, "ns/src/cut.rdb", r); done <- err }()
	<-r.stalled
	srv.Stop()
	close(r.release)
	err := <-done
	require.ErrorIs(t, err, backup.ErrStorage)

	require.NoError(t, srv.Restart())
	_, err = srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("backups"), Key: aws.String("ns/src/cut.rdb")})
	var nf interface{ ErrorCode() string }
	require.True(t, errors.As(err, &nf), "no object exists: %v", err)
}
