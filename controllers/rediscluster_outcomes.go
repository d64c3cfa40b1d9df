package controllers

import (
	"errors"
	"fmt"
	"time"
)

// A phase ends in one of three ways: done (nil), waiting (a *phaseWait, from waitFor) or failed
// (any other error, a *phaseError when it has a reason of its own). Reconcile sorts them out:
// only failures are Degraded, Warning Events and errors for controller-runtime.

// phaseError is a failed reconcile phase: which phase, and the condition (and Event) reason
// that says what kind of failure it is. Its message is the cause's, for the condition and the
// Event; the error controller-runtime logs names the phase too.
type phaseError struct {
	phase  string
	reason string
	err    error
}

func (e *phaseError) Error() string { return e.err.Error() }

func (e *phaseError) Unwrap() error { return e.err }

// failed gives err a reason of its own, other than its phase's usual one.
func failed(reason string, err error) error {
	return &phaseError{reason: reason, err: err}
}

// asPhaseError ties err to the phase it came from, keeping a reason that the phase gave it.
func asPhaseError(p phase, err error) *phaseError {
	out := &phaseError{phase: p.name, reason: p.reason, err: err}
	var given *phaseError
	if errors.As(err, &given) {
		out.reason, out.err = given.reason, given.err
	}
	return out
}

// logged is what controller-runtime logs: the message with its phase.
func (e *phaseError) logged() error { return fmt.Errorf("phase %s: %w", e.phase, e) }

// phaseWait is a phase that is not done and has not failed: it waits for something that takes
// its time or that someone else makes (a restore pod still copying, a backup not completed
// yet). The phases after it wait too, as they would after its failure. A wait is progress:
// Progressing, Ready and the condition of its feature say why, never Degraded nor a Warning
// Event, and the reconcile returns no error.
type phaseWait struct {
	phase   string
	reason  string
	message string
	// after is when to look again; 0 when a watched object's change wakes the reconcile.
	after time.Duration
}

func (w *phaseWait) Error() string { return w.message }

// waitFor ends a phase waiting: reason and message are for its conditions, after is when to
// look again (0: a watch wakes the reconcile).
func waitFor(after time.Duration, reason, message string) error {
	return &phaseWait{reason: reason, message: message, after: after}
}

// asPhaseWait is err as a wait of phase p, if it is one.
func asPhaseWait(p phase, err error) (*phaseWait, bool) {
	var w *phaseWait
	if !errors.As(err, &w) {
		return nil, false
	}
	out := *w
	out.phase = p.name
	return &out, true
}

// outcome is why a phase did not finish: its reason and message.
type outcome struct{ reason, message string }

// unfinished is why this reconcile did not carry the spec out: the failure, else the wait;
// zero when every phase was done.
func (s *reconcileState) unfinished() outcome {
	switch {
	case s.err != nil:
		return outcome{s.err.reason, s.err.Error()}
	case s.wait != nil:
		return outcome{s.wait.reason, s.wait.message}
	}
	return outcome{}
}
