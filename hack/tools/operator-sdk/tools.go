//go:build tools

// Package tools pins the operator-sdk CLI v1.42.3 and its scorecard-test image's binary for make
// operator-sdk. The CLI's dependency operator-framework/ansible-operator-plugins comes from
// ./ansible-operator-plugins, a stand-in (see its package doc): the module proxy here refuses it.
package tools

import (
	_ "github.com/operator-framework/operator-sdk/cmd/operator-sdk"
	_ "github.com/operator-framework/operator-sdk/images/scorecard-test"
)
