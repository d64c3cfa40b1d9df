package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/node"
)

// clusterDNS is the local cluster's DNS server. It stands in for CoreDNS (not built here) and
// answers what CoreDNS's kubernetes plugin answers for Services: <service>.<namespace>.svc.
// cluster.local is the Service's ClusterIP or, when it is headless, its ready endpoints'
// addresses; <hostname>.<service>.<namespace>.svc.cluster.local is one endpoint's. Every other
// name does not exist (there is no upstream to forward to). It reads the API server at each
// question, so a Service is known as soon as it exists; the harness serves it over UDP at the
// control plane's address inside its namespace, where pods of every node (the kubelets'
// clusterDNS) and the processes the harness runs there (OLM's, through ResolvConf) ask it.
type clusterDNS struct {
	client client.Reader
	conn   net.PacketConn
	done   chan struct{}
}

// dnsTTL is how long a resolver may keep an answer: CoreDNS's default for Services.
const dnsTTL = 5

// startClusterDNS listens at the control plane's address, port 53, in netns and answers until stop.
func startClusterDNS(netns *node.Netns, c client.Reader) (*clusterDNS, error) {
	conn, err := netns.ListenPacket("udp", net.JoinHostPort(node.ControlPlaneIP, "53"))
	if err != nil {
		return nil, fmt.Errorf("listening for DNS in the control plane's namespace: %w", err)
	}
	d := &clusterDNS{client: c, conn: conn, done: make(chan struct{})}
	go d.serve()
	return d, nil
}

// writeResolvConf writes the resolv.conf of a process that resolves through the cluster's DNS,
// with the search list a pod in namespace gets.
func writeResolvConf(dir, namespace string) (string, error) {
	path := filepath.Join(dir, "resolv-"+namespace+".conf")
	conf := fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s\noptions ndots:5\n",
		node.ControlPlaneIP, namespace, node.ClusterDomain, node.ClusterDomain, node.ClusterDomain)
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

func (d *clusterDNS) stop() {
	_ = d.conn.Close()
	<-d.done
}

func (d *clusterDNS) serve() {
	defer close(d.done)
	buf := make([]byte, 512)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		reply, err := d.answer(buf[:n])
		if err != nil {
			continue // not a question we can parse: a resolver retries or gives up
		}
		_, _ = d.conn.WriteTo(reply, from)
	}
}

// answer builds the reply to one DNS message.
func (d *clusterDNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	reply := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := d.lookup(ctx, strings.ToLower(q.Name.String()))
	switch {
	case errors.Is(err, errNoSuchName):
		reply.RCode = dnsmessage.RCodeNameError
	case err != nil:
		reply.RCode = dnsmessage.RCodeServerFailure
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), reply)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		// The name exists: a question of any other type (AAAA) gets no answer and no error.
		if q.Type != dnsmessage.TypeA || !a.Is4() {
			continue
		}
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

var errNoSuchName = errors.New("no such name")

// lookup answers a fully qualified name (with its final dot) with the addresses it stands for.
func (d *clusterDNS) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	rest, ok := strings.CutSuffix(name, ".svc."+node.ClusterDomain+".")
	if !ok {
		return nil, errNoSuchName
	}
	labels := strings.Split(rest, ".")
	switch len(labels) {
	case 2: // <service>.<namespace>
		return d.serviceAddrs(ctx, labels[1], labels[0], "")
	case 3: // <hostname>.<service>.<namespace>
		return d.serviceAddrs(ctx, labels[2], labels[1], labels[0])
	default:
		return nil, errNoSuchName
	}
}

// serviceAddrs is a Service's ClusterIP, or the addresses of its ready endpoints (those with
// hostname only, when it is set).
func (d *clusterDNS) serviceAddrs(ctx context.Context, namespace, name, hostname string) ([]netip.Addr, error) {
	svc := &corev1.Service{}
	if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNoSuchName
		}
		return nil, err
	}
	if hostname == "" && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return parseAddrs(svc.Spec.ClusterIPs...), nil
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := d.client.List(ctx, slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			if hostname != "" && (e.Hostname == nil || *e.Hostname != hostname) {
				continue
			}
			addrs = append(addrs, parseAddrs(e.Addresses...)...)
		}
	}
	if hostname != "" && len(addrs) == 0 {
		return nil, errNoSuchName
	}
	return addrs, nil
}

func parseAddrs(ss ...string) []netip.Addr {
	var addrs []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
