// Package s3server runs a real S3 server for tests: the Versity S3 Gateway (versitygw,
// Apache-2.0; built by make versitygw into bin/versitygw) on its posix backend, as a local process
// on a loopback address of its own, with its buckets (directories), objects (files) and their
// metadata under the test's temporary directory.
package s3server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/redistest"
)

// The one identity the server knows (its root account), with every right.
const (
	AccessKeyID     = "AKIDREDISOPERATORTEST"
	SecretAccessKey = "redis-operator-test-secret-key"
)

// Server is a running S3 server.
type Server struct {
	// Endpoint is its S3 URL: http://<ip>:<port>.
	Endpoint string
	dir      string
	args     []string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Binary is bin/versitygw of this repository, or $VERSITYGW_BINARY.
func Binary() (string, error) {
	if b := os.Getenv("VERSITYGW_BINARY"); b != "" {
		return b, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack")); err == nil {
				b := filepath.Join(dir, "bin", "versitygw")
				if _, err := os.Stat(b); err != nil {
					return "", fmt.Errorf("%s is missing: run make versitygw", b)
				}
				return b, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no bin/versitygw above the working directory: run make versitygw, or set VERSITYGW_BINARY")
		}
		dir = parent
	}
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartIn runs a server with its data and log under dir, until Stop.
func StartIn(dir string) (*Server, error) {
	binary, err := Binary()
	if err != nil {
		return nil, err
	}
	data, meta := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	address := net.JoinHostPort(redistest.AllocateIP(), "8333")
	s := &Server{Endpoint: "http://" + address, dir: dir, args: []string{
		binary, "--access", AccessKeyID, "--secret", SecretAccessKey, "--region", "us-east-1",
		"--port", address, "--quiet",
		// The objects' metadata in a directory beside them, not in extended attributes, which not
		// every filesystem of temporary directories keeps (tmpfs before Linux 6.6).
		"posix", "--sidecar", meta, data,
	}}
	return s, s.start()
}

func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "versitygw.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	// Anything it puts in the temporary directory stays under its own.
	cmd.Env = append(os.Environ(), "TMPDIR="+s.dir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.args[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			tail, _ := os.ReadFile(logPath)
			s.cmd = nil
			return fmt.Errorf("versitygw exited at start: %s", tail[max(0, len(tail)-2000):])
		default:
		}
		if s.storesObjects() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Stop()
	return errors.New("versitygw did not serve S3 within 30s")
}

// readyBucket holds the object that shows the server stores objects.
const readyBucket = "s3server-ready"

func (s *Server) storesObjects() bool {
	resp, err := http.Get(s.Endpoint + "/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := s.Client()
	// After a restart the bucket is there.
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(readyBucket)}); err != nil {
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(readyBucket)}); err != nil {
			return false
		}
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(readyBucket), Key: aws.String("ready"), Body: strings.NewReader("ready")})
	return err == nil
}

// Stop kills the server: the store is down, as if its machine went.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the stopped server again, with its data.
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// Client is an S3 client of the server, as its one identity.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
	})
}

// CreateBucket makes a bucket.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
}

// Destination is a RedisBackup destination in bucket, with the credentials in secretName.
func (s *Server) Destination(bucket, secretName string) cachev1.BackupDestination {
	return cachev1.BackupDestination{S3: &cachev1.S3Destination{Endpoint: s.Endpoint, Bucket: bucket, Region: "us-east-1",
		CredentialsSecret: secretName}}
}

// CredentialsData is the data of a credentials Secret for the server's identity.
func CredentialsData() map[string][]byte {
	return map[string][]byte{cachev1.S3AccessKeyIDKey: []byte(AccessKeyID), cachev1.S3SecretAccessKeyKey: []byte(SecretAccessKey)}
}
