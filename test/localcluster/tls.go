package localcluster

import "crypto/tls"

// insecureTLS is for the readiness poll only, before the API server's self-signed certificate
// exists to be trusted; every client afterwards verifies it.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // loopback readiness poll
