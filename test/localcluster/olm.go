package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/node"
)

// The namespaces OLM's own install creates: OLM runs in olm, which is also the global catalog
// namespace; operators holds the global OperatorGroup that installs in every namespace.
const (
	OLMNamespace       = "olm"
	OperatorsNamespace = "operators"
)

// OLM is Operator Lifecycle Manager running on the local cluster: its CRDs, and its olm and
// catalog operators (built from v0.38.0 by `make olm`) as supervised processes in the node's
// namespace, where they reach the registry pods by their Services' names (the cluster's DNS);
// the pods they make (registry pods, bundle unpack Jobs) run opm's and OLM's images built here.
type OLM struct {
	supervisor
}

// supervisor runs processes in the node's namespace, each started again whenever it exits (as
// a Deployment restarts its pod), until Stop. They resolve names through the cluster's DNS.
type supervisor struct {
	c    *Cluster
	env  []string
	stop chan struct{}
	wg   sync.WaitGroup
}

// StartOLM installs OLM as its own install does (CRDs, namespaces, OperatorGroups) and runs
// its two operators until Stop. Both serve health and metrics on :8080 of every address; in a
// cluster each has its pod's network, here they share the node's, so the second one's bind
// fails, which it logs and carries on from (its health endpoint is all that is lost).
func (c *Cluster) StartOLM(ctx context.Context) (*OLM, error) {
	binDir := filepath.Join(c.Root, "bin", "olm")
	for _, bin := range []string{"olm", "catalog"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			return nil, fmt.Errorf("OLM's %s is not built; run `make olm`: %w", bin, err)
		}
	}
	if err := c.applyCRDs(filepath.Join(binDir, "crds")); err != nil {
		return nil, err
	}
	if err := c.createOLMNamespaces(ctx); err != nil {
		return nil, err
	}
	// OLM reaches each catalog's registry pod by its Service's name, through the cluster's DNS.
	resolvConf, err := writeResolvConf(c.Dir(), OLMNamespace)
	if err != nil {
		return nil, err
	}
	o := &OLM{supervisor{c: c, stop: make(chan struct{}),
		env: append(os.Environ(), "KUBECONFIG="+c.NodeKubeconfig, "OPERATOR_NAMESPACE="+OLMNamespace)}}
	files := node.PodFiles{ResolvConf: resolvConf}
	o.supervise("olm", files, filepath.Join(binDir, "olm"), "--namespace", OLMNamespace, "--writeStatusName=", "--writePackageServerStatusName=")
	// The unpack Jobs of bundle images run OLM's image (cpb) and opm's, both built here; they run
	// as a user of their own (upstream's chart sets --set-workload-user-id=true off OpenShift), so
	// that they pass the restricted Pod Security Standard of a users' namespace.
	o.supervise("catalog", files, filepath.Join(binDir, "catalog"), "--namespace", OLMNamespace, "--kubeconfig", c.NodeKubeconfig, "--writeStatusName=",
		"--util-image", images.OLMImage, "--opmImage", OPMImage, "--set-workload-user-id=true")
	return o, nil
}

func (c *Cluster) createOLMNamespaces(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OLMNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorsNamespace}},
		// No target namespaces: operators installed here serve every namespace.
		&operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: "global-operators", Namespace: OperatorsNamespace}},
		&operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: "olm-operators", Namespace: OLMNamespace},
			Spec: operatorsv1.OperatorGroupSpec{TargetNamespaces: []string{OLMNamespace}}},
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// supervise runs a process and starts it again whenever it exits (OLM's operators exit to
// restart themselves, as a Deployment would restart their pod), until Stop.
func (o *supervisor) supervise(name string, files node.PodFiles, bin string, args ...string) {
	o.wg.Go(func() {
		for {
			log, err := os.OpenFile(o.c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return
			}
			cmd := o.c.real.netns.CommandWith(context.Background(), files, bin, args...)
			cmd.Env = o.env
			cmd.Stdout, cmd.Stderr = log, log
			p, err := node.StartProcess(cmd)
			log.Close()
			if err != nil {
				return
			}
			select {
			case <-o.stop:
				p.Stop(10 * time.Second)
				return
			case <-p.Done():
			}
			select {
			case <-o.stop:
				return
			case <-time.After(time.Second):
			}
		}
	})
}

// Stop ends the processes; what they created stays in the cluster.
func (o *supervisor) Stop() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	o.wg.Wait()
}
