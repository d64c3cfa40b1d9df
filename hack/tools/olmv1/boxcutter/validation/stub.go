// Package validation stands in for boxcutter's validation (see the boxcutter package).
package validation

// ClusterPhaseValidator and RevisionValidator validate before the engines act.
type (
	ClusterPhaseValidator struct{}
	RevisionValidator     struct{}
)

// NewClusterPhaseValidator makes a phase validator.
func NewClusterPhaseValidator(...any) *ClusterPhaseValidator { return &ClusterPhaseValidator{} }

// NewRevisionValidator makes a revision validator.
func NewRevisionValidator() *RevisionValidator { return &RevisionValidator{} }
