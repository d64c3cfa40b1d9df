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

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/redis"
)

// A volume destination is a directory, as a pod that mounts the claim sees it; the snapshot
// comes from a real redis-server.

func TestABackupOnAVolumeRestoresAndIsDeleted(t *testing.T) {
	ctx := context.Background()
	source := startRedis(t, filepath.Join(t.TempDir(), "source"), "appendonly no\nsave \"\"\n")
	c := goredis.NewClient(&goredis.Options{Addr: source.Addr()})
	defer c.Close()
	for i := range 200 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err())
	}
	vol := backup.Dir{Root: t.TempDir(), Claim: "backups"}

	res, err := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, source.Addr(), redis.Login{}, vol, "ns/src/b1.rdb")
	require.NoError(t, err)
	assert.Equal(t, "pvc://backups/ns/src/b1.rdb", vol.Location("ns/src/b1.rdb"))
	info, err := os.Stat(filepath.Join(vol.Root, "ns", "src", "b1.rdb"))
	require.NoError(t, err)
	assert.Equal(t, res.Size, info.Size())
	entries, _ := os.ReadDir(filepath.Join(vol.Root, "ns", "src"))
	assert.Len(t, entries, 1, "no partial file is left beside the snapshot")

	// The outcome a backup pod reports reads back as it was
	decoded, err := backup.DecodeResult(backup.EncodeResult(res) + "\n")
	require.NoError(t, err)
	assert.Equal(t, res, decoded)
	_, err = backup.DecodeResult("Backup failed: something")
	assert.Error(t, err)

	dataDir := t.TempDir()
	restored, err := backup.Restore(ctx, backup.RestoreOptions{Store: vol, Key: "ns/src/b1.rdb", Checksum: res.Checksum, DataDir: dataDir})
	require.NoError(t, err)
	assert.True(t, restored)
	restoredServer := startRedis(t, dataDir, "appendonly no\nsave \"\"\n")
	rc := goredis.NewClient(&goredis.Options{Addr: restoredServer.Addr()})
	defer rc.Close()
	assert.Equal(t, int64(200), rc.DBSize(ctx).Val())

	require.NoError(t, vol.Delete(ctx, "ns/src/b1.rdb"))
	require.NoError(t, vol.Delete(ctx, "ns/src/b1.rdb"), "deleting what is gone is no error")
	_, err = backup.Restore(ctx, backup.RestoreOptions{Store: vol, Key: "ns/src/b1.rdb", Checksum: res.Checksum, DataDir: t.TempDir()})
	require.ErrorIs(t, err, backup.ErrStorage)
	assert.Contains(t, err.Error(), "pvc://backups/ns/src/b1.rdb does not exist")
}

func TestAVolumeUploadCutOffLeavesNoFile(t *testing.T) {
	vol := backup.Dir{Root: t.TempDir(), Claim: "backups"}
	cut := io.MultiReader(strings.NewReader("REDIS0010 the start of a snapshot"), errReader{errors.New("the node went away")})
	_, err := vol.Upload(context.Background(), "ns/src/b1.rdb", cut)
	require.Error(t, err)
	entries, err := os.ReadDir(filepath.Join(vol.Root, "ns", "src"))
	require.NoError(t, err)
	assert.Empty(t, entries, "neither the snapshot nor a partial file")
}

func TestAVolumeKeyCannotLeaveTheVolume(t *testing.T) {
	vol := backup.Dir{Root: t.TempDir(), Claim: "backups"}
	for _, key := range []string{"../outside.rdb", "a/../../outside.rdb", ".."} {
		_, err := vol.Upload(context.Background(), key, strings.NewReader("REDIS"))
		assert.ErrorIs(t, err, backup.ErrStorage, key)
		assert.ErrorIs(t, vol.Delete(context.Background(), key), backup.ErrStorage, key)
	}
	claim, key, err := backup.VolumeKey("pvc://backups/team-a/src/b1.rdb")
	require.NoError(t, err)
	assert.Equal(t, "backups", claim)
	assert.Equal(t, "team-a/src/b1.rdb", key)
	_, _, err = backup.VolumeKey("s3://bucket/key")
	assert.Error(t, err)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A node whose operator user may not sync (a user an earlier build defined) refuses the
// snapshot with NOPERM: the error says so by type, so that the RedisBackup controller gives the
// user again and tries once more.
func TestASnapshotRefusedByTheUsersPermissionsSaysNoPermission(t *testing.T) {
	ctx := context.Background()
	source := startRedis(t, filepath.Join(t.TempDir(), "source"), "appendonly no\nsave \"\"\n")
	c := goredis.NewClient(&goredis.Options{Addr: source.Addr()})
	defer c.Close()
	require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "operator", "on", ">secret", "+@all", "-sync", "-replconf").Err())
	vol := backup.Dir{Root: t.TempDir(), Claim: "backups"}

	_, err := backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, source.Addr(),
		redis.Login{Username: "operator", Password: "secret"}, vol, "ns/src/b1.rdb")
	require.ErrorIs(t, err, redis.ErrNoPermission)
	require.ErrorIs(t, err, backup.ErrSnapshot)

	require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "operator", "+sync", "+replconf").Err())
	_, err = backup.Snapshots{Redis: redis.Options{Timeout: time.Second}}.Take(ctx, source.Addr(),
		redis.Login{Username: "operator", Password: "secret"}, vol, "ns/src/b1.rdb")
	require.NoError(t, err, "the same login, once the user may sync")
}
