package credentials

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// The TLS Secret's lifecycle: read with the password (phase Secrets, at each resync), mounted
// into the pods (the kubelet keeps the files in step), and loaded by each running node when its
// content changes (phase TLS): Redis does not watch its files, so the operator tells each node
// to read them again, then checks over a handshake of its own that the node serves the Secret's
// certificate. A node whose files are not yet the new ones is asked again tlsRetry later.
//
// The handshake proves a load only when the certificate changed. A Secret whose tls.crt stayed
// (a CA added to ca.crt, or removed: the first and last steps of a CA rotation) looks the same
// before and after, so a node asked before the kubelet wrote its files would be counted as
// loaded and keep the old ca.crt. Such a node is asked again until tlsFilesWindow after the
// Secret last changed, by when the kubelet has written them.

// tlsCredentials is a RedisCluster's TLS Secret as the operator uses it.
type tlsCredentials struct {
	// config is the operator's client configuration: trust ca.crt, check the primary
	// Service's name, present tls.crt.
	config *tls.Config
	// leaf is the certificate every node must serve: tls.crt's first.
	leaf []byte
	// sum names the Secret's content: each node loads each content once.
	sum string
	// filesBy is when every pod's files hold this content: tlsFilesWindow after the Secret
	// last changed.
	filesBy time.Time
	// previous is the configuration before the last change, for a node that still serves a
	// certificate only the old CA signed. In memory only: rotate a CA in two steps (old and new
	// CA in ca.crt first), and no node needs it.
	previous *tls.Config
}

// tlsRetry is how soon a node that still served its old certificate after a reload is asked
// again: the kubelet writes a changed Secret into the pods within its sync period (a minute or
// so).
const tlsRetry = 2 * time.Second

// tlsFilesWindow is how long after a Secret changes the kubelet may still be writing it into the
// pods: its sync period (a minute by default, with up to half again of jitter) and the Secret's
// propagation to it.
const tlsFilesWindow = 2 * time.Minute

// tlsHandshakeTimeout bounds the handshake that reads the certificate a node serves.
const tlsHandshakeTimeout = 2 * time.Second

// readTLS reads spec.tls's Secret: nil when TLS is off. An unchanged Secret keeps last, so that
// the held connections, made with its configuration, stay.
func readTLS(ctx context.Context, c *scope.Cluster, last *tlsCredentials) (*tlsCredentials, error) {
	rc := c.RC
	if rc.Spec.TLS == nil {
		return nil, nil
	}
	name := rc.Spec.TLS.SecretName
	secret := &corev1.Secret{}
	if err := c.APIReader.Get(ctx, c.NameOf(name), secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, outcome.Fail(cachev1.ReasonTLSSecretInvalid, fmt.Errorf("TLS Secret %s not found", name))
		}
		return nil, fmt.Errorf("reading TLS Secret %s: %w", name, err)
	}
	sum := sha256.New()
	for _, key := range []string{resources.TLSCertKey, resources.TLSKeyKey, resources.TLSCAKey} {
		if len(secret.Data[key]) == 0 {
			return nil, outcome.Fail(cachev1.ReasonTLSSecretInvalid, fmt.Errorf("TLS Secret %s has no %s", name, key))
		}
		sum.Write(secret.Data[key])
	}
	content := hex.EncodeToString(sum.Sum(nil))
	if last != nil && last.sum == content {
		return last, nil
	}
	cfg, err := auth.ClientTLS(secret.Data[resources.TLSCertKey], secret.Data[resources.TLSKeyKey], secret.Data[resources.TLSCAKey], resources.ClientServiceHost(rc))
	if err != nil {
		return nil, outcome.Fail(cachev1.ReasonTLSSecretInvalid, fmt.Errorf("TLS Secret %s: %w", name, err))
	}
	leaf, err := auth.LeafCertificate(secret.Data[resources.TLSCertKey])
	if err != nil {
		return nil, outcome.Fail(cachev1.ReasonTLSSecretInvalid, fmt.Errorf("TLS Secret %s: %w", name, err))
	}
	out := &tlsCredentials{config: cfg, leaf: leaf.Raw, sum: content, filesBy: lastWritten(secret).Add(tlsFilesWindow)}
	if last != nil {
		out.previous = last.config
	}
	return out, nil
}

