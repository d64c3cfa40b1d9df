// Package localcluster runs a local Kubernetes cluster on this machine: a real control plane
// (etcd, kube-apiserver, kube-controller-manager with the StatefulSet controller, the garbage
// collector, EndpointSlices and the volume binder, kube-scheduler; built by `make localcluster`)
// and a real node (test/node: kubelet, containerd, runc, the CNI bridge, kube-proxy), all in a
// network namespace of their own, with a registry of images built here; the machine reaches the
// API server on a loopback port forwarded into it. On it run the operator as the CSV's
// Deployment (StartOnRealNode) or OLM (StartWithOLM).
package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/org/redis-operator/test/node"
)

// Options configure a local cluster.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
	BinDir string
	// Dir holds the cluster's state, certificates and logs; removed by Stop.
	Dir string
	// Logs, when set, receives the components' output; otherwise it goes to files in Dir.
	Logs *os.File
	// Netns, when set, is the control plane's namespace on the real nodes' network (test/node):
	// the control plane runs in it, the API server on node.ControlPlaneIP where pods reach it
	// through the kubernetes Service,
	// and the machine reaches it at Server(), a port on its loopback forwarded there.
	Netns *node.Netns
}

// ControlPlane is etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
type ControlPlane struct {
	opts Options

	// AdminKubeconfig is the path of a kubeconfig with cluster-admin rights.
	AdminKubeconfig string
	// AdminConfig is the same, for Go clients.
	AdminConfig *rest.Config
	// NodeKubeconfig is a kubeconfig with the same rights for what runs inside the namespaces
	// namespace (the controllers, the scheduler, the kubelet, kube-proxy): the API server at the
	// control plane's address. Without a namespace it is AdminKubeconfig.
	NodeKubeconfig string
	forward        net.Listener

	apiserverPort int
	apiserverArgs []string
	mu            sync.Mutex
	procs         map[string]*node.Process
}

const adminToken = "local-admin-token"

// StartControlPlane starts etcd, then kube-apiserver, then the controller manager and scheduler.
func StartControlPlane(ctx context.Context, opts Options) (*ControlPlane, error) {
	cp := &ControlPlane{opts: opts, procs: map[string]*node.Process{}}
	for _, d := range []string{"etcd", "pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.startControllersAndScheduler(); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// Dir is the directory holding the cluster's state, certificates and logs.
func (cp *ControlPlane) Dir() string { return cp.opts.Dir }

func (cp *ControlPlane) path(parts ...string) string {
	return filepath.Join(append([]string{cp.opts.Dir}, parts...)...)
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	client, peer := freePort(), freePort()
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	err := cp.run("etcd", filepath.Join(cp.opts.BinDir, "etcd"),
		"--data-dir", cp.path("etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync", "--quota-backend-bytes", "2147483648")
	if err != nil {
		return err
	}
	cp.apiserverArgs = append(cp.apiserverArgs, "--etcd-servers="+clientURL)
	return waitHTTP(ctx, clientURL+"/health", cp.etcdTransport(), 30*time.Second)
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	saKey, err := writeServiceAccountKey(cp.path("pki"))
	if err != nil {
		return err
	}
	tokens := cp.path("pki", "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	cp.apiserverPort = freePort()
	if cp.opts.Netns != nil {
		cp.apiserverArgs = append(cp.apiserverArgs,
			// Every address of the namespace: its loopback too, so that the certificate it makes
			// itself names localhost, which the machine's clients ask for through the forward.
			"--bind-address=0.0.0.0", "--advertise-address="+node.ControlPlaneIP,
			"--secure-port="+strconv.Itoa(apiserverNodePort),
			"--service-cluster-ip-range="+node.ServiceCIDR,
			"--kubelet-preferred-address-types=InternalIP",
		)
		if err := cp.forwardAPIServer(); err != nil {
			return err
		}
	} else {
		cp.apiserverArgs = append(cp.apiserverArgs,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(cp.apiserverPort),
			// ClusterIPs are allocated but never routed here: clients reach Services through their EndpointSlices.
			"--service-cluster-ip-range=10.0.0.0/16",
			// The kubernetes Service cannot point at a loopback address.
			"--endpoint-reconciler-type=none",
			// The node's name does not resolve: reach its kubelet endpoint (container logs) by IP.
			"--kubelet-preferred-address-types=InternalIP",
		)
	}
	cp.apiserverArgs = append(cp.apiserverArgs,
		"--cert-dir="+cp.path("pki"),
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--allow-privileged=false",
	)
	if err := cp.runAPIServer(ctx); err != nil {
		return err
	}
	cp.AdminKubeconfig, cp.NodeKubeconfig = cp.path("admin.kubeconfig"), cp.path("admin.kubeconfig")
	serverName := ""
	if cp.opts.Netns != nil {
		serverName = "localhost" // the forward's address is not in the certificate
		cp.NodeKubeconfig = cp.path("node.kubeconfig")
		if err := cp.writeKubeconfig(cp.NodeKubeconfig, fmt.Sprintf("https://%s:%d", node.ControlPlaneIP, apiserverNodePort), ""); err != nil {
			return err
		}
	}
	if err := cp.writeKubeconfig(cp.AdminKubeconfig, cp.Server(), serverName); err != nil {
		return err
	}
	cp.AdminConfig, err = clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	return err
}

// apiserverNodePort is the API server's port at the control plane's address.
const apiserverNodePort = 6443

func (cp *ControlPlane) writeKubeconfig(path, server, serverName string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["local"] = &clientcmdapi.Cluster{
		Server:               server,
		CertificateAuthority: cp.path("pki", "apiserver.crt"),
		TLSServerName:        serverName,
	}
	kubeconfig.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	kubeconfig.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin"}
	kubeconfig.CurrentContext = "local"
	return clientcmd.WriteToFile(*kubeconfig, path)
}

// forwardAPIServer makes the API server in the control plane's namespace answer at Server(), on the
// machine's loopback, for the harness, kubectl and the tests.
func (cp *ControlPlane) forwardAPIServer() error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cp.apiserverPort))
	if err != nil {
		return err
	}
	cp.forward = l
	target := net.JoinHostPort(node.ControlPlaneIP, strconv.Itoa(apiserverNodePort))
	go node.Forward(l, func() (net.Conn, error) { return cp.opts.Netns.Dial(context.Background(), "tcp", target) })
	return nil
}

// etcdTransport reaches etcd's loopback address: the control plane's namespace's, when there is one.
func (cp *ControlPlane) etcdTransport() *http.Transport {
	t := &http.Transport{}
	if cp.opts.Netns != nil {
		t.DialContext = cp.opts.Netns.Dial
	}
	return t
}

func (cp *ControlPlane) runAPIServer(ctx context.Context) error {
	if err := cp.run("kube-apiserver", filepath.Join(cp.opts.BinDir, "kube-apiserver"), cp.apiserverArgs...); err != nil {
		return err
	}
	return waitHTTP(ctx, cp.Server()+"/readyz", &http.Transport{TLSClientConfig: insecureTLS()}, 60*time.Second) // through the forward
}

// Server is the API server's URL.
func (cp *ControlPlane) Server() string { return "https://127.0.0.1:" + strconv.Itoa(cp.apiserverPort) }

// RestartAPIServer stops kube-apiserver and starts it again on the same port, certificates and etcd.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.stopProcess("kube-apiserver")
	return cp.runAPIServer(ctx)
}

