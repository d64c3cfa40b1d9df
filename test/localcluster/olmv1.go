package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/testenv"
)

// OLMv1Namespace is where OLM v1 keeps its state (Helm releases of what it installed), and the
// namespace of catalogd's Service.
const OLMv1Namespace = "olmv1-system"

// catalogdService is the Service operator-controller reaches catalogd's catalog content at.
const catalogdService = "catalogd-service"

// catalogdPort is the port catalogd serves catalog content on, at the control plane's address.
const catalogdPort = 8443

// OLMv1 is OLM v1 on the local cluster: catalogd and operator-controller, built from
// operator-controller v1.11.0 by `make olmv1`, as supervised processes in the control plane's namespace
// (as OLM v0 runs here), with upstream's standard feature set. What upstream's install leaves
// to cert-manager (a CA, catalogd's serving certificate, the CA operator-controller trusts) the
// harness issues: cert-manager is not built here. catalogd's mutating webhook (it only labels
// each ClusterCatalog with its own name) is not registered; ClusterCatalogs here carry that
// label themselves. catalogd's Service has no pods behind it: its EndpointSlice names the control plane's
// address, where catalogd listens.
type OLMv1 struct {
	supervisor
}

// StartOLMv1 installs OLM v1's CRDs and runs catalogd and operator-controller until Stop. They
// pull catalog and bundle images from the cluster's registry, as a disconnected cluster pulls
// from its mirror (registries.conf).
func (c *Cluster) StartOLMv1(ctx context.Context) (*OLMv1, error) {
	if c.real == nil {
		return nil, fmt.Errorf("OLM v1 runs on the real node: start the cluster with StartWithOLM")
	}
	binDir := filepath.Join(c.Root, "bin", "olmv1")
	for _, bin := range []string{"catalogd", "operator-controller"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			return nil, fmt.Errorf("OLM v1's %s is not built; run `make olmv1`: %w", bin, err)
		}
	}
	if err := c.applyCRDs(filepath.Join(binDir, "crds")); err != nil {
		return nil, err
	}
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OLMv1Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := c.exposeCatalogd(ctx); err != nil {
		return nil, err
	}
	dir := filepath.Join(c.Dir(), "olmv1")
	certs, err := issueOLMv1Certificates(dir)
	if err != nil {
		return nil, err
	}
	home, err := writeContainersConfig(filepath.Join(dir, "home"), c.real.registry.Host, "example.com")
	if err != nil {
		return nil, err
	}
	resolvConf, err := writeResolvConf(c.Dir(), OLMv1Namespace)
	if err != nil {
		return nil, err
	}
	o := &OLMv1{supervisor{c: c, stop: make(chan struct{}),
		env: append(os.Environ(), "KUBECONFIG="+c.NodeKubeconfig, "HOME="+home, "POD_NAMESPACE="+OLMv1Namespace)}}
	catalogdFiles, err := c.podFilesOf(ctx, dir, resolvConf, "catalogd-controller-manager")
	if err != nil {
		return nil, err
	}
	controllerFiles, err := c.podFilesOf(ctx, dir, resolvConf, "operator-controller-controller-manager")
	if err != nil {
		return nil, err
	}
	// Health and metrics ports of their own: in a cluster each has its pod's network, here they
	// share the control plane's (and OLM v0's).
	o.supervise("catalogd", catalogdFiles, filepath.Join(binDir, "catalogd"), "--kubeconfig", c.NodeKubeconfig,
		"--system-namespace", OLMv1Namespace, "--cache-dir", filepath.Join(dir, "catalogd-cache"),
		"--catalogs-server-addr", net.JoinHostPort(node.ControlPlaneIP, strconv.Itoa(catalogdPort)),
		"--external-address", catalogdService+"."+OLMv1Namespace+".svc",
		"--tls-cert", certs.cert, "--tls-key", certs.key, "--pull-cas-dir", certs.caDir,
		"--metrics-bind-address", ":7443", "--health-probe-bind-address", ":8091", "--webhook-server-port", "9444",
		"--feature-gates=APIV1MetasHandler=false")
	o.supervise("operator-controller", controllerFiles, filepath.Join(binDir, "operator-controller"), "--kubeconfig", c.NodeKubeconfig,
		"--system-namespace", OLMv1Namespace, "--cache-path", filepath.Join(dir, "operator-controller-cache"),
		"--catalogd-cas-dir", certs.caDir, "--pull-cas-dir", certs.caDir,
		"--tls-cert", certs.cert, "--tls-key", certs.key, "--metrics-bind-address", ":8444", "--health-probe-bind-address", ":8092",
		"--feature-gates=BoxcutterRuntime=false", "--feature-gates=WebhookProviderCertManager=true",
		"--feature-gates=SingleOwnNamespaceInstallSupport=false")
	return o, nil
}

