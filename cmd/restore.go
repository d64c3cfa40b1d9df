package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
)

// restoreMain is the restore subcommand: the init container of a RedisCluster created from a
// backup. It reads what to restore from its environment (the <name>-restore ConfigMap and the
// credentials Secret) and writes the snapshot into the first node's data directory. Without a
// restore to do (the ConfigMap is gone: the data was restored) or on another node, it does
// nothing. What it says on failure becomes the pod's termination message, which the operator
// reports in the Restored condition.
func restoreMain(args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "/data", "The node's data directory.")
	aof := fs.Bool("aof", false, "The node runs with appendonly yes: lay the snapshot out as an AOF's base.")
	caFile := fs.String("ca-file", "", "PEM certificates the object store's certificate must chain to.")
	sourceDir := fs.String("source-dir", "", "Where the backup's PersistentVolumeClaim is mounted, for a pvc:// location.")
	forNode := fs.String("for-node", "", "The node whose data this is; without it, this pod's own (POD_NAME).")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	location := os.Getenv(resources.EnvRestoreLocation)
	pod := os.Getenv(resources.EnvPodName)
	if *forNode != "" {
		pod = *forNode
	}
	switch {
	case location == "":
		fmt.Println("Nothing to restore: the data was restored when the cluster was created.")
		return 0
	case !strings.HasSuffix(pod, "-0"):
		fmt.Printf("Nothing to restore on %s: the first node holds the restored data, the others replicate it.\n", pod)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := restore(ctx, location, *dataDir, *aof, *caFile, *sourceDir); err != nil {
		fmt.Fprintf(os.Stderr, "Restore failed: %v\n", err)
		return 1
	}
	return 0
}

func restore(ctx context.Context, location, dataDir string, aof bool, caFile, sourceDir string) error {
	source, key, err := restoreSource(location, caFile, sourceDir)
	if err != nil {
		return err
	}
	restored, err := backup.Restore(ctx, backup.RestoreOptions{Store: source, Key: key, Checksum: os.Getenv(resources.EnvRestoreChecksum), DataDir: dataDir, AOF: aof})
	if err != nil {
		return err
	}
	if restored {
		fmt.Printf("Restored %s into %s.\n", location, dataDir)
	} else {
		fmt.Printf("%s was restored before; nothing to do.\n", location)
	}
	return nil
}

// restoreSource is where the snapshot at location is read from: the backup's claim mounted at
// sourceDir, or its S3 bucket with the credentials of the environment.
func restoreSource(location, caFile, sourceDir string) (backup.Destination, string, error) {
	if strings.HasPrefix(location, "pvc://") {
		claim, key, err := backup.VolumeKey(location)
		if err != nil {
			return nil, "", err
		}
		if sourceDir == "" {
			return nil, "", fmt.Errorf("%s is on a volume, and no --source-dir mounts it", location)
		}
		return backup.Dir{Root: sourceDir, Claim: claim}, key, nil
	}
	bucket, key, ok := strings.Cut(strings.TrimPrefix(location, "s3://"), "/")
	if !ok || !strings.HasPrefix(location, "s3://") {
		return nil, "", fmt.Errorf("location %q is not s3://<bucket>/<key> or pvc://<claim>/<path>", location)
	}
	creds := backup.Credentials{AccessKeyID: os.Getenv(cachev1.S3AccessKeyIDKey), SecretAccessKey: os.Getenv(cachev1.S3SecretAccessKeyKey)}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		return nil, "", errors.New("the credentials Secret, or its key " + cachev1.S3AccessKeyIDKey + " or " + cachev1.S3SecretAccessKeyKey + ", is missing")
	}
	var caPEM []byte
	if caFile != "" {
		var err error
		if caPEM, err = os.ReadFile(caFile); err != nil {
			return nil, "", fmt.Errorf("reading the CA bundle: %w", err)
		}
	}
	store, err := backup.NewStore(cachev1.S3Destination{
		Endpoint: os.Getenv(resources.EnvRestoreEndpoint), Region: os.Getenv(resources.EnvRestoreRegion), Bucket: bucket,
	}, creds, caPEM)
	return store, key, err
}
