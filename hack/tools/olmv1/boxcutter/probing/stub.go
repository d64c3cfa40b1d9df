// Package probing stands in for boxcutter's probing (see the boxcutter package): its probes
// answer Unknown.
package probing

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"pkg.package-operator.run/boxcutter/machinery/types"
)

// Prober answers whether an object passes.
type Prober = types.Prober

var unknown = types.ProbeResult{Status: types.ProbeStatusUnknown}

// And passes when every one of its probes does.
type And []Prober

// Probe answers Unknown.
func (And) Probe(client.Object) types.ProbeResult { return unknown }

// ConditionProbe checks a condition's status.
type ConditionProbe struct{ Type, Status string }

// Probe answers Unknown.
func (*ConditionProbe) Probe(client.Object) types.ProbeResult { return unknown }

// FieldsEqualProbe checks that two fields are equal.
type FieldsEqualProbe struct{ FieldA, FieldB string }

// Probe answers Unknown.
func (*FieldsEqualProbe) Probe(client.Object) types.ProbeResult { return unknown }

// FieldValueProbe checks a field's value.
type FieldValueProbe struct{ FieldPath, Value string }

// Probe answers Unknown.
func (*FieldValueProbe) Probe(client.Object) types.ProbeResult { return unknown }

// GroupKindSelector probes objects of one kind.
type GroupKindSelector struct {
	schema.GroupKind
	Prober
}

// LabelSelector probes objects with matching labels.
type LabelSelector struct {
	labels.Selector
	Prober
}

// ObservedGenerationProbe probes objects whose status is current.
type ObservedGenerationProbe struct{ Prober }
