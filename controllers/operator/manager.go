// Package operator assembles the controller manager: the scheme, the cache (which namespaces,
// which objects), and the RedisCluster controller. cmd/ runs it; the tests run the same thing.
package operator

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
	redismetrics "github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/redisbackup"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/monitoring"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// The defaults cmd/ gives its flags.
const (
	DefaultMetricsAddr = ":8443"
	// DefaultMetricsService is the metrics Service as config/default and the bundle name it.
	DefaultMetricsService          = "redis-operator-controller-manager-metrics-service"
	DefaultProbeAddr               = ":8081"
	DefaultMaxConcurrentReconciles = 4
	// DefaultLeaseDuration and DefaultRenewDeadline outlast an API server restart or its etcd
	// being away for 30s: the leader keeps failing Redis over meanwhile, where a leader that
	// exited could not be elected again until the API server is back. (With controller-runtime's
	// 15s and 10s the leader exited whenever an API server restart took longer than 10s.) The
	// cost: a leader that crashes is replaced after up to a minute; one that stops cleanly
	// hands over at once.
	DefaultLeaseDuration = 60 * time.Second
	DefaultRenewDeadline = 45 * time.Second
	// GracefulShutdown bounds how long a stopping operator waits for its reconciles before it
	// gives its lease up: below the pod's terminationGracePeriodSeconds (10, config/manager),
	// so that the release is sent before the kubelet's SIGKILL and the next replica leads at
	// once, not a lease duration later (controller-runtime waits 30s by default). A reconcile
	// still running then acts on nothing: the release closes the fence first (fence.go).
	GracefulShutdown = 5 * time.Second
	// DefaultKubeAPIQPS and DefaultKubeAPIBurst bound the operator's requests to the API server.
	// controller-runtime's 20 and 30 would make 500 new RedisClusters (10 requests each) wait
	// 4 minutes on the client; the API server's priority and fairness guards it from there.
	DefaultKubeAPIQPS   = 500
	DefaultKubeAPIBurst = 1000
	// DefaultRedisTimeout is how long a Redis node may take to answer before it counts as
	// unreachable.
	DefaultRedisTimeout = redis.DefaultTimeout
)

// Options are the manager's settings, from flags and the environment.
type Options struct {
	// WatchNamespaces limits the operator to these namespaces; empty means every namespace.
	WatchNamespaces []string
	// MetricsAddr serves Prometheus metrics; "0" turns them off.
	MetricsAddr string
	// InsecureMetrics serves them over plain HTTP to anyone; by default they are served over
	// HTTPS to callers the API server authenticates (TokenReview) and allows to get /metrics
	// (SubjectAccessReview), as operator-sdk's go/v4 layout does.
	InsecureMetrics bool
	// ProbeAddr serves /healthz and /readyz; "0" turns them off.
	ProbeAddr string
	// PprofAddr serves Go's profiles (/debug/pprof); empty or "0" turns them off.
	PprofAddr string
	// LeaderElection makes one replica of the operator active at a time.
	LeaderElection bool
	// LeaderElectionNamespace is where the lease lives when the operator runs outside a cluster.
	LeaderElectionNamespace string
	// LeaderElectionIdentity is who holds the lease: the pod's name in a cluster (see
	// leaderLock); empty, a new identity each start (the hostname and a UUID).
	LeaderElectionIdentity string
	// LeaseDuration and RenewDeadline of leader election. The leader exits when it cannot renew
	// within RenewDeadline, so it must outlast an API server restart.
	LeaseDuration, RenewDeadline time.Duration
	// KubeAPIQPS and KubeAPIBurst limit the client's requests to the API server (the rest
	// config's own when 0).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// MaxConcurrentReconciles is how many RedisClusters are reconciled at once (controller-runtime's 1 when 0).
	MaxConcurrentReconciles int
	// CheckInterval is the period of each RedisCluster's health check (controllers.DefaultCheckInterval when 0).
	CheckInterval time.Duration
	// SlotMovePace is how hard cluster mode's slot moves press on the primaries (shards.DefaultPace when zero).
	SlotMovePace shards.Pace
	// SecretResync is how often the password Secret is read again (controllers.DefaultSecretResync when 0).
	SecretResync time.Duration
	// MaxRetryDelay caps the back-off after a failed reconcile (controllers.DefaultMaxRetryDelay when 0).
	MaxRetryDelay time.Duration
	// RedisTimeout bounds each Redis command; a node that does not answer within it is unreachable.
	RedisTimeout time.Duration
	// RedisHook sees every dial and command the operator sends to Redis (nil in production; the
	// fault suite crashes the operator after a chosen write with it).
	RedisHook goredis.Hook
	// MonitoringNamespace is the operator's own namespace, where it installs its ServiceMonitor
	// and PrometheusRule when the Prometheus Operator's CRDs exist; empty turns that off.
	MonitoringNamespace string
	// MetricsService is the name of the operator's metrics Service there, which owns them.
	MetricsService string
	// MonitoringInterval is how often the CRDs are looked for (monitoring.DefaultInterval when 0).
	MonitoringInterval time.Duration
	// OperatorImage is the operator's own image, which restores backups into new RedisClusters
	// and writes backups to volumes.
	OperatorImage string
	// RedisImages are the Redis images by version a RedisCluster without spec.image runs
	// (resources.RedisImagesFromEnv).
	RedisImages resources.RedisImages
	// SkipNameValidation lets one process run several managers (tests do); controller names are otherwise unique.
	SkipNameValidation bool
}

