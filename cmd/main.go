// Command manager runs the redis-operator: the RedisCluster controller.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/internal/operator"
	"github.com/org/redis-operator/internal/redis"
)

func main() {
	var opts operator.Options
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", operator.DefaultMetricsAddr, `The address the metrics endpoint binds to; "0" disables it.`)
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", operator.DefaultProbeAddr, "The address the health and readiness probes bind to.")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Elect a leader, so that only one replica of the operator is active.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "The namespace of the leader election lease when running outside a cluster.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", operator.DefaultMaxConcurrentReconciles, "How many RedisClusters are reconciled at once.")
	flag.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", operator.DefaultLeaseDuration, "How long a leader's lease lasts.")
	flag.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", operator.DefaultRenewDeadline, "How long the leader keeps trying to renew before it gives up and exits: longer than an API server restart.")
	flag.DurationVar(&opts.CheckInterval, "redis-check-interval", controllers.DefaultCheckInterval, "How often each RedisCluster's Redis nodes are checked.")
	flag.DurationVar(&opts.RedisTimeout, "redis-timeout", redis.DefaultTimeout, "How long a Redis node may take to answer before it counts as unreachable.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	opts.WatchNamespaces = operator.ParseWatchNamespaces(os.Getenv("WATCH_NAMESPACE"))
	log.Info("Starting redis-operator", "watchNamespaces", opts.WatchNamespaces, "leaderElection", opts.LeaderElection)

	mgr, err := operator.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		log.Error(err, "Unable to set up the manager")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}
