// Package machinery stands in for boxcutter's machinery (see the boxcutter package): its
// engines refuse to run.
package machinery

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"pkg.package-operator.run/boxcutter/machinery/types"
)

// Action is what the engine did with an object.
type Action string

// ActionCollision: another owner controls the object.
const ActionCollision Action = "Collision"

// ObjectResult is the outcome for one object.
type ObjectResult interface {
	Action() Action
	String() string
	ProbeResults() map[string]types.ProbeResult
	Object() client.Object
}

// PhaseResult is the outcome for one phase.
type PhaseResult interface {
	GetValidationError() error
	GetObjects() []ObjectResult
	IsComplete() bool
}

// RevisionResult is the outcome of reconciling a revision.
type RevisionResult interface {
	String() string
	GetValidationError() error
	GetPhases() []PhaseResult
	InTransition() bool
	IsComplete() bool
}

// RevisionTeardownResult is the outcome of tearing a revision down.
type RevisionTeardownResult interface {
	IsComplete() bool
}

// ObjectEngine, PhaseEngine, Comparator and RevisionEngine are the engines; only the last acts,
// and it refuses.
type (
	ObjectEngine   struct{}
	PhaseEngine    struct{}
	Comparator     struct{}
	RevisionEngine struct{}
)

// NewComparator makes a comparator.
func NewComparator(...any) *Comparator { return &Comparator{} }

// NewObjectEngine makes an object engine.
func NewObjectEngine(...any) *ObjectEngine { return &ObjectEngine{} }

// NewPhaseEngine makes a phase engine.
func NewPhaseEngine(...any) *PhaseEngine { return &PhaseEngine{} }

// NewRevisionEngine makes a revision engine.
func NewRevisionEngine(...any) *RevisionEngine { return &RevisionEngine{} }

// Reconcile refuses.
func (*RevisionEngine) Reconcile(context.Context, types.Revision, ...types.RevisionReconcileOption) (RevisionResult, error) {
	return nil, errNotBuilt
}

// Teardown refuses.
func (*RevisionEngine) Teardown(context.Context, types.Revision, ...types.RevisionTeardownOption) (RevisionTeardownResult, error) {
	return nil, errNotBuilt
}