// ParseWatchNamespaces reads WATCH_NAMESPACE as OLM sets it: a comma-separated list, or empty for all.
func ParseWatchNamespaces(value string) []string {
	var namespaces []string
	for _, ns := range strings.Split(value, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	return namespaces
}

// backupsServed says whether the API server serves the RedisBackup kind and the operator may
// watch it in the namespaces it watches (an older bundle's RBAC does not let it).
func backupsServed(cfg *rest.Config, namespaces []string) (bool, error) {
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("creating the discovery client: %w", err)
	}
	list, err := disc.ServerResourcesForGroupVersion(cachev1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", cachev1.GroupVersion, err)
	}
	served := false
	for _, r := range list.APIResources {
		served = served || r.Name == "redisbackups"
	}
	if !served {
		return false, nil
	}
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	return mayWatch(cfg, cachev1.GroupVersion.Group, "redisbackups", namespaces)
}

// nodesReadable says whether the operator may watch nodes (to name the pods on machines that
// are not ready): an older bundle's RBAC does not let it, and an informer on a kind it may not
// list would hold every reconcile that asks it.
func nodesReadable(cfg *rest.Config) (bool, error) {
	return mayWatch(cfg, "", "nodes", []string{""})
}

// mayWatch asks the API server whether the operator may watch resource of group in each of
// namespaces ("" for cluster-wide).
func mayWatch(cfg *rest.Config, group, resource string, namespaces []string) (bool, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range namespaces {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "watch", Group: group, Resource: resource}}}
		got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("asking whether the operator may watch %s: %w", resource, err)
		}
		if !got.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// Events are written through core/v1, the Events API every Kubernetes serves, rather than
// events.k8s.io/v1 (controller-runtime's recorder): the validators OperatorHub runs flag any RBAC
// rule on events in events.k8s.io as the API removed in 1.25, whatever its version. The
// controllers keep the events.k8s.io-shaped interface; the Event's action and related object,
// which core/v1's recorder does not set, are dropped.
//
// eventBurst and eventQPS are the recorder's per-object budget: client-go's default (25, then
// one every 5 minutes) would drop the Events of a RedisCluster going through a long day (a
// rollout, a failover, a password change); the operator records Events only on changes.
const (
	eventBurst = 200
	eventQPS   = 1
)

// coreEventRecorders starts one core/v1 Event broadcaster for the manager (stopped with it) and
// returns the recorder of each component.
func coreEventRecorders(mgr ctrl.Manager, cfg *rest.Config) (func(component string) recorder.EventRecorder, error) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Events client: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst, QPS: eventQPS,
		// Similar Events (same object and reason, another message) stay apart: the default merges
		// the eleventh in ten minutes into "(combined from similar events)".
		MaxEvents: math.MaxInt32,
	}))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clientset.CoreV1().Events("")})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		broadcaster.Shutdown()
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding the Event broadcaster's stop: %w", err)
	}
	return func(component string) recorder.EventRecorder {
		return record.NewEventRecorderAdapter(broadcaster.NewRecorder(mgr.GetScheme(), corev1.EventSource{Component: component}))
	}, nil
}

