// Package outcome is how a reconcile phase ends, in both controllers: done (a nil error),
// waiting (Wait: for something that takes its time or that someone else makes) or failed (any
// other error; Fail gives it a reason of its own). Only failures are Degraded, Warning Events
// and errors for controller-runtime; a wait is progress, and the requeue is the soonest wait.
package outcome

import (
	"errors"
	"fmt"
	"time"
)

// Failure is a failed phase: which phase, and the condition (and Event) reason that says what
// kind of failure it is. Its message is the cause's, for the condition and the Event; the error
// controller-runtime logs names the phase too (Logged).
type Failure struct {
	Phase  string
	Reason string
	Err    error
}

func (e *Failure) Error() string { return e.Err.Error() }

func (e *Failure) Unwrap() error { return e.Err }

// Logged is what controller-runtime logs: the message with its phase.
func (e *Failure) Logged() error { return fmt.Errorf("phase %s: %w", e.Phase, e) }

// Fail gives err a reason of its own, other than its phase's usual one.
func Fail(reason string, err error) error {
	return &Failure{Reason: reason, Err: err}
}

// AsFailure ties err to the phase it came from (whose usual reason is reason), keeping a reason
// that the phase gave it (Fail).
func AsFailure(phase, reason string, err error) *Failure {
	out := &Failure{Phase: phase, Reason: reason, Err: err}
	var given *Failure
	if errors.As(err, &given) {
		out.Reason, out.Err = given.Reason, given.Err
	}
	return out
}

// Waiting is a phase that is not done and has not failed: it waits for something that takes
// its time or that someone else makes (a restore pod still copying, a backup not completed
// yet, slots still moving). A wait is progress: Progressing, Ready and the condition of its
// feature say why, never Degraded nor a Warning Event, and the reconcile returns no error.
type Waiting struct {
	Phase   string
	Reason  string
	Message string
	// After is when to look again; 0 when a watched object's change wakes the reconcile.
	After time.Duration
}

func (w *Waiting) Error() string { return w.Message }

// Wait ends a phase waiting: reason and message are for its conditions, after is when to look
// again (0: a watch wakes the reconcile).
func Wait(after time.Duration, reason, message string) error {
	return &Waiting{Reason: reason, Message: message, After: after}
}

// AsWaiting is err as a wait of the phase, if it is one.
func AsWaiting(phase string, err error) (*Waiting, bool) {
	var w *Waiting
	if !errors.As(err, &w) {
		return nil, false
	}
	out := *w
	out.Phase = phase
	return &out, true
}

// Soonest is the sooner of two requeues, where 0 means none: what a reconcile whose phases ask
// for several comes back after.
func Soonest(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// Unfinished is why a reconcile did not carry its spec out: the failure, else the wait; zero
// when every phase was done.
type Unfinished struct{ Reason, Message string }

// Of is why a reconcile that ended in failed (nil when none) and waiting (nil when none) did not
// finish: the failure first.
func Of(failed *Failure, waiting *Waiting) Unfinished {
	switch {
	case failed != nil:
		return Unfinished{failed.Reason, failed.Error()}
	case waiting != nil:
		return Unfinished{waiting.Reason, waiting.Message}
	}
	return Unfinished{}
}
