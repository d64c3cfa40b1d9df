package credentials

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestARotationKeepsTheOldPasswordForItsTimeThenRemovesIt(t *testing.T) {
	now := time.Now()
	var rot rotation

	// Step 1: the file has A, the Secret B
	rot, started := rot.started("A", "B", now, time.Minute)
	assert.True(t, started)
	assert.Equal(t, []string{"A"}, rot.stillValid("B", now), "A works beside B in its time")
	assert.Equal(t, []string{"A"}, rot.candidates(), "a node that refuses B is reached with A")
	assert.Empty(t, rot.due("B", now, true))

	// Found again after a crash between steps 1 and 2: the same rotation, the same time
	again, started := rot.started("A", "B", now.Add(10*time.Second), time.Minute)
	assert.False(t, started)
	assert.Equal(t, rot, again)

	// Step 4: its time is up; it is removed only once the file no longer lists it
	later := now.Add(time.Minute)
	assert.Empty(t, rot.stillValid("B", later))
	assert.Empty(t, rot.due("B", later, true), "the file still lists A: a node that restarts would take it again")
	assert.Equal(t, []string{"A"}, rot.due("B", later, false))
}

func TestAChangeDuringAnotherRetiresTheOlderPassword(t *testing.T) {
	now := time.Now()
	rot, _ := rotation{}.started("A", "B", now, time.Minute)

	// When the Secret changes again to C while A still works
	rot, started := rot.started("B", "C", now.Add(time.Second), time.Minute)

	// Then B works beside C, and A is removed at once
	assert.True(t, started)
	assert.Equal(t, []string{"B"}, rot.stillValid("C", now.Add(time.Second)))
	assert.Equal(t, []string{"A"}, rot.due("C", now.Add(time.Second), true))
	assert.Equal(t, []string{"B", "A"}, rot.candidates(), "newest first")
}

func TestAChangeBackToAnOlderPasswordNeverRemovesIt(t *testing.T) {
	now := time.Now()
	rot, _ := rotation{}.started("A", "B", now, time.Minute)
	rot, _ = rot.started("B", "A", now, time.Minute) // back to A: B is now the previous one

	assert.Empty(t, rot.due("A", now, true), "A is current again: not removed")
	assert.Equal(t, []string{"B"}, rot.stillValid("A", now))
	assert.Equal(t, []string{"B"}, rot.due("A", now.Add(time.Minute), false))
}