// RedisDialer connects to Redis nodes with these options and a login.
func RedisDialer(opts redis.Options) func(redis.Login) redis.Dialer {
	return func(login redis.Login) redis.Dialer {
		return redis.NewDialer(opts.WithLogin(login))
	}
}

func init() {
	// Served with controller-runtime's metrics.
	metrics.Registry.MustRegister(redis.ConnectionsOpened)
	metrics.Registry.MustRegister(redismetrics.Collectors()...)
}

// metricsOptions serves the metrics over HTTPS (a self-signed certificate; Prometheus scrapes
// with insecureSkipVerify, as with kube-controller-manager) to callers allowed to get /metrics,
// asking the API server who they are and what they may do: the cluster-wide right to ask is
// config/rbac/metrics_auth_role.yaml, a role of its own, so that the operator's manager-role
// stays namespaced when it is installed for its own namespace. HTTP/2 is off, as in operator-sdk's
// layout: its stream resets and rapid resets were denial-of-service vectors.
func metricsOptions(opts Options) metricsserver.Options {
	if opts.InsecureMetrics {
		return metricsserver.Options{BindAddress: opts.MetricsAddr}
	}
	return metricsserver.Options{
		BindAddress:    opts.MetricsAddr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts:        []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}

// NewScheme registers the built-in types and cache.example.com/v1.
func NewScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	return scheme
}

// leaderElectionID names the lease.
const leaderElectionID = "redis-operator.cache.example.com"

// leaderLock is the lease the operator's replicas elect their leader with, held under
// opts.LeaderElectionIdentity: the pod's name. A container the kubelet restarts after a crash
// keeps its pod's name, finds the lease its own and leads again at once; with a new identity it
// would wait out the lease its dead self left, up to LeaseDuration, and no RedisCluster would
// fail over meanwhile. Two processes never hold one pod's name at once: the kubelet starts a
// container again only after it exited, and a Deployment names every pod anew.
func leaderLock(cfg *rest.Config, opts Options) (resourcelock.Interface, error) {
	if opts.LeaderElectionNamespace == "" {
		return nil, errors.New("leader election needs the lease's namespace (--leader-election-namespace, or POD_NAMESPACE)")
	}
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	identity := opts.LeaderElectionIdentity
	if identity == "" {
		// As controller-runtime names a process of its own.
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("naming this process for leader election: %w", err)
		}
		identity = host + "_" + string(uuid.NewUUID())
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, opts.LeaderElectionNamespace, leaderElectionID,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity})
}

// fenceOrNil is fence as the manager's lock: nil without leader election.
func fenceOrNil(fence *leaseFence) resourcelock.Interface {
	if fence == nil {
		return nil
	}
	return fence
}

