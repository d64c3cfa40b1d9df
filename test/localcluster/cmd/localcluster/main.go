// Command localcluster is `make demo`: it starts a local Kubernetes control plane with real
// nodes (test/node; one by default, --nodes N: make demo NODES=3), each in a network namespace
// of its own on the cluster's network, runs the operator as its CSV's
// Deployment from its image, applies the sample RedisCluster, shows it working, and keeps the
// cluster up until Ctrl-C. With --olm it runs OLM on the same node and lets it install the
// operator from the catalog.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/org/redis-operator/test/localcluster"
	"github.com/org/redis-operator/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redis-operator-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	withOLM := flag.Bool("olm", false, "run OLM and let it install the operator from the catalog")
	olmOnly := flag.Bool("olm-only", false, "run OLM and install nothing: for make run-bundle")
	nodes := flag.Int("nodes", 1, "how many real nodes, each in a zone of its own (not with --olm)")
	flag.Parse()
	if *nodes < 1 || ((*withOLM || *olmOnly) && *nodes != 1) {
		return fmt.Errorf("--nodes %d: a cluster has 1 node or more, and OLM runs on a cluster of one", *nodes)
	}

	var cluster *localcluster.Cluster
	if *withOLM || *olmOnly {
		step("Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a node (kubelet, containerd, runc, " +
			"the CNI bridge, kube-proxy) in a network namespace of their own, and OLM (olm and catalog operators)")
		if cluster, err = localcluster.StartWithOLM(ctx, root, dir, "0.1.0", "0.2.0"); err != nil {
			return err
		}
	} else {
		step(fmt.Sprintf("Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and %d node(s) (kubelet, containerd, runc, "+
			"the CNI bridge, kube-proxy), each in a network namespace of its own; the operator runs as its CSV's Deployment, "+
			"from its image", *nodes))
		if cluster, err = localcluster.StartOnRealNodes(ctx, root, dir, *nodes); err != nil {
			return err
		}
		if err := show(cluster, "get", "nodes", "-L", localcluster.ZoneLabel); err != nil {
			return err
		}
		if err := show(cluster, "get", "-n", localcluster.OperatorNamespace, "deployments,pods", "-o", "wide"); err != nil {
			return err
		}
	}
	defer func() {
		step("Stopping the cluster and every process it started")
		cluster.Stop()
	}()
	switch {
	case *olmOnly:
		step("Publishing the bundle image of every release in catalog/ to the cluster's registry")
		fbc, err := localcluster.CatalogOf(ctx, root, nil)
		if err != nil {
			return err
		}
		if err := cluster.PublishBundles(ctx, fbc); err != nil {
			return err
		}
		step("OLM runs; nothing is installed. Install the operator with make run-bundle (Ctrl-C ends the cluster)")
		printUsage(cluster)
		fmt.Printf("  make run-bundle BUNDLE_IMG=%s\n  make bundle-build bundle-push run-bundle-upgrade\n  make cleanup-bundle\n", fbc.Bundles[0].Image)
		<-ctx.Done()
		return nil
	case *withOLM:
		if err := installFromCatalog(ctx, cluster, root); err != nil {
			return err
		}
	}
	step("kubectl apply -f config/samples/cache_v1_rediscluster.yaml")
	if err := show(cluster, "apply", "-n", "default", "-f", filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml")); err != nil {
		return err
	}
	step("Waiting until the RedisCluster is Ready")
	if err := show(cluster, "wait", "-n", "default", "--for=condition=Ready", "rediscluster/sessions", "--timeout=180s"); err != nil {
		return err
	}
	if err := show(cluster, "get", "-n", "default", "redisclusters,statefulsets,pods", "-L", "cache.example.com/role", "-o", "wide"); err != nil {
		return err
	}

	step("Writing a key through the primary Service, reading it through the replicas Service (their ClusterIPs, from the node)")
	password, err := cluster.SecretValue(ctx, "default", "sessions-auth", "password")
	if err != nil {
		return err
	}
	if err := writeAndRead(ctx, cluster, password); err != nil {
		return err
	}
	step("The cluster is yours until Ctrl-C")
	printUsage(cluster)
	fmt.Printf(`  kubectl get redisclusters,pods -L cache.example.com/role
  kubectl describe rediscluster sessions
  kubectl patch rediscluster sessions --type merge -p '{"spec":{"replicas":5}}'
  The password: export REDISCLI_AUTH=$(kubectl get secret sessions-auth -o jsonpath='{.data.password}' | base64 -d)
  kubectl exec sessions-0 -c redis -- env REDISCLI_AUTH=$REDISCLI_AUTH redis-cli info replication
  kubectl port-forward svc/sessions 6379, then redis-cli -p 6379 ping
`)
	<-ctx.Done()
	fmt.Println()
	return nil
}

