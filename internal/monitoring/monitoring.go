// Package monitoring installs the operator's own ServiceMonitor and PrometheusRule in its
// namespace, where the Prometheus Operator's CRDs exist. They are not in the OLM bundle: OLM
// fails a whole InstallPlan when a bundle object's kind is unknown to the cluster, and an
// operator that cannot be installed without Prometheus is worse than one that adds its
// monitoring when it can. So the operator looks for the CRDs at start and every Interval after,
// and applies both objects, owned by its metrics Service: they go when the operator is
// uninstalled.
package monitoring

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed servicemonitor.yaml
	serviceMonitorYAML []byte
	//go:embed prometheusrule.yaml
	prometheusRuleYAML []byte
)

const (
	// GroupVersion is the Prometheus Operator's API.
	GroupVersion = "monitoring.coreos.com/v1"
	// NamePrefix is the operator's objects' prefix, as config/default's kustomize namePrefix
	// and the bundle name them.
	NamePrefix = "redis-operator-"
	// FieldOwner is the operator's field manager for these objects.
	FieldOwner = "redis-operator"
	// DefaultInterval is how often the CRDs are looked for again: a Prometheus Operator
	// installed after this operator is noticed within it. One discovery request each time.
	DefaultInterval = time.Minute
)

// object is one of the monitoring objects, with the plural its CRD serves.
type object struct {
	resource string
	manifest []byte
}

var objects = []object{
	{resource: "servicemonitors", manifest: serviceMonitorYAML},
	{resource: "prometheusrules", manifest: prometheusRuleYAML},
}

// Desired is the object the operator wants in namespace for the manifest, owned by the metrics
// Service: the manifest's name with NamePrefix, in namespace, with a controller reference.
func Desired(manifest []byte, namespace string, owner *corev1.Service) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifest, &u.Object); err != nil {
		return nil, fmt.Errorf("reading the embedded manifest: %w", err)
	}
	u.SetName(NamePrefix + u.GetName())
	u.SetNamespace(namespace)
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}})
	return u, nil
}

// ServiceMonitor and PrometheusRule are the embedded manifests, for tests and docs.
func ServiceMonitor() []byte { return serviceMonitorYAML }
func PrometheusRule() []byte { return prometheusRuleYAML }

// Installer applies the monitoring objects whose CRDs the cluster serves. It runs on the
// leader only.
type Installer struct {
	// Client writes the objects (server-side apply).
	Client client.Client
	// Reader reads the metrics Service, uncached: the manager's cache holds only the
	// RedisClusters' own Services.
	Reader client.Reader
	// Discovery tells which of the CRDs the cluster serves.
	Discovery discovery.DiscoveryInterface
	// Namespace is the operator's own; Service is its metrics Service there.
	Namespace, Service string
	// Interval is how often the CRDs are looked for again (DefaultInterval when 0).
	Interval time.Duration
	Log      logr.Logger
}

// NeedLeaderElection is true: one operator replica writes.
func (i *Installer) NeedLeaderElection() bool { return true }

// Start installs at once, then every Interval, until ctx ends. A failure is logged and tried
// again at the next round: monitoring never stops the operator.
func (i *Installer) Start(ctx context.Context) error {
	interval := i.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	for {
		if err := i.Install(ctx); err != nil {
			i.Log.Error(err, "Could not install the monitoring objects; trying again later", "retryIn", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// Install applies each object whose CRD the cluster serves. Applying what is already there
// changes nothing (server-side apply).
func (i *Installer) Install(ctx context.Context) error {
	served, err := i.servedResources()
	if err != nil || len(served) == 0 {
		return err
	}
	svc := &corev1.Service{}
	if err := i.Reader.Get(ctx, types.NamespacedName{Namespace: i.Namespace, Name: i.Service}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			i.Log.V(1).Info("No metrics Service: nothing to monitor", "service", klog.KRef(i.Namespace, i.Service))
			return nil
		}
		return fmt.Errorf("reading the metrics Service %s/%s: %w", i.Namespace, i.Service, err)
	}
	for _, o := range objects {
		if !served[o.resource] {
			continue
		}
		u, err := Desired(o.manifest, i.Namespace, svc)
		if err != nil {
			return err
		}
		if err := i.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}

// servedResources are the Prometheus Operator's resources the cluster serves; none when its
// API group is not installed.
func (i *Installer) servedResources() (map[string]bool, error) {
	list, err := i.Discovery.ServerResourcesForGroupVersion(GroupVersion)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", GroupVersion, err)
	}
	out := map[string]bool{}
	for _, r := range list.APIResources {
		out[r.Name] = true
	}
	return out, nil
}
