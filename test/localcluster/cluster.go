package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/internal/operator"
	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/redistest"
)

// OperatorNamespace is where the operator runs, as OLM would install it.
const OperatorNamespace = "redis-operator-system"

// Cluster is a local cluster with the node agent, the CRD and the operator.
type Cluster struct {
	*ControlPlane
	Root   string // the repository
	Client client.Client
	Agent  *Agent
	// OLM runs when the cluster was started with it.
	OLM *OLM

	// ServiceAccount is the operator's identity; it holds only what the bundle's CSV grants.
	ServiceAccount string
	// MetricsAddr is where the operator run as a process serves its metrics (HTTPS, to callers
	// allowed to get /metrics): its own loopback address, as a pod would have.
	MetricsAddr string

	agentCancel context.CancelFunc
	agentDone   chan struct{}

	mu       sync.Mutex
	operator *node.Process

	// real is the real node's part, when the cluster runs on one (StartOnRealNode).
	real *realNode
}

// Start brings up the control plane and the node, installs the CRDs, and grants the operator's
// ServiceAccount the permissions of bundle/'s CSV. It does not start the operator.
func Start(ctx context.Context, root, dir string) (*Cluster, error) {
	c, err := startNode(ctx, root, dir)
	if err != nil {
		return nil, err
	}
	if err := c.installCRDs(); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.grantOperatorPermissions(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// installCRDs applies the bundle's CRDs and waits until they are served: the operator's
// informers need them before it starts.
func (c *Cluster) installCRDs() error {
	var crds []string
	for _, kind := range []string{"redisclusters", "redisbackups"} {
		crds = append(crds, "-f", filepath.Join(c.Root, "bundle", "manifests", "cache.example.com_"+kind+".yaml"))
	}
	if err := c.Kubectl(append([]string{"apply", "--server-side"}, crds...)...); err != nil {
		return err
	}
	return c.Kubectl(append([]string{"wait", "--for", "condition=established", "--timeout=60s"}, crds...)...)
}

// StartWithOLM brings up the control plane, the node and OLM, with nothing of the operator
// installed: OLM installs it, from a catalog. The node runs the registry pods' opm image as
// bin/opm and the operator's image at each of versions as the manager built at that version.
func StartWithOLM(ctx context.Context, root, dir string, versions ...string) (*Cluster, error) {
	c, err := startNode(ctx, root, dir)
	if err != nil {
		return nil, err
	}
	c.Agent.AddBinary(OPMImage, filepath.Join(root, "bin", "opm"))
	if err := c.addScorecardImages(); err != nil {
		c.Stop()
		return nil, err
	}
	for _, v := range versions {
		if _, err := c.BuildOperatorImage(v); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if c.OLM, err = c.StartOLM(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func startNode(ctx context.Context, root, dir string) (*Cluster, error) {
	cp, err := StartControlPlane(ctx, Options{BinDir: filepath.Join(root, "bin", "k8s"), Dir: dir})
	if err != nil {
		return nil, err
	}
	c := &Cluster{ControlPlane: cp, Root: root, ServiceAccount: "redis-operator-controller-manager"}
	if c.Client, err = client.New(cp.AdminConfig, client.Options{Scheme: Scheme()}); err != nil {
		cp.Stop()
		return nil, err
	}
	agentCtx, cancel := context.WithCancel(context.Background())
	c.agentCancel, c.agentDone = cancel, make(chan struct{})
	c.Agent = &Agent{Client: c.Client, Dir: filepath.Join(dir, "node"), Credentials: c.podKubeconfig}
	go func() { defer close(c.agentDone); _ = c.Agent.Run(agentCtx) }()
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
// CSV's install strategy declares, granted as OLM grants them for an AllNamespaces install.
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
	// The operator watches every namespace: as OLM does for an AllNamespaces OperatorGroup,
	// both the CSV's clusterPermissions and its permissions are granted cluster-wide.
	strategy := b.CSV.Spec.InstallStrategy.StrategySpec
	for i, p := range append(strategy.ClusterPermissions, strategy.Permissions...) {
		name := fmt.Sprintf("redis-operator-csv-%d", i)
		objs = append(objs,
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: p.Rules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// Scheme is the operator's scheme and OLM's types.
func Scheme() *runtime.Scheme {
	scheme := operator.NewScheme()
	utilruntime.Must(operatorsv1.AddToScheme(scheme))
	utilruntime.Must(operatorsv1alpha1.AddToScheme(scheme))
	return scheme
}

// operatorKubeconfig is a kubeconfig with a token of the operator's ServiceAccount.
func (c *Cluster) operatorKubeconfig(ctx context.Context) (string, error) {
	return c.serviceAccountKubeconfig(ctx, OperatorNamespace, c.ServiceAccount, nil, c.path("operator.kubeconfig"))
}

// podKubeconfig is what the kubelet mounts into a pod whose ServiceAccount token is
// automounted, as a kubeconfig: a token bound to the pod, and the API server's CA.
func (c *Cluster) podKubeconfig(ctx context.Context, pod *corev1.Pod, dir string) (string, error) {
	if !ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		return "", nil
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return c.serviceAccountKubeconfig(ctx, pod.Namespace, sa, pod, filepath.Join(dir, "kubeconfig"))
}

func (c *Cluster) serviceAccountKubeconfig(ctx context.Context, namespace, sa string, pod *corev1.Pod, path string) (string, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return "", err
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Server(), CertificateAuthority: c.path("pki", "apiserver.crt")}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	// The context names the ServiceAccount's namespace, as the token's mount does in a pod.
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa", Namespace: namespace}
	cfg.CurrentContext = "local"
	return path, clientcmd.WriteToFile(*cfg, path)
}

// addScorecardImages has the node run our scorecard binary for every test image of the
// bundle's scorecard configuration (the built-in scorecard-test image cannot be built here:
// scorecard/checks implements its checks), and tar for the bundle's untar init container.
func (c *Cluster) addScorecardImages() error {
	bin := filepath.Join(c.Root, "bin", "redis-operator-scorecard")
	if err := c.goBuild(bin, "./scorecard"); err != nil {
		return fmt.Errorf("building the scorecard tests: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(c.Root, "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		return err
	}
	cfg := scapiv1alpha3.Configuration{}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	for _, stage := range cfg.Stages {
		for _, t := range stage.Tests {
			c.Agent.AddBinary(t.Image, bin)
		}
	}
	tar, err := exec.LookPath("tar")
	if err != nil {
		return err
	}
	c.Agent.AddBinary(ScorecardUntarImage, tar)
	return nil
}

// goBuild builds a package of the repository into bin.
func (c *Cluster) goBuild(bin, pkg string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, pkg)...)
	cmd.Dir = c.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// OperatorImage is the image of the operator at a version, as the bundle's CSV names it.
func OperatorImage(version string) string { return "example.com/redis-operator:v" + version }

// BuildOperatorImage builds the manager binary that stands for the operator's image at version
// (it reports that version) and has the node run it for pods of that image. Every version is
// built from the code checked out: two releases differ here only in the version they report.
func (c *Cluster) BuildOperatorImage(version string) (string, error) {
	bin := filepath.Join(c.Root, "bin", "manager-v"+version)
	if err := c.goBuild(bin, "./cmd", "-ldflags", "-X main.version="+version); err != nil {
		return "", fmt.Errorf("building the manager at %s: %w", version, err)
	}
	image := OperatorImage(version)
	c.Agent.AddBinary(image, bin)
	return image, nil
}

// LocalOperatorImage is the image the operator started by StartOperator says it is: the node
// runs bin/manager for it (the restore init container of a restored RedisCluster).
const LocalOperatorImage = "example.com/redis-operator:local"

// StartOperator runs the operator binary (bin/manager) as its ServiceAccount, watching every
// namespace, with leader election in its namespace.
func (c *Cluster) StartOperator(ctx context.Context) error {
	kubeconfig, err := c.operatorKubeconfig(ctx)
	if err != nil {
		return err
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = net.JoinHostPort(redistest.AllocateIP(), "8443")
	}
	manager := filepath.Join(c.Root, "bin", "manager")
	c.Agent.AddBinary(LocalOperatorImage, manager)
	cmd := exec.Command(manager, "--operator-image", LocalOperatorImage,
		"--leader-elect", "--leader-election-namespace", OperatorNamespace,
		"--metrics-bind-address", c.MetricsAddr, "--health-probe-bind-address", "0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "WATCH_NAMESPACE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log, err := os.OpenFile(c.LogPath("operator"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	p, err := node.StartProcess(cmd)
	if err != nil {
		return fmt.Errorf("the operator (make build first): %w", err)
	}
	c.mu.Lock()
	c.operator = p
	c.mu.Unlock()
	return nil
}

// KillOperator ends the operator at once (SIGKILL), as a crash would: the process started by
// StartOperator, or on the real node its container, which the kubelet then restarts.
func (c *Cluster) KillOperator(ctx context.Context) error {
	if c.real != nil {
		return c.killOperatorContainer(ctx)
	}
	c.stopOperatorProcess()
	return nil
}

func (c *Cluster) stopOperatorProcess() {
	c.mu.Lock()
	p := c.operator
	c.operator = nil
	c.mu.Unlock()
	if p != nil {
		_ = p.Cmd.Process.Kill()
		<-p.Done()
	}
}

// Stop ends the operator, OLM, the node's processes and the control plane.
func (c *Cluster) Stop() {
	c.stopOperatorProcess()
	if c.OLM != nil {
		c.OLM.Stop()
	}
	if c.agentCancel != nil {
		c.agentCancel()
		select {
		case <-c.agentDone:
		case <-time.After(30 * time.Second):
		}
	}
	if c.real != nil {
		c.stopRealNode()
	}
	c.ControlPlane.Stop()
}
