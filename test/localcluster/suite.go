package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"syscall"
	"testing"

	"github.com/org/redis-operator/test/node"
)

// Suite is a test package's local cluster: started once for the package (TestMain), stopped
// after its tests, with a check that no process it started is left behind.
type Suite struct {
	// Name prefixes the cluster's directory.
	Name string
	// Start brings the cluster up in dir.
	Start func(ctx context.Context, root, dir string) (*Cluster, error)
	// Diagnose prints what helps understand a failure, before the cluster stops.
	Diagnose func(c *Cluster, dir string)
}

// Run starts the cluster, hands it to use, runs the tests and returns the exit code. After the
// cluster has stopped, the machine must be as it was: no process of the cluster, and nothing a
// real node changes (node.Snapshot: sysctls, cgroups, fixed-path directories, namespaces).
func (s Suite) Run(m *testing.M, root string, use func(*Cluster)) int {
	before := node.Snapshot()
	dir, err := os.MkdirTemp("", "redis-operator-"+s.Name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cluster, err := s.Start(context.Background(), root, dir)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local cluster:", err)
	} else {
		stopOnSignal(cluster, dir)
		use(cluster)
		code = m.Run()
	}
	if code != 0 && cluster != nil && s.Diagnose != nil {
		s.Diagnose(cluster, dir)
	}
	if cluster != nil {
		cluster.Stop()
	}
	// The cluster cleans up after itself: no process it started is left.
	if out, err := exec.Command("pgrep", "-af", dir).Output(); err == nil && len(out) > 0 {
		fmt.Fprintf(os.Stderr, "processes left behind by the local cluster:\n%s", out)
		code = 1
	}
	// An attached cluster is not on this machine: what else runs here may change it meanwhile.
	if after := node.Snapshot(); cluster != nil && cluster.Local() && !reflect.DeepEqual(before, after) {
		fmt.Fprintf(os.Stderr, "the machine after the local cluster stopped differs:\nbefore: %+v\nafter:  %+v\n", before, after)
		code = 1
	}
	return code
}

// stopOnSignal stops the cluster and exits when the tests are interrupted (Ctrl-C, or a
// SIGTERM from a CI runner): otherwise the real node's containers, mounts and namespaces would
// outlive the test binary. (go test's own -timeout panics and cannot be caught: suites set
// their timeout well above their duration.)
func stopOnSignal(cluster *Cluster, dir string) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "%s: stopping the local cluster\n", sig)
		cluster.Stop()
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}()
}
