package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/org/redis-operator/controllers/operator"
)

// OperatorNamespace is where the operator runs, as OLM would install it.
const OperatorNamespace = "redis-operator-system"

// Cluster is a local cluster: the control plane, the real node, and the operator or OLM.
type Cluster struct {
	*ControlPlane
	Root   string // the repository
	Client client.Client
	// OLM runs when the cluster was started with it.
	OLM *OLM

	// ServiceAccount is the operator's identity; it holds only what the bundle's CSV grants.
	ServiceAccount string

	// real is the node's part; nil in a Cluster made from a kubeconfig alone (Attach, make
	// run-bundle, make scorecard-run), which reaches it only through the API server.
	real *realNode
	// attached: the cluster is not ours (Attach); Stop removes only what was installed in it.
	attached bool
	// grantedRoles are the ClusterRoles (and their bindings) grantOperatorPermissions made.
	grantedRoles []string
}

// installCRDs applies the bundle's CRDs and waits until they are served: the operator's
// informers need them before it starts.
func (c *Cluster) installCRDs() error {
	var crds []string
	for _, kind := range []string{"redisclusters", "redisbackups"} {
		crds = append(crds, filepath.Join(c.Root, "bundle", "manifests", "cache.example.com_"+kind+".yaml"))
	}
	return c.applyCRDs(crds...)
}

// applyCRDs applies the CRDs in paths (files or directories) and waits until each is Established.
func (c *Cluster) applyCRDs(paths ...string) error {
	var files []string
	for _, p := range paths {
		files = append(files, "-f", p)
	}
	if err := c.Kubectl(append([]string{"apply", "--server-side"}, files...)...); err != nil {
		return err
	}
	return c.Kubectl(append([]string{"wait", "--for", "condition=established", "--timeout=60s"}, files...)...)
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

// MustKubectl runs kubectl as KubectlOutput does and returns what it printed; it fails the test
// when kubectl fails, with the command and its output.
func (c *Cluster) MustKubectl(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := c.KubectlOutput(args...)
	if err != nil {
		tb.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
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
		c.grantedRoles = append(c.grantedRoles, name)
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

// OperatorImage is the image of the operator at a version, as the bundle's CSV names it.
func OperatorImage(version string) string { return "example.com/redis-operator:v" + version }

// scorecardTestImages are the test images the bundle's scorecard configuration names, each with
// the commands its tests run (their entrypoints' first word).
func scorecardTestImages(root string) (map[string][]string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		return nil, err
	}
	cfg := scapiv1alpha3.Configuration{}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	images := map[string][]string{}
	for _, stage := range cfg.Stages {
		for _, t := range stage.Tests {
			if len(t.Entrypoint) > 0 && !slices.Contains(images[t.Image], t.Entrypoint[0]) {
				images[t.Image] = append(images[t.Image], t.Entrypoint[0])
			}
		}
	}
	return images, nil
}

// KillOperator kills the operator's container (SIGKILL, from the machine, as a crash would):
// its pod stays, and the kubelet restarts it.
func (c *Cluster) KillOperator(ctx context.Context) error {
	_, id, _, err := c.operatorContainer(ctx)
	if err != nil {
		return err
	}
	return c.KillContainer(ctx, id)
}

// Stop ends OLM, the node (its pods deleted first) and the control plane.
func (c *Cluster) Stop() {
	if c.attached {
		c.detach()
		return
	}
	if c.OLM != nil {
		c.OLM.Stop()
	}
	if c.real != nil {
		c.stopRealNode()
	}
	c.ControlPlane.Stop()
	if c.real != nil {
		c.real.release()
	}
}
