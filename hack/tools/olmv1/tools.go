//go:build tools

// Package tools pins OLM v1 for make olmv1: operator-controller v1.11.0, which holds catalogd
// too. boxcutter, which operator-controller imports, comes from ./boxcutter (see its doc.go).
package tools

import (
	_ "github.com/operator-framework/operator-controller/cmd/catalogd"
	_ "github.com/operator-framework/operator-controller/cmd/operator-controller"
)
