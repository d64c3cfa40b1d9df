package procfs_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/org/redis-operator/test/procfs"
)

func TestParseReadsANameWithSpacesAndParentheses(t *testing.T) {
	line := "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 120 0 0 0 250 50 0 0 20 0 1 0 3000 1000000 200\n"
	st, err := procfs.Parse(line)
	require.NoError(t, err)
	assert.Equal(t, procfs.Stat{PID: 4242, Comm: "my (odd) name", State: 'S', PPID: 17, CPU: 3 * time.Second}, st)

	for _, bad := range []string{"", "4242 name S 1", "4242 (name) S", "x (name) S 1 2 3 4 5 6 7 8 9 10 11 12"} {
		_, err := procfs.Parse(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestReadSeesThisProcessAndAChildUntilItIsReaped reads real processes: this one, and a child
// that is alive, then a zombie (exited, not reaped), then gone.
func TestReadSeesThisProcessAndAChildUntilItIsReaped(t *testing.T) {
	self, err := procfs.Read(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getppid(), self.PPID)

	child := exec.Command("sleep", "0.3")
	require.NoError(t, child.Start())
	pid := child.Process.Pid
	assert.True(t, procfs.Alive(pid))
	assert.Contains(t, procfs.Children(os.Getpid()), pid)
	st, err := procfs.Read(pid)
	require.NoError(t, err)
	assert.Equal(t, "sleep", st.Comm)

	require.Eventually(t, func() bool { return !procfs.Alive(pid) }, 5*time.Second, 20*time.Millisecond, "the exited child is a zombie until reaped")
	st, err = procfs.Read(pid)
	require.NoError(t, err, "not reaped yet: still there")
	assert.True(t, st.Zombie())
	require.NoError(t, child.Wait())
	_, err = procfs.Read(pid)
	assert.Error(t, err, "reaped: gone")
}
