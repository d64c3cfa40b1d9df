package controllers

import (
	"errors"
	"fmt"
)

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
