// A stand-in for pkg.package-operator.run/boxcutter v0.14.0, which the Go module proxy here does
// not serve (its host is not on the proxy's allowlist). See doc.go.
module pkg.package-operator.run/boxcutter

go 1.26.3

require (
	github.com/go-logr/logr v1.4.3
	k8s.io/apimachinery v0.36.2
	k8s.io/client-go v0.36.2
	sigs.k8s.io/controller-runtime v0.24.1
)
