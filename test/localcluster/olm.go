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

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The namespaces OLM's own install creates: OLM runs in olm, which is also the global catalog
// namespace; operators holds the global OperatorGroup that installs in every namespace.
const (
	OLMNamespace       = "olm"
	OperatorsNamespace = "operators"
)

// OLM is Operator Lifecycle Manager running on the local cluster: its CRDs, and its olm and
// catalog operators (built from v0.38.0 by `make olm`) as supervised local processes.
type OLM struct {
	c            *Cluster
	placeholders []net.Listener
	stop         chan struct{}
	wg           sync.WaitGroup
}

// StartOLM installs OLM as its own install does (CRDs, namespaces, OperatorGroups) and runs
// its two operators until Stop.
//
// Both operators serve health and metrics on a fixed port of every address (catalog :8080, olm
// :8080 or :8443). In a cluster that is their pod's network; here pods share the host's, so an
// operator pod on its own loopback address could not bind :8080. We keep 127.0.0.1:8080 and
// :8443 bound while OLM runs: their wildcard binds fail, which they log and carry on from (the
// health endpoints are the only thing lost).
func (c *Cluster) StartOLM(ctx context.Context) (*OLM, error) {
	binDir := filepath.Join(c.Root, "bin", "olm")
	for _, bin := range []string{"olm", "catalog"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			return nil, fmt.Errorf("OLM's %s is not built; run `make olm`: %w", bin, err)
		}
	}
	if err := c.Kubectl("apply", "--server-side", "-f", filepath.Join(binDir, "crds")); err != nil {
		return nil, err
	}
	if err := c.Kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", filepath.Join(binDir, "crds")); err != nil {
		return nil, err
	}
	if err := c.createOLMNamespaces(ctx); err != nil {
		return nil, err
	}
	o := &OLM{c: c, stop: make(chan struct{})}
	for _, port := range []string{"8080", "8443"} {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			o.Stop()
			return nil, fmt.Errorf("holding 127.0.0.1:%s for OLM's health servers: %w", port, err)
		}
		o.placeholders = append(o.placeholders, l)
	}
	env := append(os.Environ(), "KUBECONFIG="+c.AdminKubeconfig, "OPERATOR_NAMESPACE="+OLMNamespace)
	o.supervise("olm", filepath.Join(binDir, "olm"), env, "--namespace", OLMNamespace, "--writeStatusName=", "--writePackageServerStatusName=")
	o.supervise("catalog", filepath.Join(binDir, "catalog"), env, "--namespace", OLMNamespace, "--kubeconfig", c.AdminKubeconfig, "--writeStatusName=")
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
func (o *OLM) supervise(name, bin string, env []string, args ...string) {
	o.wg.Go(func() {
		for {
			log, err := os.OpenFile(o.c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = env
			cmd.Stdout, cmd.Stderr = log, log
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			err = cmd.Start()
			log.Close()
			if err != nil {
				return
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-o.stop:
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
				return
			case <-done:
			}
			select {
			case <-o.stop:
				return
			case <-time.After(time.Second):
			}
		}
	})
}

// Stop ends OLM's operators; what they created stays in the cluster.
func (o *OLM) Stop() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	o.wg.Wait()
	for _, l := range o.placeholders {
		l.Close()
	}
}