// NewManager builds a manager running the RedisCluster controller.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme := NewScheme()
	cfg = rest.CopyConfig(cfg)
	if opts.KubeAPIQPS != 0 {
		cfg.QPS = opts.KubeAPIQPS
	}
	if opts.KubeAPIBurst != 0 {
		cfg.Burst = opts.KubeAPIBurst
	}
	// The cache holds only the children this operator manages, not every StatefulSet,
	// Service and ConfigMap of the cluster.
	managed := labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedByValue})
	cacheOpts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.StatefulSet{}:           {Label: managed},
			&corev1.Service{}:               {Label: managed},
			&corev1.ConfigMap{}:             {Label: managed},
			&corev1.Pod{}:                   {Label: managed},
			&policyv1.PodDisruptionBudget{}: {Label: managed},
		},
	}
	if len(opts.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	leaseDuration := cmp.Or(opts.LeaseDuration, DefaultLeaseDuration)
	renewDeadline := cmp.Or(opts.RenewDeadline, DefaultRenewDeadline)
	var fence *leaseFence
	newClient := client.New
	redisOpts := redis.Options{Timeout: opts.RedisTimeout, Hook: opts.RedisHook}
	if opts.LeaderElection {
		lock, err := leaderLock(cfg, opts)
		if err != nil {
			return nil, err
		}
		fence = newLeaseFence(lock, renewDeadline)
		newClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.New(cfg, o)
			return fencedClient{Client: c, fence: fence.Check}, err
		}
		redisOpts.Fence = fence.Check
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache:  cacheOpts,
		// Secrets are read by name, uncached: no informer lists or watches them.
		Client:                              client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                             metricsOptions(opts),
		HealthProbeBindAddress:              opts.ProbeAddr,
		PprofBindAddress:                    opts.PprofAddr,
		LeaderElection:                      opts.LeaderElection,
		LeaderElectionID:                    leaderElectionID,
		LeaderElectionNamespace:             opts.LeaderElectionNamespace,
		LeaderElectionResourceLockInterface: fenceOrNil(fence),
		NewClient:                           newClient,
		// Stepping down at once lets a new leader take over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(GracefulShutdown),
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		Controller: config.Controller{
			SkipNameValidation:      &opts.SkipNameValidation,
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	recorderFor, err := coreEventRecorders(mgr, cfg)
	if err != nil {
		return nil, err
	}
	reconciler := &controllers.RedisClusterReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Recorder:      recorderFor("rediscluster-controller"),
		Dial:          RedisDialer(redisOpts),
		CheckInterval: opts.CheckInterval,
		SlotMovePace:  opts.SlotMovePace,
		SecretResync:  opts.SecretResync,
		MaxRetryDelay: opts.MaxRetryDelay,
		OperatorImage: opts.OperatorImage,
		RedisImages:   opts.RedisImages,
	}
	connections := redis.NewPool(redisOpts, reconciler.Wake)
	reconciler.Connections = connections
	// An operator whose CRDs were installed from an older bundle (or by hand) runs without
	// backups rather than not at all: its informers would wait for a kind that is not served.
	if reconciler.BackupsServed, err = backupsServed(cfg, opts.WatchNamespaces); err != nil {
		return nil, err
	}
	if reconciler.NodesReadable, err = nodesReadable(cfg); err != nil {
		return nil, err
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up RedisCluster controller: %w", err)
	}
	if reconciler.BackupsServed {
		backups := &redisbackup.Reconciler{
			Client:        mgr.GetClient(),
			APIReader:     mgr.GetAPIReader(),
			Recorder:      recorderFor("redisbackup-controller"),
			Sources:       reconciler,
			Dial:          RedisDialer(redisOpts),
			Snapshots:     backup.Snapshots{Redis: redisOpts},
			OperatorImage: opts.OperatorImage,
		}
		if err := backups.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up RedisBackup controller: %w", err)
		}
	} else {
		ctrl.Log.WithName("setup").Info("The RedisBackup CRD is not installed, or the operator may not watch RedisBackups: backups and restores are off until it restarts with both")
	}
	if opts.MonitoringNamespace != "" && opts.MetricsAddr != "0" {
		disc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("creating the discovery client: %w", err)
		}
		if err := mgr.Add(&monitoring.Installer{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Discovery: disc,
			Namespace: opts.MonitoringNamespace, Service: opts.MetricsService, Interval: opts.MonitoringInterval,
			Log: ctrl.Log.WithName("monitoring"),
		}); err != nil {
			return nil, fmt.Errorf("adding the monitoring installer: %w", err)
		}
	}
	if opts.ProbeAddr != "" && opts.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding ready check: %w", err)
		}
	}
	return closingManager{Manager: mgr, close: connections.Close}, nil
}

// closingManager closes the Redis connections once the manager has stopped, after every
// reconcile returned. A runnable of its own closed them as soon as the stop began, beside the
// reconcilers (one group, stopped at once): a switchover in flight when the operator's pod was
// evicted (the drain that evicts the primary's pod) lost its connections between the demotion
// and the promotion, and left no primary until the next operator failed over.
type closingManager struct {
	ctrl.Manager
	close func()
}

// Start runs the manager until ctx ends and it has stopped, then closes the connections.
func (m closingManager) Start(ctx context.Context) error {
	defer m.close()
	return m.Manager.Start(ctx)
}
