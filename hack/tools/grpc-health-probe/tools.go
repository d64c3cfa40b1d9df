//go:build tools

// Package tools pins grpc-health-probe (Apache-2.0), which OLM's registry pods run as their
// readiness and liveness probes (grpc_health_probe -addr=:50051): the opm image built here
// carries it, as the opm images OLM expects do.
package tools

import _ "github.com/grpc-ecosystem/grpc-health-probe"
