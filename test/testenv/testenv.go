// Package testenv starts the real control plane the tests run against: kube-apiserver and etcd
// built by `make envtest` into bin/k8s, with the CRDs from config/crd. It also holds the helpers
// that build test objects, so every test builds them one way.
package testenv

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot finds the repository root (the directory holding go.mod) above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "PROJECT")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no repository root (go.mod and PROJECT) above the working directory")
		}
		dir = parent
	}
}

// BinaryDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS, or bin/k8s.
func BinaryDir(root string) string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(root, "bin", "k8s")
}

// Env is a running control plane: envtest's Environment, whose Stop also removes the directory
// Start gave its processes.
type Env struct {
	*envtest.Environment
	dir string
}

// Stop ends kube-apiserver and etcd and removes their directory.
func (e *Env) Stop() error {
	return errors.Join(e.Environment.Stop(), os.RemoveAll(e.dir))
}

// Start runs kube-apiserver and etcd with the RedisCluster CRD installed.
func Start() (*Env, *rest.Config, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	binDir := BinaryDir(root)
	if _, err := os.Stat(filepath.Join(binDir, "kube-apiserver")); err != nil {
		return nil, nil, fmt.Errorf("kube-apiserver is not in %s; run `make envtest`: %w", binDir, err)
	}
	env := &Env{Environment: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: binDir,
		// envtest's 20 s is too short on a loaded machine: in a CI run with the machine's run
		// queue at 40 (2026-12-06), kube-apiserver did not answer within 20 s five times over.
		ControlPlaneStartTimeout: time.Minute,
	}}
	orphanless(env.Environment, root, binDir)
	// The processes' files in one directory of ours: envtest makes a new one for the API server's
	// certificates at each of its five tries to start, and removes only the last (a loaded CI run
	// left eight).
	if env.dir, err = os.MkdirTemp("", "testenv-"); err != nil {
		return nil, nil, err
	}
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	env.ControlPlane.Etcd.DataDir = filepath.Join(env.dir, "etcd")
	env.ControlPlane.GetAPIServer().CertDir = filepath.Join(env.dir, "apiserver")
	for _, d := range []string{env.ControlPlane.Etcd.DataDir, env.ControlPlane.GetAPIServer().CertDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			_ = os.RemoveAll(env.dir)
			return nil, nil, err
		}
	}
	// envtest's default service range (/24) holds 254 ClusterIPs: too few for the benchmark's clusters.
	// No traffic is ever sent to a ClusterIP here; nothing routes them.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after the processes run (installing the CRDs): end them.
		_ = env.Stop()
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	return env, cfg, nil
}

// orphanless has env run kube-apiserver and etcd through test/testenv/orphanless, which asks the
// kernel to kill each when the test process dies: a test that panics never runs env.Stop. The
// script finds the binaries in $KUBEBUILDER_ASSETS, set to binDir here (the variable envtest
// itself reads, with the same meaning). Without setpriv (util-linux) they run as before. The
// kernel signals when the thread that started the process ends, not the process: Go ends a thread
// only when a goroutine locked to it exits, which the harness does only when leaving a network
// namespace fails (test/node.InNamespace), as for the Pdeathsig of its other children.
func orphanless(env *envtest.Environment, root, binDir string) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		return
	}
	if os.Getenv("KUBEBUILDER_ASSETS") != binDir {
		_ = os.Setenv("KUBEBUILDER_ASSETS", binDir)
	}
	wrappers := filepath.Join(root, "test", "testenv", "orphanless")
	env.ControlPlane.GetAPIServer().Path = filepath.Join(wrappers, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(wrappers, "etcd")}
}

// StartFor runs kube-apiserver and etcd for one test or benchmark (Start), and stops them when
// it ends.
func StartFor(tb testing.TB) (*Env, *rest.Config) {
	tb.Helper()
	env, cfg, err := Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	return env, cfg
}

// RequestCounter counts the requests a client sends, by whether they write, and by verb and
// resource (for the benchmarks' profiles).
type RequestCounter struct {
	writes atomic.Int64
	total  atomic.Int64
	mu     sync.Mutex
	byKind map[string]int64
}

// ByKind is the number of requests sent so far per "METHOD resource" (the path's resource
// segment, with "/status" for subresources), for example "PATCH statefulsets".
func (c *RequestCounter) ByKind() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byKind)
}

// Writes is the number of POST, PUT, PATCH and DELETE requests sent so far, but for reviews
// (the operator's start-up SelfSubjectAccessReview): a POST that stores nothing.
func (c *RequestCounter) Writes() int64 { return c.writes.Load() }

// Total is the number of requests sent so far.
func (c *RequestCounter) Total() int64 { return c.total.Load() }

// Wrap returns a copy of cfg whose requests this counter counts.
func (c *RequestCounter) Wrap(cfg *rest.Config) *rest.Config {
	counted := rest.CopyConfig(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			c.total.Add(1)
			c.mu.Lock()
			if c.byKind == nil {
				c.byKind = map[string]int64{}
			}
			c.byKind[req.Method+" "+resourceOf(req.URL.Path)]++
			c.mu.Unlock()
			switch req.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				if !strings.HasSuffix(req.URL.Path, "reviews") {
					c.writes.Add(1)
				}
			}
			return rt.RoundTrip(req)
		})
	})
	return counted
}

// resourceOf is the resource a request path names: /api/v1/namespaces/ns/secrets/name ->
// "secrets"; /apis/g/v/namespaces/ns/redisclusters/name/status -> "redisclusters/status".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return path
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// WriteKubeconfig writes cfg as a kubeconfig at path, for a process (the operator binary) that
// reaches the same API server as the test.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}
