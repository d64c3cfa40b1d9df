package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

	"github.com/org/redis-operator/test/procfs"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

// operatorProcess is the operator binary (bin/manager, `make build`) running against the
// benchmark's API server, watching one namespace, with its production defaults: its CPU and
// memory are its own, not the benchmark's.
type operatorProcess struct {
	cmd     *exec.Cmd
	metrics string // host:port of its metrics endpoint
	logPath string
}

func startOperatorProcess(b *testing.B, cfg *rest.Config, namespace string, flags ...string) *operatorProcess {
	root, err := testenv.RepoRoot()
	require.NoError(b, err)
	binary := filepath.Join(root, "bin", "manager")
	_, err = os.Stat(binary)
	require.NoError(b, err, "the operator binary: run `make build`")
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(b, testenv.WriteKubeconfig(cfg, kubeconfig))
	p := &operatorProcess{metrics: freeAddr(b), logPath: filepath.Join(dir, "operator.log")}
	logFile, err := os.Create(p.logPath)
	require.NoError(b, err)
	defer logFile.Close()
	// Plain HTTP: the benchmark reads the operator's own counters, not who may read them.
	args := []string{"--metrics-bind-address=" + p.metrics, "--metrics-insecure", "--health-probe-bind-address=0"}
	if addr := os.Getenv("BENCH_PPROF"); addr != "" {
		// For a profile of the operator during a benchmark: go tool pprof http://$BENCH_PPROF/debug/pprof/profile
		args = append(args, "--pprof-bind-address="+addr)
	}
	p.cmd = exec.Command(binary, append(args, flags...)...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "WATCH_NAMESPACE="+namespace)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	require.NoError(b, p.cmd.Start())
	b.Cleanup(p.stop)
	require.Eventually(b, func() bool { _, err := p.metric("redis_operator_redis_connections_opened_total"); return err == nil },
		30*time.Second, 100*time.Millisecond, "the operator's metrics endpoint")
	return p
}

func (p *operatorProcess) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// cpu is the CPU time the process used so far (user and system).
func (p *operatorProcess) cpu(b *testing.B) time.Duration {
	d, err := cpuTime(p.cmd.Process.Pid)
	require.NoError(b, err)
	return d
}

// memory is the process's resident set now and at its peak, in MiB.
func (p *operatorProcess) memory(b *testing.B) (rss, peak float64) {
	rss, peak, err := residentMiB(p.cmd.Process.Pid)
	require.NoError(b, err)
	return rss, peak
}

// cpuTime is the CPU time process pid used so far (user and system).
func cpuTime(pid int) (time.Duration, error) {
	st, err := procfs.Read(pid)
	return st.CPU, err
}

// residentMiB is process pid's resident set now and at its peak, in MiB.
func residentMiB(pid int) (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, _ := strings.Cut(sc.Text(), ":")
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		switch {
		case err != nil:
		case key == "VmRSS":
			rss = kb / 1024
		case key == "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak, sc.Err()
}

// cpuShare is the share of one core the process used over window, measured from now.
func (p *operatorProcess) cpuShare(b *testing.B, window time.Duration) float64 {
	before, start := p.cpu(b), time.Now()
	time.Sleep(window)
	return float64(p.cpu(b)-before) / float64(time.Since(start))
}

// profileCPU, when BENCH_PPROF is set, takes a CPU profile of the operator over the next window;
// the function it returns waits for it and prints where the time went (go tool pprof -top).
func (p *operatorProcess) profileCPU(b *testing.B, window time.Duration) func() {
	addr := os.Getenv("BENCH_PPROF")
	if addr == "" {
		return func() {}
	}
	path := filepath.Join(b.TempDir(), "operator.pprof")
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(window.Seconds())))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		done <- err
	}()
	return func() {
		require.NoError(b, <-done)
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=30", p.cmd.Path, path).CombinedOutput()
		require.NoError(b, err, "%s", out)
		fmt.Printf("\nthe operator's CPU profile over %s:\n%s", window, out)
		// By the calls each function made too: which of the operator's own parts the time is under.
		out, err = exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=60", p.cmd.Path, path).CombinedOutput()
		require.NoError(b, err, "%s", out)
		fmt.Printf("\nthe same, by cumulative time:\n%s", out)
	}
}

// metric reads one unlabelled sample from the operator's metrics endpoint.
func (p *operatorProcess) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(value, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

func (p *operatorProcess) logTail() string {
	raw, _ := os.ReadFile(p.logPath)
	if len(raw) > 4000 {
		raw = raw[len(raw)-4000:]
	}
	return string(raw)
}

// apiServer starts kube-apiserver and etcd for a benchmark, until it ends, and a client of them.
func apiServer(b *testing.B) (*rest.Config, client.WithWatch) {
	_, cfg := testenv.StartFor(b)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: operator.NewScheme()})
	require.NoError(b, err)
	return cfg, c
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	return l.Addr().String()
}

// waitFor polls cond every interval until it holds, or fails the benchmark after timeout.
func waitFor(b *testing.B, p *operatorProcess, what string, timeout, interval time.Duration, cond func(context.Context) bool) {
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for !cond(ctx) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s; the operator's log ends:\n%s", what, timeout, p.logTail())
		}
		time.Sleep(interval)
	}
}
