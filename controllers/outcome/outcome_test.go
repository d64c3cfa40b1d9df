package outcome_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
)

func TestAFailureKeepsTheReasonItWasGiven(t *testing.T) {
	assert.Equal(t, cachev1.ReasonApplyFailed, outcome.AsFailure("Secrets", cachev1.ReasonApplyFailed, errors.New("forbidden")).Reason)
	given := outcome.AsFailure("Secrets", cachev1.ReasonApplyFailed, outcome.Fail(cachev1.ReasonSecretNotFound, errors.New("password Secret x not found")))
	assert.Equal(t, cachev1.ReasonSecretNotFound, given.Reason)
	assert.Equal(t, "password Secret x not found", given.Error())
	assert.EqualError(t, given.Logged(), "phase Secrets: password Secret x not found")
}

func TestAWaitIsNamedForItsPhaseAndAFailureComesFirst(t *testing.T) {
	w, ok := outcome.AsWaiting("RestoreSource", outcome.Wait(time.Second, cachev1.ReasonBackupNotReady, "waiting for the backup"))
	assert.True(t, ok)
	assert.Equal(t, outcome.Waiting{Phase: "RestoreSource", Reason: cachev1.ReasonBackupNotReady, Message: "waiting for the backup", After: time.Second}, *w)
	_, ok = outcome.AsWaiting("Secrets", errors.New("forbidden"))
	assert.False(t, ok, "a failure is no wait")

	failure := outcome.AsFailure("Users", cachev1.ReasonUserRejected, errors.New("no"))
	assert.Equal(t, outcome.Unfinished{Reason: cachev1.ReasonUserRejected, Message: "no"}, outcome.Of(failure, w))
	assert.Equal(t, outcome.Unfinished{Reason: cachev1.ReasonBackupNotReady, Message: "waiting for the backup"}, outcome.Of(nil, w))
	assert.Zero(t, outcome.Of(nil, nil))
}

func TestTheSoonestRequeueWins(t *testing.T) {
	assert.Equal(t, time.Second, outcome.Soonest(0, time.Second))
	assert.Equal(t, time.Second, outcome.Soonest(time.Second, 0))
	assert.Equal(t, 10*time.Millisecond, outcome.Soonest(time.Second, 10*time.Millisecond))
	assert.Zero(t, outcome.Soonest(0, 0))
}
