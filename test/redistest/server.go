// Package redistest runs real redis-server processes for tests and benchmarks, each on its own
// loopback address (127.x.y.z:6379), configured with the redis.conf the operator writes.
// Processes share the host's network, so each binds its address, replicates from it
// (bind-source-addr) and announces it (replica-announce-ip): a primary then sees each replica
// at its own address, as in a cluster.
package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrExitedAtStart means redis-server exited before it listened: a configuration it refuses,
// for example. The Server is still returned, exited, so that a caller can report it as a
// crashed container.
var ErrExitedAtStart = errors.New("exited at start")

// Server is one redis-server process.
type Server struct {
	Name string
	IP   string
	Dir  string
	conf string
	// mu guards cmd and done: a test kills a server while its runner restarts it.
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// exitCode is the process's exit code once it exited.
	exitCode atomic.Int64
	// restarting is held by Restart and StartIfExited: a test restarts a server while the
	// runner of its pod starts exited ones again, and two starts on one address would have the
	// second refused (its port in use) or kill the first.
	restarting sync.Mutex
}

// ExitCode is the exit code of the process once it exited (-1 when killed by a signal).
func (s *Server) ExitCode() (int, bool) {
	if cmd, _ := s.proc(); cmd == nil || s.Alive() {
		return 0, false
	}
	return int(s.exitCode.Load()), true
}

// LogTail is the end of what the process wrote to stderr and its log file, at most max bytes:
// what the kubelet reports as a failed container's termination message (FallbackToLogsOnError).
func (s *Server) LogTail(max int) string {
	var all []byte
	for _, f := range []string{"stderr.log", "redis.log"} {
		raw, _ := os.ReadFile(filepath.Join(s.Dir, f))
		all = append(all, raw...)
	}
	return string(all[len(all)-min(len(all), max):])
}

var nextAddress atomic.Int64

// AllocateIP gives each server (and each pod) of this process its own loopback address. The second octet
// comes from the process ID, so concurrent test processes rarely meet.
func AllocateIP() string {
	n := nextAddress.Add(1)
	return fmt.Sprintf("127.%d.%d.%d", 100+os.Getpid()%150, n/250, n%250+2)
}

// Port is the port every server listens on, on its own address.
const Port = 6379

// StartIn writes conf (a redis.conf whose paths point at this host) plus this host's address
// settings into dir, the data directory, and starts redis-server on it. A directory that
// already holds data (a persistent volume) keeps it.
func StartIn(dir, name, conf string) (*Server, error) {
	s := &Server{Name: name, IP: AllocateIP(), Dir: dir}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	s.conf = withoutHostSettings(conf)
	// A TLS node (port 0, tls-port) listens with TLS only, on the same port.
	portDirective := "port"
	if hasDirective(conf, "tls-port") {
		portDirective = "tls-port"
	}
	s.conf += fmt.Sprintf(`
# This host: one loopback address per node.
bind %[1]s
bind-source-addr %[1]s
replica-announce-ip %[1]s
%[4]s %[2]d
dir %[3]s
daemonize no
logfile %[3]s/redis.log
`, s.IP, Port, s.Dir, portDirective)
	if hasDirective(s.conf, "cluster-enabled") {
		// What the pod's --cluster-announce-ip $(POD_IP) says in a pod.
		s.conf += "cluster-announce-ip " + s.IP + "\n"
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "redis.conf"), []byte(s.conf), 0o600); err != nil {
		return nil, err
	}
	return s, s.start()
}

func hasDirective(conf, name string) bool {
	for _, line := range strings.Split(conf, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// withoutHostSettings drops the lines that name the pod's own address and data directory
// (bind, dir): the server sets its own loopback address and directory after them.
func withoutHostSettings(conf string) string {
	var kept []string
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "dir ") || strings.HasPrefix(line, "bind ") {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}

// PID is the running process's ID: a restart changes it.
func (s *Server) PID() int {
	cmd, _ := s.proc()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.IP, strconv.Itoa(Port)) }

func (s *Server) start() error {
	cmd := exec.Command("redis-server", filepath.Join(s.Dir, "redis.conf"))
	stderr, err := os.OpenFile(filepath.Join(s.Dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server %s: %w", s.Name, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		s.exitCode.Store(int64(cmd.ProcessState.ExitCode()))
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%w: redis-server %s: %s", ErrExitedAtStart, s.Name, s.LogTail(2000))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("redis-server " + s.Name + " did not listen within 10s")
}

// Kill ends the process at once (SIGKILL), as a crash or a lost node would.
func (s *Server) Kill() {
	cmd, done := s.proc()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	s.mu.Lock()
	if s.cmd == cmd {
		s.cmd = nil
	}
	s.mu.Unlock()
}

// proc is the process last started, and its end.
func (s *Server) proc() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.done
}

// Restart starts the process again on the same address, configuration and data directory.
func (s *Server) Restart() error {
	s.restarting.Lock()
	defer s.restarting.Unlock()
	s.Kill()
	return s.start()
}

// StartIfExited starts the process again when it has exited, as restartPolicy Always does, and
// says whether it did: a server a Restart has just started again is left running.
func (s *Server) StartIfExited() (bool, error) {
	s.restarting.Lock()
	defer s.restarting.Unlock()
	if s.Alive() {
		return false, nil
	}
	s.Kill() // forgets the exited process
	return true, s.start()
}

// WipeData removes the node's persisted data, as a restart on an emptyDir would.
func (s *Server) WipeData() error {
	for _, f := range []string{"dump.rdb", "appendonlydir"} {
		if err := os.RemoveAll(filepath.Join(s.Dir, f)); err != nil {
			return err
		}
	}
	return nil
}

// Listening is true when the server accepts a TCP connection: the readiness probe the pods'
// tcpSocket probe asks for.
func (s *Server) Listening() bool { return s.ListeningWithin(200 * time.Millisecond) }

// ListeningWithin is Listening with the connection's timeout given: a tcpSocket probe's
// timeoutSeconds.
func (s *Server) ListeningWithin(timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", s.Addr(), timeout)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Alive is true while the process lives; false after it exited or was killed.
func (s *Server) Alive() bool {
	cmd, done := s.proc()
	if cmd == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process: SIGSTOP freezes a node as a hung host would, SIGCONT thaws it.
func (s *Server) Signal(sig syscall.Signal) error {
	cmd, _ := s.proc()
	if cmd == nil {
		return errors.New("redis-server " + s.Name + " is not running")
	}
	return cmd.Process.Signal(sig)
}

// Version is the version of the redis-server on the PATH, major.minor.patch.
func Version() (string, error) {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("redis-server --version: %w", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis-server --version printed no version: %q", out)
}
