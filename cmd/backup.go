package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
)

// backupMain is the backup subcommand: the pod that takes a RedisBackup onto a
// PersistentVolumeClaim, which the operator itself does not mount. It streams the node's
// snapshot (the replication handshake, as the operator does for S3) into a file on the claim,
// and writes the outcome to its termination message for the operator to record. It logs in
// as the operator's own user; the password comes from the environment, never argv.
func backupMain(args []string) int {
	fs := flag.NewFlagSet(resources.BackupCommand, flag.ContinueOnError)
	node := fs.String("node", "", "The address (host:port) of the node to take the snapshot of.")
	dir := fs.String("dir", "/backup", "Where the claim is mounted.")
	claim := fs.String("claim", "", "The claim's name, for the snapshot's location.")
	key := fs.String("key", "", "The snapshot's path on the claim.")
	resultFile := fs.String("result-file", resources.TerminationLog, "Where the outcome is written: the termination message.")
	tlsDir := fs.String("tls-dir", "", "The cluster's TLS Secret (tls.crt, tls.key, ca.crt), when its nodes speak TLS.")
	serverName := fs.String("server-name", "", "The name each node's certificate is valid for.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *node == "" || *key == "" || *claim == "" {
		fmt.Fprintln(os.Stderr, "Backup failed: --node, --claim and --key are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	login := auth.Login{Username: resources.OperatorUserName, Password: os.Getenv(resources.EnvRedisPassword)}
	if *tlsDir != "" {
		cfg, err := clientTLS(*tlsDir, *serverName)
		if err != nil {
			fmt.Fprintf(os.Stderr, "Backup failed: %v\n", err)
			return resources.ExitSnapshotFailed
		}
		login.TLS = cfg
	}
	dest := backup.Dir{Root: *dir, Claim: *claim}
	res, err := backup.Snapshots{}.Take(ctx, *node, login, dest, *key)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Backup failed: %v\n", err)
		if errors.Is(err, backup.ErrStorage) {
			return resources.ExitStorageFailed
		}
		return resources.ExitSnapshotFailed
	}
	if err := os.WriteFile(*resultFile, []byte(backup.EncodeResult(res)), 0o600); err != nil {
		// Without its outcome the operator cannot record the snapshot: it is not a backup.
		_ = dest.Delete(context.WithoutCancel(ctx), *key)
		fmt.Fprintf(os.Stderr, "Backup failed: writing the outcome: %v\n", err)
		return resources.ExitStorageFailed
	}
	fmt.Printf("Stored %d bytes from %s at %s (%s).\n", res.Size, *node, dest.Location(*key), res.Checksum)
	return 0
}

func clientTLS(dir, serverName string) (*tls.Config, error) {
	var files [3][]byte
	for i, name := range []string{resources.TLSCertKey, resources.TLSKeyKey, resources.TLSCAKey} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading the TLS Secret's %s: %w", name, err)
		}
		files[i] = raw
	}
	return auth.ClientTLS(files[0], files[1], files[2], serverName)
}

// deleteBackupMain is the delete-backup subcommand: the pod that deletes a RedisBackup's
// snapshots (one, or one per shard: --key for each) from its PersistentVolumeClaim. A snapshot
// that is not there is no error.
func deleteBackupMain(args []string) int {
	fs := flag.NewFlagSet(resources.DeleteBackupCommand, flag.ContinueOnError)
	dir := fs.String("dir", "/backup", "Where the claim is mounted.")
	claim := fs.String("claim", "", "The claim's name, for the snapshot's location.")
	var keys keyList
	fs.Var(&keys, "key", "A snapshot's path on the claim; once for each snapshot.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	dest := backup.Dir{Root: *dir, Claim: *claim}
	for _, key := range keys {
		if err := dest.Delete(context.Background(), key); err != nil {
			fmt.Fprintf(os.Stderr, "Deleting %s failed: %v\n", dest.Location(key), err)
			return resources.ExitStorageFailed
		}
		fmt.Printf("Deleted %s.\n", dest.Location(key))
	}
	return 0
}

// keyList is a flag given once for each value.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(v string) error {
	*k = append(*k, v)
	return nil
}