// writeAndRead writes a key through the primary Service and reads it through the replicas
// Service, at their ClusterIPs from inside the node's namespace: kube-proxy routes them.
func writeAndRead(ctx context.Context, cluster *localcluster.Cluster, password string) error {
	clusterIP := func(name string) (string, error) {
		out, err := cluster.KubectlOutput("get", "-n", "default", "service", name, "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, out)
		}
		return net.JoinHostPort(out, "6379"), nil
	}
	primary, err := clusterIP("sessions")
	if err != nil {
		return err
	}
	w := goredis.NewClient(&goredis.Options{Addr: primary, Password: password, Dialer: cluster.Dial})
	defer w.Close()
	if err := w.Set(ctx, "greeting", "hello from the primary", 0).Err(); err != nil {
		return err
	}
	if err := w.Do(ctx, "WAIT", 2, 5000).Err(); err != nil {
		return err
	}
	fmt.Printf("SET greeting on %s (sessions)\n", primary)
	replicas, err := clusterIP("sessions-replicas")
	if err != nil {
		return err
	}
	r := goredis.NewClient(&goredis.Options{Addr: replicas, Password: password, Dialer: cluster.Dial})
	defer r.Close()
	v, err := r.Get(ctx, "greeting").Result()
	if err != nil {
		return err
	}
	fmt.Printf("GET greeting on %s (sessions-replicas): %q\n", replicas, v)
	return nil
}

func printUsage(cluster *localcluster.Cluster) {
	fmt.Printf("  export KUBECONFIG=%s PATH=%s:$PATH\n  Logs of the control plane and OLM: %s; of the pods: kubectl logs\n",
		cluster.AdminKubeconfig, filepath.Dir(cluster.KubectlPath()), filepath.Dir(cluster.LogPath("kube-apiserver")))
}

// installFromCatalog does what a platform team does on OperatorHub: a CatalogSource of the
// catalog image (catalog/, published with its bundle images to the cluster's registry) and a
// Subscription in the global OperatorGroup; OLM installs the channel head.
func installFromCatalog(ctx context.Context, cluster *localcluster.Cluster, root string) error {
	step("Publishing catalog/ as the catalog image " + localcluster.CatalogImage + ", with its bundle images, to the cluster's registry")
	fbc, err := localcluster.CatalogOf(ctx, root, nil)
	if err != nil {
		return err
	}
	if err := cluster.PublishCatalog(ctx, localcluster.CatalogImage, fbc); err != nil {
		return err
	}
	step("kubectl apply: CatalogSource olm/redis-operator of that image (OLM runs its registry pod)")
	source := fmt.Sprintf(`apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata: {name: redis-operator, namespace: olm}
spec:
  sourceType: grpc
  image: %s
  displayName: Redis Operator
  grpcPodConfig: {securityContextConfig: restricted}
  updateStrategy: {registryPoll: {interval: 10m}}
`, localcluster.CatalogImage)
	sourcePath := filepath.Join(cluster.Dir(), "catalogsource.yaml")
	if err := os.WriteFile(sourcePath, []byte(source), 0o600); err != nil {
		return err
	}
	if err := show(cluster, "apply", "-f", sourcePath); err != nil {
		return err
	}
	step("kubectl apply: Subscription operators/redis-operator (channel stable, automatic approval)")
	sub := `apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata: {name: redis-operator, namespace: operators}
spec: {name: redis-operator, channel: stable, source: redis-operator, sourceNamespace: olm}
`
	path := filepath.Join(cluster.Dir(), "subscription.yaml")
	if err := os.WriteFile(path, []byte(sub), 0o600); err != nil {
		return err
	}
	if err := show(cluster, "apply", "-f", path); err != nil {
		return err
	}
	step("Waiting until OLM has installed the operator (CSV Succeeded)")
	for {
		out, _ := cluster.KubectlOutput("get", "subscription", "-n", "operators", "redis-operator", "-o", "jsonpath={.status.installedCSV}")
		if out != "" {
			if err := show(cluster, "wait", "-n", "operators", "csv/"+out, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=180s"); err != nil {
				return err
			}
			return show(cluster, "get", "-n", "operators", "csv,deployments,pods")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func step(msg string) {
	fmt.Printf("\n==> %s\n", msg)
}

func show(c *localcluster.Cluster, args ...string) error {
	fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
	out, err := c.KubectlOutput(args...)
	fmt.Print(out)
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
