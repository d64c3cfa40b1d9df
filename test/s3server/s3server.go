// Package s3server runs a real S3 server for tests: SeaweedFS's all-in-one "weed mini" (its S3
// gateway, Apache-2.0; built by make seaweedfs into bin/weed), as a local process on a loopback
// address of its own, with its data under the test's temporary directory.
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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/test/redistest"
)

// The one identity the server knows, with every right.
const (
	AccessKeyID     = "AKIDREDISOPERATORTEST"
	SecretAccessKey = "redis-operator-test-secret-key"
)

// Server is a running S3 server.
type Server struct {
	// Endpoint is its S3 URL: http://<ip>:<port>.
	Endpoint string
	ip, dir  string
	args     []string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Binary is bin/weed of this repository, or $WEED_BINARY.
func Binary() (string, error) {
	if b := os.Getenv("WEED_BINARY"); b != "" {
		return b, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack")); err == nil {
				b := filepath.Join(dir, "bin", "weed")
				if _, err := os.Stat(b); err != nil {
					return "", fmt.Errorf("%s is missing: run make seaweedfs", b)
				}
				return b, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no bin/weed above the working directory: run make seaweedfs, or set WEED_BINARY")
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
	if strings.Contains(dir, ",") {
		// weed reads -dir as a comma-separated list (a test's name with a comma names its
		// temporary directory).
		return nil, fmt.Errorf("the S3 server's directory %s must not hold a comma", dir)
	}
	config := filepath.Join(dir, "s3.json")
	identities := fmt.Sprintf(`{"identities":[{"name":"test","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		AccessKeyID, SecretAccessKey)
	if err := os.WriteFile(config, []byte(identities), 0o600); err != nil {
		return nil, err
	}
	ip := redistest.AllocateIP()
	// The admin server's gRPC ports listen on 127.0.0.1 whatever -ip says: free ones of its own.
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	adminGRPC, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + net.JoinHostPort(ip, "8333"), ip: ip, dir: dir, args: []string{
		binary, "mini", "-dir=" + data, "-ip=" + ip, "-ip.bind=" + ip, "-s3.config=" + config,
		"-master.telemetry=false", "-admin.ui=false", "-s3.autoCreateBucket=false",
		"-admin.port=" + strconv.Itoa(admin), "-admin.port.grpc=" + strconv.Itoa(adminGRPC), "-admin.port.legacy=0",
	}}
	return s, s.start()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "weed.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.args[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			tail, _ := os.ReadFile(filepath.Join(s.dir, "weed.log"))
			return fmt.Errorf("weed mini exited at start: %s", tail[max(0, len(tail)-2000):])
		default:
		}
		// The gateway answers before the volume server has joined: ready once an object can be
		// stored.
		if s.storesObjects() {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.Stop()
	return errors.New("weed mini did not serve S3 within 60s")
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
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(readyBucket)}); err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
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
