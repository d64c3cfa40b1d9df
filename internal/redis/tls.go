package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// ErrTLS means the TLS handshake with the node failed: its certificate is not signed by the
// CA we trust or not valid for the name we check, it wants a client certificate we do not
// have, or it does not speak TLS. Like a refused password, the node is neither up nor down.
var ErrTLS = errors.New("TLS handshake failed")

// ServedCertificate is the certificate the node at addr serves now, from a handshake of its
// own (an open connection keeps the certificate it was made with). It does not verify it: the
// caller compares it with the one it expects.
func ServedCertificate(ctx context.Context, addr string, cfg *tls.Config, timeout time.Duration) (*x509.Certificate, error) {
	probe := cfg.Clone()
	probe.InsecureSkipVerify = true //nolint:gosec // read the certificate, whoever signed it; nothing is sent over this connection
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: probe}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrTLS, addr, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: %s served no certificate", ErrTLS, addr)
	}
	return certs[0], nil
}

// isTLSError is a failed handshake, as the crypto/tls and crypto/x509 packages say it.
func isTLSError(err error) bool {
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	// The peer's alerts (it wants a certificate, it refuses ours) are an unexported type: their
	// words say what they are.
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &unknown) ||
		errors.As(err, &hostname) || errors.As(err, &invalid) || strings.Contains(err.Error(), "remote error: tls: ")
}
