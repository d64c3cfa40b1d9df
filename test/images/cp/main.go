// Command cp is the one cp command OLM's bundle unpack Job runs in OLM's image ("/bin/cp -Rv
// /bin/cpb /util/cpb": hand cpb to the bundle's container), for the OLM image built here
// (test/images.OLMUtil), which has no coreutils: it copies a file, or a directory's tree,
// keeping the modes, and says what it copied when -v is given.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	args, verbose := os.Args[1:], false
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		for _, f := range args[0][1:] {
			switch f {
			case 'v':
				verbose = true
			case 'R', 'r':
			default:
				fmt.Fprintf(os.Stderr, "cp: -%c is not supported\n", f)
				os.Exit(2)
			}
		}
		args = args[1:]
	}
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cp [-Rv] SOURCE DEST")
		os.Exit(2)
	}
	if err := copyTree(args[0], args[1], verbose); err != nil {
		fmt.Fprintln(os.Stderr, "cp:", err)
		os.Exit(1)
	}
}

func copyTree(src, dst string, verbose bool) error {
	if info, err := os.Stat(dst); err == nil && info.IsDir() {
		dst = filepath.Join(dst, filepath.Base(src))
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if verbose {
			fmt.Printf("'%s' -> '%s'\n", p, target)
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, raw, info.Mode().Perm())
	})
}