// PauseEtcd freezes etcd (SIGSTOP): the API server can neither read nor write until ResumeEtcd.
func (cp *ControlPlane) PauseEtcd() error { return cp.signal("etcd", syscall.SIGSTOP) }

// ResumeEtcd lets a paused etcd run again.
func (cp *ControlPlane) ResumeEtcd() error { return cp.signal("etcd", syscall.SIGCONT) }

func (cp *ControlPlane) signal(name string, sig syscall.Signal) error {
	cp.mu.Lock()
	p := cp.procs[name]
	cp.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s is not running", name)
	}
	return p.Cmd.Process.Signal(sig)
}

func (cp *ControlPlane) startControllersAndScheduler() error {
	saKey := cp.path("pki", "sa.key")
	err := cp.run("kube-controller-manager", filepath.Join(cp.opts.BinDir, "kube-controller-manager"),
		"--kubeconfig="+cp.NodeKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--service-account-private-key-file="+saKey,
		"--root-ca-file="+cp.path("pki", "apiserver.crt"),
		"--use-service-account-credentials=false",
		"--controllers=*",
		"--concurrent-statefulset-syncs=5",
		// A node whose kubelet stops renewing its lease (every 5s here: node.LeaseDuration)
		// is NotReady 20s later, not 50s: the tests lose nodes many times.
		"--node-monitor-grace-period=20s",
	)
	if err != nil {
		return err
	}
	return cp.run("kube-scheduler", filepath.Join(cp.opts.BinDir, "kube-scheduler"),
		"--kubeconfig="+cp.NodeKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
	)
}

func (cp *ControlPlane) run(name, bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	if cp.opts.Netns != nil {
		cmd = cp.opts.Netns.Command(context.Background(), bin, args...)
	}
	out := cp.opts.Logs
	if out == nil {
		f, err := os.OpenFile(cp.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	p, err := node.StartProcess(cmd)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.procs[name] = p
	cp.mu.Unlock()
	return nil
}

func (cp *ControlPlane) stopProcess(name string) {
	cp.mu.Lock()
	p := cp.procs[name]
	delete(cp.procs, name)
	cp.mu.Unlock()
	if p == nil {
		return
	}
	p.Stop(10 * time.Second)
}

// Stop ends every process, the API server's clients first.
func (cp *ControlPlane) Stop() {
	for _, name := range []string{provisionerProcess, "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		cp.stopProcess(name)
	}
	if cp.forward != nil {
		_ = cp.forward.Close()
	}
}

// LogPath is where a component's output goes.
func (cp *ControlPlane) LogPath(name string) string { return cp.path("logs", name+".log") }

func writeServiceAccountKey(dir string) (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sa.key")
	raw := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return path, os.WriteFile(path, raw, 0o600)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitHTTP(ctx context.Context, url string, transport http.RoundTripper, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: transport}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New(url + " did not answer 200 in " + timeout.String())
}