// podFilesOf creates the ServiceAccount name in OLM v1's namespace (upstream's install has one
// for each of its two managers) and writes the token and namespace files a pod of it has: both
// managers read the token to learn their ServiceAccount (it names the pull secrets they use).
// They talk to the API server with the nodes' kubeconfig.
func (c *Cluster) podFilesOf(ctx context.Context, dir, resolvConf, name string) (node.PodFiles, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OLMv1Namespace}}
	if err := c.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return node.PodFiles{}, fmt.Errorf("creating ServiceAccount %s: %w", name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))}}
	if err := c.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return node.PodFiles{}, fmt.Errorf("requesting a token of ServiceAccount %s: %w", name, err)
	}
	saDir := filepath.Join(dir, "serviceaccount-"+name)
	if err := os.MkdirAll(saDir, 0o700); err != nil {
		return node.PodFiles{}, err
	}
	for file, data := range map[string]string{"token": req.Status.Token, "namespace": OLMv1Namespace} {
		if err := os.WriteFile(filepath.Join(saDir, file), []byte(data), 0o600); err != nil {
			return node.PodFiles{}, err
		}
	}
	return node.PodFiles{ResolvConf: resolvConf, ServiceAccount: saDir}, nil
}

// exposeCatalogd makes catalogd's Service answer at the control plane's address, where catalogd listens.
func (c *Cluster) exposeCatalogd(ctx context.Context) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: catalogdService, Namespace: OLMv1Namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: catalogdService, Namespace: OLMv1Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: catalogdService, discoveryv1.LabelManagedBy: "localcluster"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{node.ControlPlaneIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(catalogdPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, obj := range []client.Object{svc, slice} {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

type olmv1Certificates struct{ cert, key, caDir string }

// issueOLMv1Certificates issues what upstream's install asks cert-manager for: a CA, and
// catalogd's serving certificate for its Service's names; the CA goes where both read the CAs
// they trust.
func issueOLMv1Certificates(dir string) (olmv1Certificates, error) {
	ca, err := testenv.NewCA("olmv1-ca")
	if err != nil {
		return olmv1Certificates{}, err
	}
	svc := catalogdService + "." + OLMv1Namespace + ".svc"
	kp, err := ca.Issue("localhost", svc, svc+"."+node.ClusterDomain)
	if err != nil {
		return olmv1Certificates{}, err
	}
	certs := olmv1Certificates{cert: filepath.Join(dir, "certs", "tls.crt"), key: filepath.Join(dir, "certs", "tls.key"),
		caDir: filepath.Join(dir, "ca")}
	for path, data := range map[string][]byte{certs.cert: kp.CertPEM, certs.key: kp.KeyPEM, filepath.Join(certs.caDir, "olm-ca.crt"): ca.PEM} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return certs, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return certs, err
		}
	}
	return certs, nil
}

// writeContainersConfig writes, under home, the containers/image configuration OLM v1 pulls
// with: each of hosts mirrored to the cluster's registry (plain HTTP, the names kept as the
// registry keeps them: test/registry), and a policy that takes the images as they are.
func writeContainersConfig(home, registryHost string, hosts ...string) (string, error) {
	dir := filepath.Join(home, ".config", "containers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var conf strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&conf, "[[registry]]\nprefix = %q\nlocation = %q\ninsecure = true\n\n", h, registryHost+"/"+h)
	}
	if err := os.WriteFile(filepath.Join(dir, "registries.conf"), []byte(conf.String()), 0o600); err != nil {
		return "", err
	}
	return home, writeSignaturePolicy(home)
}

// writeSignaturePolicy writes, under home, the signature policy containers/image pulls with (opm
// and OLM v1 pull with it): every image taken as it is, since the registry is the cluster's
// own, holding what the harness built.
func writeSignaturePolicy(home string) error {
	dir := filepath.Join(home, ".config", "containers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "policy.json"), []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o600)
}
