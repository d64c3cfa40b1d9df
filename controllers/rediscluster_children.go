package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
)

// The children's phases both modes have (ConfigMap, Services, PodDisruptionBudget; the modes'
// StatefulSets are in packages replication and clustermode), each applied through
// scope.Apply (server-side apply, written only on drift), and what says whether they need
// comparing with the spec at all (childrenSeen).

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch

func reconcileConfigMap(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	if state.ChildrenKnown {
		return nil
	}
	desired := resources.DesiredConfigMap(rc)
	return scope.Apply(ctx, &state.Cluster, "ConfigMap", scope.Child[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
		Desired: desired, Name: nameOf(rc, *desired.Name), Live: &corev1.ConfigMap{}, Extract: corev1ac.ExtractConfigMap,
	})
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete

// reconcileServices applies the Services (unless the children are known to match the spec) and
// reads where clients outside dial the external ones.
func reconcileServices(ctx context.Context, state *reconcileState) error {
	if !state.ChildrenKnown {
		if err := applyServices(ctx, state); err != nil {
			return err
		}
	}
	return readExternalServices(ctx, state)
}

// applyServices applies the in-cluster Services and spec.expose's, and deletes the external
// ones spec.expose no longer asks for.
func applyServices(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	services := []*corev1ac.ServiceApplyConfiguration{resources.DesiredHeadlessService(rc), resources.DesiredClientService(rc)}
	if rc.Spec.Cluster == nil {
		// In cluster mode a client reads from replicas through the cluster protocol (READONLY).
		services = append(services, resources.DesiredReplicasService(rc))
	}
	external := resources.DesiredExternalServices(rc)
	services = append(services, external...)
	for _, desired := range services {
		err := scope.Apply(ctx, &state.Cluster, "Service", scope.Child[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
			Desired: desired, Name: nameOf(rc, *desired.Name), Live: &corev1.Service{}, Extract: corev1ac.ExtractService,
		})
		if err != nil {
			return err
		}
	}
	if len(external) == 0 {
		return deleteExternalServices(ctx, state)
	}
	return nil
}

// readExternalServices records, in replication mode with spec.expose, where clients outside dial
// the external Services (the Exposed condition), from the cache at every reconcile: a load
// balancer gives its address after the Service is applied. A Service the cache does not hold yet
// was just applied, of spec.expose's type.
func readExternalServices(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	if rc.Spec.Expose == nil || rc.Spec.Cluster != nil {
		return nil
	}
	outside := []resources.OutsideAddress{}
	for _, name := range resources.ExternalServiceNames(rc) {
		svc := &corev1.Service{}
		if err := state.Client.Get(ctx, nameOf(rc, name), svc); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading Service %s: %w", name, err)
			}
			svc.Name, svc.Spec.Type = name, corev1.ServiceType(rc.Spec.Expose.Type)
		}
		outside = append(outside, resources.ExternalOutside(svc))
	}
	state.Outside = outside
	return nil
}

// deleteExternalServices deletes the external Services of a RedisCluster without spec.expose
// (it was removed): a port or an address open to the outside that the spec no longer asks for
// is closed. Only Services this RedisCluster controls; a user's of the same name is left.
func deleteExternalServices(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	for _, name := range resources.ExternalServiceNames(rc) {
		svc := &corev1.Service{}
		if err := state.Client.Get(ctx, nameOf(rc, name), svc); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading Service %s: %w", name, err)
		}
		if !metav1.IsControlledBy(svc, rc) {
			continue
		}
		if err := state.Client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Service %s (spec.expose was removed): %w", name, err)
		}
		state.Deleted(ctx, "Service", svc)
	}
	return nil
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch

func reconcilePodDisruptionBudget(ctx context.Context, state *reconcileState) error {
	rc := state.RC
	if state.ChildrenKnown {
		return nil
	}
	desired := resources.DesiredPodDisruptionBudget(rc)
	return scope.Apply(ctx, &state.Cluster, "PodDisruptionBudget", scope.Child[*policyv1.PodDisruptionBudget, *policyv1ac.PodDisruptionBudgetApplyConfiguration]{
		Desired: desired, Name: nameOf(rc, *desired.Name), Live: &policyv1.PodDisruptionBudget{}, Extract: policyv1ac.ExtractPodDisruptionBudget,
	})
}

// recordChildEvents tells the user which children this reconcile created and which it changed,
// in one Event each. The event recorder folds Events of one reason into a series that keeps
// only the first message, so one Event per child would hide all but the first child's name.
func (r *RedisClusterReconciler) recordChildEvents(rc *cachev1.RedisCluster, state *reconcileState) {
	if len(state.Applied.Created) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildCreated, "Apply", "Created %s", strings.Join(state.Applied.Created, ", "))
	}
	if len(state.Applied.Updated) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildUpdated, "Apply", "Updated %s to match the spec", strings.Join(state.Applied.Updated, ", "))
	}
	if len(state.Applied.Deleted) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildDeleted, "Delete", "Deleted %s: the spec no longer asks for it", strings.Join(state.Applied.Deleted, ", "))
	}
}

func nameOf(rc *cachev1.RedisCluster, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: rc.Namespace, Name: name}
}

// childrenSeen says whether a RedisCluster's children (those built from the RedisCluster
// alone) were all found matching its spec at a resourceVersion of it, with no change to any of
// them since: their watches report every change (childEvents). While both hold, the health
// check, which reconciles every RedisCluster every second, does not read them again.
type childrenSeen struct {
	mu sync.Mutex
	// at is the RedisCluster's resourceVersion when every child last matched; empty when a
	// comparison is needed.
	at string
	// changedSince is true when a child changed since the last comparison began.
	changedSince bool
}

// unchanged is true when the children matched at this resourceVersion and none changed since.
// Otherwise a comparison begins: a child that changes from now on is compared again next time.
func (c *childrenSeen) unchanged(resourceVersion string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at != "" && c.at == resourceVersion && !c.changedSince {
		return true
	}
	c.at, c.changedSince = "", false
	return false
}

// compared records that every child matched at resourceVersion, unless one changed meanwhile.
func (c *childrenSeen) compared(resourceVersion string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.changedSince {
		c.at = resourceVersion
	}
}

// changed records that a child changed (or went).
func (c *childrenSeen) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changedSince = true
}
