// Command manager runs the redis-operator: the RedisCluster controller.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// version is the release this binary is, set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == resources.RestoreCommand {
		os.Exit(restoreMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == resources.BackupCommand {
		os.Exit(backupMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == resources.DeleteBackupCommand {
		os.Exit(deleteBackupMain(os.Args[2:]))
	}
	var opts operator.Options
	var qps float64
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", operator.DefaultMetricsAddr, `The address the metrics endpoint binds to; "0" disables it.`)
	flag.BoolVar(&opts.InsecureMetrics, "metrics-insecure", false, "Serve the metrics over plain HTTP to anyone, instead of HTTPS to callers allowed to get /metrics.")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", operator.DefaultProbeAddr, "The address the health and readiness probes bind to.")
	flag.StringVar(&opts.PprofAddr, "pprof-bind-address", "0", `The address Go's profiles (/debug/pprof) are served on; "0" disables them.`)
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Elect a leader, so that only one replica of the operator is active.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "The namespace of the leader election lease when running outside a cluster.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", operator.DefaultMaxConcurrentReconciles, "How many RedisClusters are reconciled at once.")
	flag.Float64Var(&qps, "kube-api-qps", operator.DefaultKubeAPIQPS, "How many requests per second the operator sends to the API server, at most, over time.")
	flag.IntVar(&opts.KubeAPIBurst, "kube-api-burst", operator.DefaultKubeAPIBurst, "How many requests the operator may send to the API server at once above --kube-api-qps.")
	flag.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", operator.DefaultLeaseDuration, "How long a leader's lease lasts.")
	flag.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", operator.DefaultRenewDeadline, "How long the leader keeps trying to renew before it gives up and exits: longer than an API server restart.")
	flag.DurationVar(&opts.CheckInterval, "redis-check-interval", controllers.DefaultCheckInterval, "How often each RedisCluster's Redis nodes are checked.")
	flag.IntVar(&opts.SlotMovePace.KeysPerMigrate, "slot-move-keys-per-migrate", shards.DefaultPace.KeysPerMigrate, "How many keys one MIGRATE carries when cluster mode moves slots: the giving primary's clients wait while it runs.")
	flag.Float64Var(&opts.SlotMovePace.Share, "slot-move-share", shards.DefaultPace.Share, "The share of the primaries' time cluster mode's slot moves may take, in (0, 1]: after each MIGRATE or slot step that took d, the move rests d*(1-share)/share.")
	flag.DurationVar(&opts.RedisTimeout, "redis-timeout", operator.DefaultRedisTimeout, "How long a Redis node may take to answer before it counts as unreachable.")
	var installMonitoring bool
	flag.BoolVar(&installMonitoring, "install-monitoring", true, "Install a ServiceMonitor and a PrometheusRule in the operator's namespace (POD_NAMESPACE) when the Prometheus Operator's CRDs exist.")
	flag.StringVar(&opts.OperatorImage, "operator-image", os.Getenv("OPERATOR_IMAGE"), "The operator's own image, which restores backups into new RedisClusters (an init container runs it); by default OPERATOR_IMAGE, or the image of the operator's pod (POD_NAME, POD_NAMESPACE).")
	flag.StringVar(&opts.MetricsService, "metrics-service-name", operator.DefaultMetricsService, "The operator's metrics Service, in its namespace: it owns the ServiceMonitor and the PrometheusRule.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	opts.KubeAPIQPS = float32(qps)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if err := opts.SlotMovePace.Valid(); err != nil {
		log.Error(err, "--slot-move-keys-per-migrate and --slot-move-share")
		os.Exit(2)
	}

	opts.WatchNamespaces = operator.ParseWatchNamespaces(os.Getenv("WATCH_NAMESPACE"))
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = leaseNamespace()
	}
	// In a pod, the lease is held under the pod's name: restarted after a crash, the operator
	// leads again at once instead of waiting out its own lease.
	opts.LeaderElectionIdentity = os.Getenv("POD_NAME")
	if installMonitoring {
		opts.MonitoringNamespace = os.Getenv("POD_NAMESPACE")
	}
	opts.RedisImages = resources.RedisImagesFromEnv(os.Environ())
	log.Info("Starting redis-operator", "version", version, "watchNamespaces", opts.WatchNamespaces, "leaderElection", opts.LeaderElection,
		"redisImages", opts.RedisImages)

	cfg := ctrl.GetConfigOrDie()
	if opts.OperatorImage == "" {
		opts.OperatorImage = ownImage(cfg)
	}
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		log.Error(err, "Unable to set up the manager")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}

// leaseNamespace is where the leader election lease lives when no flag says: the pod's
// namespace from the downward API (POD_NAMESPACE); in a pod without it, empty, and
// controller-runtime reads the service account's namespace file; outside a cluster, the
// namespace of the kubeconfig's current context.
func leaseNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if _, err := rest.InClusterConfig(); err == nil {
		return ""
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil {
		return ""
	}
	return ns
}

// ownImage is the image of the operator's own container, read from its pod (POD_NAME and
// POD_NAMESPACE, from the downward API); empty outside a pod or without the right to read it.
// OLM and kustomize set the container's image, so the pod knows it best.
func ownImage(cfg *rest.Config) string {
	name, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || namespace == "" {
		return ""
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		ctrl.Log.WithName("setup").Info("Could not read the operator's own pod for its image; restores need --operator-image", "error", err.Error())
		return ""
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "manager" || len(pod.Spec.Containers) == 1 {
			return c.Image
		}
	}
	return ""
}
