// Command untar is the tar of the scorecard's untar image: busybox, whose tar operator-sdk's
// scorecard runs in the test pods' init container, cannot be pulled here. It takes only what
// that init container runs: `tar xzf <archive.tar.gz> -C <dir>`, regular files and directories.
package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tar:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 4 || args[0] != "xzf" || args[2] != "-C" {
		return fmt.Errorf("usage: tar xzf <archive.tar.gz> -C <dir>, not %q", args)
	}
	f, err := os.Open(args[1])
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	return extract(tar.NewReader(gz), args[3])
}

// extract writes the archive's directories and regular files under dir, refusing a name that
// would leave it.
func extract(r *tar.Reader, dir string) error {
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, h.Name)
		if path != filepath.Clean(dir) && !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s leaves %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode().Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(out, r)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: only directories and regular files", h.Name)
		}
	}
}
