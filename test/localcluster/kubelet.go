package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The agent serves the one kubelet endpoint users reach through the API server: container logs
// (`kubectl logs`). The API server dials the node's InternalIP at its kubelet port; without
// --kubelet-certificate-authority it does not verify the serving certificate, so a self-signed
// one does.

// serveKubelet starts the log endpoint on 127.0.0.1 and returns its port.
func (a *Agent) serveKubelet(ctx context.Context) (int, error) {
	cert, err := selfSignedCert()
	if err != nil {
		return 0, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.containerLogs)
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// containerLogs writes the container's log, or its last tailLines lines.
func (a *Agent) containerLogs(w http.ResponseWriter, r *http.Request) {
	path := a.logPath(r.PathValue("namespace"), r.PathValue("pod"))
	if path == "" {
		http.Error(w, "pod "+r.PathValue("pod")+" does not run on this node", http.StatusNotFound)
		return
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		raw, err = nil, nil
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil && n >= 0 {
		lines := strings.SplitAfter(string(raw), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		raw = []byte(strings.Join(lines[max(0, len(lines)-n):], ""))
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(raw)
}

func (a *Agent) logPath(namespace, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if p.namespace == namespace && p.name == name {
			return p.LogPath()
		}
	}
	return ""
}

func selfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: NodeName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{NodeName},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
