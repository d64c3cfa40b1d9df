package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/internal/operator"
)

// OperatorNamespace is where the operator runs, as OLM would install it.
const OperatorNamespace = "redis-operator-system"

// Cluster is a local cluster with the node agent, the CRD and the operator.
type Cluster struct {
	*ControlPlane
	Root   string // the repository
	Client client.Client
	Agent  *Agent

	// ServiceAccount is the operator's identity; it holds only what the bundle's CSV grants.
	ServiceAccount string

	agentCancel context.CancelFunc
	agentDone   chan struct{}

	mu       sync.Mutex
	operator *process
}

// Start brings up the control plane and the node, installs the CRD, and grants the operator's
// ServiceAccount the permissions of bundle/'s CSV. It does not start the operator.
func Start(ctx context.Context, root, dir string) (*Cluster, error) {
	cp, err := StartControlPlane(ctx, Options{BinDir: filepath.Join(root, "bin", "k8s"), Dir: dir})
	if err != nil {
		return nil, err
	}
	c := &Cluster{ControlPlane: cp, Root: root, ServiceAccount: "redis-operator-controller-manager"}
	if c.Client, err = client.New(cp.AdminConfig, client.Options{Scheme: operator.NewScheme()}); err != nil {
		cp.Stop()
		return nil, err
	}
	agentCtx, cancel := context.WithCancel(context.Background())
	c.agentCancel, c.agentDone = cancel, make(chan struct{})
	c.Agent = &Agent{Client: c.Client, Dir: filepath.Join(dir, "node")}
	go func() { defer close(c.agentDone); _ = c.Agent.Run(agentCtx) }()
	if err := c.Kubectl("apply", "--server-side", "-f", filepath.Join(root, "bundle", "manifests", "cache.example.com_redisclusters.yaml")); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.grantOperatorPermissions(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Kubectl runs kubectl against the cluster, as a user would.
func (c *Cluster) Kubectl(args ...string) error {
	out, err := c.KubectlOutput(args...)
	if err != nil {
		return fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return nil
}

// KubectlOutput runs kubectl (bin/k8s/kubectl, the cluster's own version) and returns what it printed.
func (c *Cluster) KubectlOutput(args ...string) (string, error) {
	cmd := exec.Command(c.KubectlPath(), append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// KubectlPath is the kubectl built with the cluster (make envtest).
func (c *Cluster) KubectlPath() string { return filepath.Join(c.Root, "bin", "k8s", "kubectl") }

// grantOperatorPermissions creates the operator's namespace and ServiceAccount, and the roles the
// CSV's install strategy declares: clusterPermissions cluster-wide, permissions in the namespace.
func (c *Cluster) grantOperatorPermissions(ctx context.Context) error {
	b, err := apimanifests.GetBundleFromDir(filepath.Join(c.Root, "bundle", "manifests"))
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: c.ServiceAccount, Namespace: OperatorNamespace}},
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: c.ServiceAccount, Namespace: OperatorNamespace}}
	strategy := b.CSV.Spec.InstallStrategy.StrategySpec
	for i, p := range strategy.ClusterPermissions {
		name := fmt.Sprintf("redis-operator-csv-%d", i)
		objs = append(objs,
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: p.Rules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})
	}
	for i, p := range strategy.Permissions {
		name := fmt.Sprintf("redis-operator-csv-%d", i)
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Rules: p.Rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// operatorKubeconfig is a kubeconfig with a token of the operator's ServiceAccount.
func (c *Cluster) operatorKubeconfig(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(OperatorNamespace).CreateToken(ctx, c.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s: %w", c.ServiceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Server(), CertificateAuthority: c.path("pki", "apiserver.crt")}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator"}
	cfg.CurrentContext = "local"
	path := c.path("operator.kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// StartOperator runs the operator binary (bin/manager) as its ServiceAccount, watching every
// namespace, with leader election in its namespace.
func (c *Cluster) StartOperator(ctx context.Context) error {
	kubeconfig, err := c.operatorKubeconfig(ctx)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.Root, "bin", "manager"),
		"--leader-elect", "--leader-election-namespace", OperatorNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "WATCH_NAMESPACE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log, err := os.OpenFile(c.LogPath("operator"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the operator (make build first): %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.operator = p
	c.mu.Unlock()
	return nil
}

// KillOperator ends the operator at once (SIGKILL), as a crash would.
func (c *Cluster) KillOperator() {
	c.mu.Lock()
	p := c.operator
	c.operator = nil
	c.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Stop ends the operator, the node's processes and the control plane.
func (c *Cluster) Stop() {
	c.KillOperator()
	if c.agentCancel != nil {
		c.agentCancel()
		select {
		case <-c.agentDone:
		case <-time.After(30 * time.Second):
		}
	}
	c.ControlPlane.Stop()
}