// TLS has each running node, of every shard in cluster mode, load the TLS Secret's content
// once, and reports the nodes the operator cannot complete a handshake with (TLSFailed): like a
// refused password, nothing is decided on a view that misses them.
func TLS(ctx context.Context, c *scope.Cluster, m *Memory, s *State) error {
	t := s.tls
	if t == nil {
		return nil
	}
	rc := c.RC
	now := time.Now()
	reached := false
	_, err := auth.Give(ctx, c.Nodes().Nodes, auth.Gift{Sum: t.sum, Given: &m.tls.loaded, EachNode: true,
		// A node whose certificate the operator's configuration refuses is reached to load the
		// Secret's, with a configuration that checks no name (reloadConfig).
		Reach: func(o topology.Observed) bool {
			return (o.Reachable() || o.TLSRefused()) && m.tls.due(o.Name, now)
		},
		DialNode: func(o topology.Observed) topology.Node {
			login := s.Login()
			if o.TLSRefused() {
				login.TLS = t.reloadConfig()
			}
			return c.DialAs(login)(o.Addr)
		},
		Send: func(ctx context.Context, o topology.Observed, n topology.Node) (bool, error) {
			m.tls.tried(o.Name, now)
			loaded, changed, err := auth.LoadCertificate(ctx, n, o.Addr, t.config, t.leaf, tlsHandshakeTimeout)
			if err != nil {
				return false, fmt.Errorf("%s: %w", o.Name, err)
			}
			if changed {
				// The pod is the Event's related object: Events of one reason and object are
				// otherwise one series, and each node's reload is its own.
				c.Recorder.Eventf(rc, c.PodNamed(o.Name), corev1.EventTypeNormal, cachev1.EventCertificateReloaded, "Reload",
					"%s now serves the certificate from Secret %s", o.Name, rc.Spec.TLS.SecretName)
			}
			reached = reached || (loaded && o.TLSRefused())
			if loaded && !changed && now.Before(t.filesBy) {
				return false, nil // the same certificate proves nothing of ca.crt: asked again
			}
			return loaded, nil
		}})
	errs := []error{err}
	if reached {
		if err := c.Observe(ctx); err != nil {
			return err
		}
	}
	for _, o := range c.Nodes().TLSRefused() {
		errs = append(errs, fmt.Errorf("the TLS handshake with %s failed (TLS Secret %s): %w", o.Name, rc.Spec.TLS.SecretName, o.Err))
	}
	return errors.Join(errs...)
}

// lastWritten is when the Secret was last written, as the API server recorded it (its newest
// managedFields entry), or now when it recorded nothing.
func lastWritten(secret *corev1.Secret) time.Time {
	var last time.Time
	for _, f := range secret.ManagedFields {
		if f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	if last.IsZero() {
		return time.Now()
	}
	return last
}

// Certificate is tls.crt's first certificate, the one every node serves, as this reconcile read
// the TLS Secret; nil without spec.tls, or when the Secret could not be read.
func (s *State) Certificate() *x509.Certificate {
	if s.tls == nil {
		return nil
	}
	cert, err := x509.ParseCertificate(s.tls.leaf)
	if err != nil {
		return nil // parsed once already, by readTLS
	}
	return cert
}

// reloadConfig reaches a node whose certificate the operator's configuration refuses, to have
// it load the Secret's: its chain must still lead to the current or the previous ca.crt, but
// the name is not checked (a certificate issued for the wrong name is what it is replacing).
func (t *tlsCredentials) reloadConfig() *tls.Config {
	cfg := t.config.Clone()
	pools := []*x509.CertPool{t.config.RootCAs}
	if t.previous != nil {
		pools = append(pools, t.previous.RootCAs)
	}
	cfg.InsecureSkipVerify = true //nolint:gosec // verified below, without the name
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		certs := make([]*x509.Certificate, 0, len(raw))
		for _, der := range raw {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return err
			}
			certs = append(certs, c)
		}
		if len(certs) == 0 {
			return errors.New("no certificate")
		}
		intermediates := x509.NewCertPool()
		for _, c := range certs[1:] {
			intermediates.AddCert(c)
		}
		var err error
		for _, roots := range pools {
			if _, err = certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates}); err == nil {
				return nil
			}
		}
		return err
	}
	return cfg
}

// tlsMemory is, by node, the Secret content each node was seen serving after a reload
// (loaded), and when it was last asked to load (tried).
type tlsMemory struct {
	loaded auth.Given
	mu     sync.Mutex
	asked  map[string]time.Time
}

// due is true when the node was not asked to load lately.
func (m *tlsMemory) due(node string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return now.Sub(m.asked[node]) >= tlsRetry
}

func (m *tlsMemory) tried(node string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.asked == nil {
		m.asked = map[string]time.Time{}
	}
	m.asked[node] = now
}
