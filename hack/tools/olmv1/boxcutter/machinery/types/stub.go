// Package types stands in for boxcutter's machinery/types (see the boxcutter package).
package types

import "sigs.k8s.io/controller-runtime/pkg/client"

// Revision is a revision of a set of objects.
type Revision interface {
	GetName() string
	GetRevisionNumber() int64
}

// Option is every option of this stand-in: options change nothing here.
type Option struct{}

// RevisionReconcileOption, RevisionTeardownOption and ObjectReconcileOption tune the engines.
type (
	RevisionReconcileOption = Option
	RevisionTeardownOption  = Option
	ObjectReconcileOption   = Option
)

// ProbeStatus is a probe's answer.
type ProbeStatus string

// The answers of a probe.
const (
	ProbeStatusTrue    ProbeStatus = "True"
	ProbeStatusFalse   ProbeStatus = "False"
	ProbeStatusUnknown ProbeStatus = "Unknown"
)

// ProbeResult is a probe's answer and why.
type ProbeResult struct {
	Status   ProbeStatus
	Messages []string
}

// Prober answers whether an object passes.
type Prober interface {
	Probe(obj client.Object) ProbeResult
}
