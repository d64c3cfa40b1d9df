package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
)

// The children's phases: those both modes apply (ConfigMap, Services, PodDisruptionBudget),
// replication's StatefulSet (the shards' are in rediscluster_shards.go), and applyChild, how
// every child is applied over apply.go's server-side apply.

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileConfigMap(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	if state.childrenKnown {
		return nil
	}
	desired := resources.DesiredConfigMap(rc)
	return r.applyChild(ctx, rc, state, "ConfigMap", child[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: &corev1.ConfigMap{}, extract: corev1ac.ExtractConfigMap,
	})
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileServices(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	if state.childrenKnown {
		return nil
	}
	services := []*corev1ac.ServiceApplyConfiguration{resources.DesiredHeadlessService(rc), resources.DesiredClientService(rc)}
	if rc.Spec.Cluster == nil {
		// In cluster mode a client reads from replicas through the cluster protocol (READONLY).
		services = append(services, resources.DesiredReplicasService(rc))
	}
	for _, desired := range services {
		err := r.applyChild(ctx, rc, state, "Service", child[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
			desired: desired, name: nameOf(rc, *desired.Name), live: &corev1.Service{}, extract: corev1ac.ExtractService,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcilePodDisruptionBudget(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	if state.childrenKnown {
		return nil
	}
	desired := resources.DesiredPodDisruptionBudget(rc)
	return r.applyChild(ctx, rc, state, "PodDisruptionBudget", child[*policyv1.PodDisruptionBudget, *policyv1ac.PodDisruptionBudgetApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: &policyv1.PodDisruptionBudget{}, extract: policyv1ac.ExtractPodDisruptionBudget,
	})
}

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch

func (r *RedisClusterReconciler) reconcileStatefulSet(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState) error {
	desired := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{
		Replicas:      statefulSetReplicas(rc),
		ConfigHash:    resources.ConfigHash(rc),
		OperatorImage: r.OperatorImage,
		Restore:       state.restore,
		RedisImages:   r.RedisImages,
	})
	live, err := r.applyStatefulSet(ctx, rc, state, desired)
	if err != nil {
		return err
	}
	state.replication.statefulSet = live
	if !state.childrenKnown {
		// The last child: every one of them matched the spec at this version of the RedisCluster.
		r.clusterState(rc).children.compared(rc.ResourceVersion)
	}
	return nil
}

// applyStatefulSet applies a StatefulSet, or only reads it (its status is needed, for the
// RedisCluster's) while the children are known to match; nil when it does not exist yet.
func (r *RedisClusterReconciler) applyStatefulSet(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState,
	desired *appsv1ac.StatefulSetApplyConfiguration) (*appsv1.StatefulSet, error) {
	live := &appsv1.StatefulSet{}
	if state.childrenKnown {
		if err := r.Get(ctx, nameOf(rc, *desired.Name), live); err != nil {
			return nil, fmt.Errorf("reading StatefulSet %s: %w", *desired.Name, err)
		}
		return live, nil
	}
	if err := r.applyChild(ctx, rc, state, "StatefulSet", child[*appsv1.StatefulSet, *appsv1ac.StatefulSetApplyConfiguration]{
		desired: desired, name: nameOf(rc, *desired.Name), live: live, extract: extractStatefulSet,
	}); err != nil {
		return nil, err
	}
	if live.UID == "" {
		return nil, nil
	}
	return live, nil
}

// extractStatefulSet is what our field manager owns of a StatefulSet, without the status the
// API server gives each claim template (phase Pending): the templates are an atomic list, so
// that status is counted as ours, though no apply sets it.
func extractStatefulSet(live *appsv1.StatefulSet, fieldManager string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	owned, err := appsv1ac.ExtractStatefulSet(live, fieldManager)
	if err != nil || owned.Spec == nil {
		return owned, err
	}
	for i := range owned.Spec.VolumeClaimTemplates {
		owned.Spec.VolumeClaimTemplates[i].Status = nil
	}
	return owned, nil
}

// statefulSetReplicas is spec.replicas, except that the primary's pod is kept until a
// switchover has moved the primary to a pod that stays.
func statefulSetReplicas(rc *cachev1.RedisCluster) int32 {
	ordinal, ok := resources.PodOrdinal(rc.Status.Primary)
	if !ok || int32(ordinal) < rc.Spec.Replicas {
		return rc.Spec.Replicas
	}
	return int32(ordinal) + 1
}

// applyChild applies one child when it drifted, and tells the user through an Event what
// changed or why it could not.
func (r *RedisClusterReconciler) applyChild(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState,
	kind string, ch interface {
		apply(context.Context, client.Client) (applyResult, error)
		objectName() string
	}) error {
	// Bounded: an API server whose etcd stopped answers no write, and a phase that waited on
	// one would hold back the phases that keep Redis served (a failover) until it gave up.
	wctx, cancel := context.WithTimeout(ctx, childWriteTimeout)
	defer cancel()
	result, err := ch.apply(wctx, r.Client)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, ch.objectName(), err)
	}
	switch result {
	case created:
		state.changed = true
		state.created = append(state.created, kind+" "+ch.objectName())
		log.FromContext(ctx).Info("Created child", "kind", kind, "child", klog.KRef(rc.Namespace, ch.objectName()))
	case updated:
		state.changed = true
		state.updated = append(state.updated, kind+" "+ch.objectName())
		log.FromContext(ctx).Info("Updated child", "kind", kind, "child", klog.KRef(rc.Namespace, ch.objectName()))
	}
	return nil
}

// childWriteTimeout bounds the write of one child: it takes milliseconds when the API server
// answers.
const childWriteTimeout = 5 * time.Second

// recordChildEvents tells the user which children this reconcile created and which it changed,
// in one Event each. The event recorder folds Events of one reason into a series that keeps
// only the first message, so one Event per child would hide all but the first child's name.
func (r *RedisClusterReconciler) recordChildEvents(rc *cachev1.RedisCluster, state *reconcileState) {
	if len(state.created) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildCreated, "Apply", "Created %s", strings.Join(state.created, ", "))
	}
	if len(state.updated) > 0 {
		r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventChildUpdated, "Apply", "Updated %s to match the spec", strings.Join(state.updated, ", "))
	}
}

func nameOf(rc *cachev1.RedisCluster, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: rc.Namespace, Name: name}
}
