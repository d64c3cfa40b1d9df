// Package controllers holds the RedisCluster reconciler: it applies the children that the
// builders in internal/resources describe, observes them, and writes the RedisCluster's status.
package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
)

// RedisClusterReconciler makes a RedisCluster's children match its spec and reports what it sees.
type RedisClusterReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder recorder.EventRecorder
}

// reconcileState is what one reconcile learns, from the phases to the status.
type reconcileState struct {
	statefulSet *appsv1.StatefulSet
	// changed is true when this reconcile created or changed a child.
	changed bool
	// applyErr is the first child that could not be applied.
	applyErr error
}

// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/status,verbs=patch
// +kubebuilder:rbac:groups=cache.example.com,resources=redisclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile applies the children of one RedisCluster, then writes its status once.
func (r *RedisClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rc := &cachev1.RedisCluster{}
	if err := r.Get(ctx, req.NamespacedName, rc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rc.DeletionTimestamp.IsZero() {
		// The garbage collector removes the children through their owner references.
		return ctrl.Result{}, nil
	}

	original := rc.DeepCopy()
	state := &reconcileState{}
	phases := []struct {
		name string
		run  func(context.Context, *cachev1.RedisCluster, *reconcileState) error
	}{
		{"ConfigMap", r.reconcileConfigMap},
		{"Services", r.reconcileServices},
		{"StatefulSet", r.reconcileStatefulSet},
	}
	for _, phase := range phases {
		if err := phase.run(ctx, rc, state); err != nil {
			state.applyErr = err
			log.FromContext(ctx).Error(err, "Reconcile phase failed", "phase", phase.name)
			break
		}
	}

	setStatus(rc, state)
	if err := r.patchStatus(ctx, original, rc); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, state.applyErr
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileConfigMap(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	desired := resources.DesiredConfigMap(rc)
	return r.applyChild(ctx, rc, state, "ConfigMap", child[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: &corev1.ConfigMap{}, extract: corev1ac.ExtractConfigMap,
	})
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileServices(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	for _, desired := range []*corev1ac.ServiceApplyConfiguration{
		resources.DesiredHeadlessService(rc),
		resources.DesiredClientService(rc),
	} {
		err := r.applyChild(ctx, rc, state, "Service", child[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
			desired: desired, name: nameOf(rc, *desired.Name), live: &corev1.Service{}, extract: corev1ac.ExtractService,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileStatefulSet(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	desired := resources.DesiredStatefulSet(rc)
	live := &appsv1.StatefulSet{}
	err := r.applyChild(ctx, rc, state, "StatefulSet", child[*appsv1.StatefulSet, *appsv1ac.StatefulSetApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: live, extract: appsv1ac.ExtractStatefulSet,
	})
	if err != nil {
		return err
	}
	if live.UID != "" {
		state.statefulSet = live
	}
	return nil
}

// applyChild applies one child when it drifted, and tells the user through an Event what
// changed or why it could not.
func (r *RedisClusterReconciler) applyChild(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState,
	kind string, ch interface {
		apply(context.Context, client.Client) (applyResult, error)
		objectName() string
	}) error {
	result, err := ch.apply(ctx, r.Client)
	if err != nil {
		err = fmt.Errorf("applying %s %s: %w", kind, ch.objectName(), err)
		r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, cachev1.EventApplyFailed, "Apply", "%s", err.Error())
		return err
	}
	switch result {
	case created:
		state.changed = true
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildCreated, "Apply", "Created %s %s", kind, ch.objectName())
		log.FromContext(ctx).Info("Created child", "kind", kind, "child", klog.KRef(rc.Namespace, ch.objectName()))
	case updated:
		state.changed = true
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildUpdated, "Apply", "Updated %s %s to match the spec", kind, ch.objectName())
		log.FromContext(ctx).Info("Updated child", "kind", kind, "child", klog.KRef(rc.Namespace, ch.objectName()))
	}
	return nil
}

func nameOf(rc *cachev1.RedisCluster, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: rc.Namespace, Name: name}
}

// SetupWithManager watches RedisClusters and the children they own.
func (r *RedisClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&cachev1.RedisCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Named("rediscluster").
		Complete(r)
}
