package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/org/redis-operator/internal/redis"
)

// Login is how the operator proves itself to one RedisCluster's nodes (its user, password and
// TLS configuration): the controllers name it here, with the credentials, and hand it to the
// dialers the composition root made.
type Login = redis.Login

// ClientTLS is the operator's TLS configuration for one RedisCluster's nodes: trust caPEM,
// check that each node's certificate is valid for serverName, and present certPEM and keyPEM
// when a node asks for a client certificate.
func ClientTLS(certPEM, keyPEM, caPEM []byte, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("ca.crt holds no PEM certificate")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt and tls.key: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      pool,
		ServerName:   serverName,
		Certificates: []tls.Certificate{pair},
	}, nil
}

// LeafCertificate is the first certificate of a PEM chain (tls.crt): the one a node serves.
func LeafCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("tls.crt holds no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Uncovered are the hosts (IP addresses or DNS names, as clients dial them) that cert is not
// valid for, in their order: a client that verifies the host it dials refuses the certificate
// there. An IP needs an IP SAN; a name a DNS SAN (wildcards as x509 matches them).
func Uncovered(cert *x509.Certificate, hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			out = append(out, h)
		}
	}
	return out
}
