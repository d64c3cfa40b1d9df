package podrunner

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// socket is a container whose port is a real listener on loopback: closing it makes the probe's
// connection fail at once, as a process that stopped listening would.
type socket struct {
	ln    net.Listener
	alive bool
}

func (s *socket) Alive() bool { return s.alive }

func (s *socket) ListeningWithin(timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", s.ln.Addr().String(), timeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func tcpProbe(period, failures int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}},
		PeriodSeconds: period, FailureThreshold: failures}
}

func TestAReadyPodTurnsNotReadyOnlyAfterItsProbesFailedFailureThresholdTimes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &socket{ln: ln, alive: true}
	probe := tcpProbe(1, 2)
	var r readiness
	require.True(t, r.check(c, probe), "ready at the first probe that connects")

	require.NoError(t, ln.Close())
	assert.True(t, r.check(c, probe), "not probed again within its period")
	time.Sleep(1100 * time.Millisecond)
	assert.True(t, r.check(c, probe), "one failed probe of two")
	assert.True(t, r.check(c, probe), "the second probe waits for the period")
	time.Sleep(1100 * time.Millisecond)
	assert.False(t, r.check(c, probe), "two failed probes in a row")
}

func TestAPodWhoseProcessExitedIsNotReadyAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c := &socket{ln: ln, alive: true}
	probe := tcpProbe(10, 3)
	var r readiness
	require.True(t, r.check(c, probe))
	c.alive = false
	assert.False(t, r.check(c, probe), "an exited container is not ready, whatever its probe")
	c.alive = true
	assert.True(t, r.check(c, probe), "started again, ready at its first probe that connects")
}
