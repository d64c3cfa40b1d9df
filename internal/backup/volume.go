package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Destination is where snapshots are kept: an S3 bucket (Store) or a directory on a volume
// (Dir). Take writes one, Restore reads one.
type Destination interface {
	// Upload stores what r yields under key, whole or not at all, and returns its size.
	Upload(ctx context.Context, key string, r io.Reader) (int64, error)
	// Download writes the snapshot at key to w.
	Download(ctx context.Context, key string, w io.Writer) (int64, error)
	// Delete removes the snapshot at key; one that is not there is no error.
	Delete(ctx context.Context, key string) error
	// Location names the snapshot at key as the RedisBackup's status does.
	Location(key string) string
}

// Dir is a PersistentVolumeClaim's volume as mounted at Root in a pod of the operator's image:
// each snapshot is a file at <Root>/<key>.
type Dir struct {
	Root string
	// Claim names the PersistentVolumeClaim, for locations: pvc://<claim>/<key>.
	Claim string
}

var _, _ Destination = (*Store)(nil), Dir{}

// VolumeLocation names a snapshot on a PersistentVolumeClaim: pvc://<claim>/<key>.
func VolumeLocation(claim, key string) string { return "pvc://" + claim + "/" + key }

// VolumeKey is the key of a pvc:// location.
func VolumeKey(location string) (claim, key string, err error) {
	claim, key, ok := strings.Cut(strings.TrimPrefix(location, "pvc://"), "/")
	if !strings.HasPrefix(location, "pvc://") || !ok || claim == "" || key == "" {
		return "", "", fmt.Errorf("location %q is not pvc://<claim>/<path>", location)
	}
	return claim, key, nil
}

func (d Dir) Location(key string) string { return VolumeLocation(d.Claim, key) }

// path is where key is on the volume; a key that would leave the volume is refused.
func (d Dir) path(key string) (string, error) {
	p := filepath.Join(d.Root, filepath.FromSlash(key))
	if rel, err := filepath.Rel(d.Root, p); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%w: %s is not a file on the volume", ErrStorage, key)
	}
	return p, nil
}

// Upload writes the snapshot aside, syncs it and only then renames it into place: a snapshot
// cut off (the node went away, the volume filled up) leaves no file under key.
func (d Dir) Upload(ctx context.Context, key string, r io.Reader) (int64, error) {
	p, err := d.path(key)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	partial := p + ".partial"
	n, err := writeSynced(ctx, partial, r)
	if err == nil {
		err = os.Rename(partial, p)
	}
	if err == nil {
		err = syncDir(filepath.Dir(p))
	}
	if err != nil {
		_ = os.Remove(partial)
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			// The volume's own words (no space left, read-only file system).
			return 0, fmt.Errorf("%w: %w", ErrStorage, err)
		}
		return 0, err
	}
	return n, nil
}

// writeSynced copies r to a new file at path and syncs it.
func writeSynced(ctx context.Context, path string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, readerWithContext{ctx, r})
	if err != nil {
		return n, err
	}
	return n, f.Sync()
}

// readerWithContext stops a copy once ctx ends.
type readerWithContext struct {
	ctx context.Context
	r   io.Reader
}

func (r readerWithContext) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d Dir) Download(ctx context.Context, key string, w io.Writer) (int64, error) {
	p, err := d.path(key)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: %s does not exist", ErrStorage, d.Location(key))
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	defer f.Close()
	return io.Copy(w, readerWithContext{ctx, f})
}

func (d Dir) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}
