// Package s3server runs a real S3 server for tests: SeaweedFS's all-in-one "weed mini" (its S3
// gateway, Apache-2.0; built by make seaweedfs into bin/weed), as a local process on a loopback
// address of its own, with its data under the test's temporary directory.
package s3server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	Endpoint  string
	ip, dir   string
	args      []string
	grpcPorts map[string]int
	cmd       *exec.Cmd
	done      chan struct{}
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
	// weed mini's services talk to each other over Unix sockets it names by gRPC port alone, in
	// /tmp (seaweedfs-<service>-grpc-<port>.sock), whatever -ip says: two servers with the
	// default ports would use each other's master and filer, and uploads fail with "volume not
	// found". Each server has gRPC ports of its own, and so does its admin server (which listens
	// on 127.0.0.1 whatever -ip says).
	ports := map[string]int{}
	for _, name := range grpcServices {
		if ports[name], err = freeGRPCPort(ports); err != nil {
			return nil, err
		}
	}
	admin, err := freeGRPCPort(ports)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	logs := filepath.Join(dir, "logs")
	for _, d := range []string{data, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s := &Server{Endpoint: "http://" + net.JoinHostPort(ip, "8333"), ip: ip, dir: dir, grpcPorts: ports, args: []string{
		binary, "-logdir=" + logs, "mini", "-dir=" + data, "-ip=" + ip, "-ip.bind=" + ip, "-s3.config=" + config,
		"-master.telemetry=false", "-admin.ui=false", "-s3.autoCreateBucket=false", "-webdav=false",
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"), "-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
		"-admin.port=" + strconv.Itoa(admin), "-admin.port.legacy=0",
	}}
	for _, name := range grpcServices {
		s.args = append(s.args, fmt.Sprintf("-%s.port.grpc=%d", name, ports[name]))
	}
	return s, s.start()
}

// grpcServices are the services of weed mini whose gRPC ports name a socket in /tmp.
var grpcServices = []string{"master", "volume", "filer", "s3", "admin"}

// grpcSocket is where weed mini puts the socket of a service's gRPC port.
func grpcSocket(service string, port int) string {
	return fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", service, port)
}

// freeGRPCPort is a free port that no other server's socket names, and not one of taken.
func freeGRPCPort(taken map[string]int) (int, error) {
	for range 100 {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		clash := slices.Contains(slices.Collect(maps.Values(taken)), port)
		for _, name := range grpcServices {
			if _, err := os.Stat(grpcSocket(name, port)); err == nil {
				clash = true
			}
		}
		if !clash {
			return port, nil
		}
	}
	return 0, errors.New("no free port for the S3 server's gRPC services")
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
	// Its caches and anything else it puts in the temporary directory stay under its own.
	cmd.Env = append(os.Environ(), "TMPDIR="+s.dir)
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
	// A killed server leaves its sockets in /tmp.
	for name, port := range s.grpcPorts {
		_ = os.Remove(grpcSocket(name, port))
	}
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
