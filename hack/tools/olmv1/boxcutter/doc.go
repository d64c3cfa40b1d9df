// Package boxcutter stands in for pkg.package-operator.run/boxcutter v0.14.0 so that
// operator-controller v1.11.0 builds here: the Go module proxy of this machine refuses that
// module's host, and operator-controller imports it unconditionally.
//
// operator-controller uses boxcutter in two places. Its BoxcutterRuntime (ClusterObjectSet
// revisions) is off in the standard feature set (--feature-gates=BoxcutterRuntime=false, as
// upstream's standard manifests run it): this stand-in gives it the types it compiles against,
// and an engine that refuses to run. The Helm-based applier the standard set uses asks
// boxcutter's managedcache.TrackingCache for watches on what it installed, to notice drift
// between reconciles: here those watches are never set up (Watch and Free do nothing, and the
// source never fires), so a change made by hand to an installed object is undone at the
// ClusterExtension's next reconcile instead of at once. Installing, upgrading and removing are
// unaffected.
package boxcutter

import (
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"pkg.package-operator.run/boxcutter/machinery/types"
	"pkg.package-operator.run/boxcutter/ownerhandling"
)

// ErrNotBuilt is what every engine of this stand-in answers.
var ErrNotBuilt = errors.New("boxcutter is not in this build of operator-controller (run it with --feature-gates=BoxcutterRuntime=false)")

// ProgressProbeType names the probe that says whether an object has rolled out.
const ProgressProbeType = "progress"

// Phase is a named group of objects.
type Phase interface {
	GetName() string
	GetObjects() []client.Object
}

type phase struct {
	name string
	objs []client.Object
}

func (p phase) GetName() string             { return p.name }
func (p phase) GetObjects() []client.Object { return p.objs }

// NewPhase groups objs under name.
func NewPhase(name string, objs []client.Object) Phase { return phase{name, objs} }

// RevisionBuilder is a revision: its phases, in order.
type RevisionBuilder interface {
	types.Revision
	GetPhases() []Phase
}

type revision struct {
	name   string
	number int64
	phases []Phase
}

func (r revision) GetName() string          { return r.name }
func (r revision) GetRevisionNumber() int64 { return r.number }
func (r revision) GetPhases() []Phase       { return r.phases }

// NewRevisionWithOwner makes a revision of phases owned by owner.
func NewRevisionWithOwner(name string, number int64, phases []Phase, _ client.Object, _ ownerhandling.OwnerStrategy) RevisionBuilder {
	return revision{name, number, phases}
}

// RevisionReconcileOption tunes a revision's reconcile.
type RevisionReconcileOption = types.RevisionReconcileOption

// WithSiblingOwners names the other revisions of the same owner.
func WithSiblingOwners([]client.Object) RevisionReconcileOption { return types.Option{} }

// WithProbe adds a probe of the given type.
func WithProbe(string, types.Prober) RevisionReconcileOption { return types.Option{} }

// WithAggregatePhaseReconcileErrors reports every phase's error.
func WithAggregatePhaseReconcileErrors() RevisionReconcileOption { return types.Option{} }

// WithObjectReconcileOptions applies opts to obj.
func WithObjectReconcileOptions(client.Object, ...types.ObjectReconcileOption) RevisionReconcileOption {
	return types.Option{}
}

// WithCollisionProtection says what to do with an object another owner controls.
func WithCollisionProtection[T ~string](T) types.ObjectReconcileOption { return types.Option{} }
