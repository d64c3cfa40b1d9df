package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
)

// External access in replication mode, on envtest: the Services spec.expose asks for, which
// select what the in-cluster ones select, changed in place and deleted when it goes. (envtest
// has no kube-proxy: that a client outside reaches Redis through them is the real node's test.)
func TestExposeAddsExternalServicesThatFollowTheRolesAndGoWithIt(t *testing.T) {
	// Given a Ready RedisCluster of 3 redis-server nodes
	ns := newNamespace(t)
	op := startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	runLocalNode(t, ns)
	rc = eventuallyReady(t, rc)

	// When spec.expose asks for NodePort Services
	setExpose(t, rc, &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort})

	// Then sessions-ext selects the primary, sessions-ext-ro the two replicas, each on a node port
	external := eventuallyService(t, ns, "sessions-ext", func(c *assert.CollectT, svc *corev1.Service) {
		assert.Equal(c, corev1.ServiceTypeNodePort, svc.Spec.Type)
	})
	nodePort := external.Spec.Ports[0].NodePort
	assert.NotZero(t, nodePort, "Kubernetes gave it a node port")
	assert.Equal(t, rc.UID, metav1.GetControllerOf(external).UID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		current := &cachev1.RedisCluster{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), current))
		assert.Equal(c, []string{current.Status.Primary}, podsSelectedBy(c, ns, "sessions-ext"))
		assert.Len(c, podsSelectedBy(c, ns, "sessions-ext-ro"), 2)
		assert.NotContains(c, podsSelectedBy(c, ns, "sessions-ext-ro"), current.Status.Primary)
	}, waitFor, tick)
	inCluster := &corev1.Service{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions"), inCluster))
	assert.Equal(t, corev1.ServiceTypeClusterIP, inCluster.Spec.Type, "the in-cluster Service does not change")

	// and a converged reconcile writes nothing (a fresh reconciler compares every child)
	assertHealthChecksWriteNothing(t, op, rc)
	writes := op.requests.Writes()
	reconcileAfresh(t, op, rc, 3)
	assert.Equal(t, writes, op.requests.Writes(), "writes by converged reconciles with external Services")

	// When the type becomes LoadBalancer, with an address pool's annotation and source ranges
	setExpose(t, rc, &cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer,
		Annotations:              map[string]string{"metallb.universe.tf/address-pool": "redis"},
		LoadBalancerSourceRanges: []string{"192.0.2.0/24"}})

	// Then the same Services change in place
	for _, name := range []string{"sessions-ext", "sessions-ext-ro"} {
		svc := eventuallyService(t, ns, name, func(c *assert.CollectT, svc *corev1.Service) {
			assert.Equal(c, corev1.ServiceTypeLoadBalancer, svc.Spec.Type)
			assert.Equal(c, []string{"192.0.2.0/24"}, svc.Spec.LoadBalancerSourceRanges)
			assert.Equal(c, "redis", svc.Annotations["metallb.universe.tf/address-pool"])
		})
		if name == "sessions-ext" {
			assert.Equal(t, external.UID, svc.UID, "changed, not replaced")
		}
	}

	// When spec.expose is removed
	setExpose(t, rc, nil)

	// Then both Services are deleted, and one Event says so
	for _, name := range []string{"sessions-ext", "sessions-ext-ro"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := k8sClient.Get(context.Background(), key(ns, name), &corev1.Service{})
			assert.True(c, apierrors.IsNotFound(err), "Service %s: %v", name, err)
		}, waitFor, tick)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var deleted []string
		for _, e := range eventsFor(c, rc) {
			if e.Reason == cachev1.EventChildDeleted {
				deleted = append(deleted, e.Note)
			}
		}
		assert.Equal(c, []string{"Deleted Service sessions-ext, Service sessions-ext-ro: the spec no longer asks for it"}, deleted)
	}, waitFor, tick)
	eventuallyReady(t, rc)
}

// TestRemovingExposeLeavesAServiceOfTheSameNameItDoesNotControl: a Service named as an external
// one but made by someone else is not the operator's to delete.
func TestRemovingExposeLeavesAServiceOfTheSameNameItDoesNotControl(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions-ext", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 6379}}},
	}
	require.NoError(t, k8sClient.Create(context.Background(), theirs))

	// When a RedisCluster without spec.expose has its Services reconciled (its StatefulSet, a
	// later phase, is there) and reconciled again
	createSample(t, ns)
	eventuallyStatefulSet(t, ns, "sessions", func(*assert.CollectT, *appsv1.StatefulSet) {})
	time.Sleep(2 * controllers.DefaultCheckInterval)

	// Then their Service is still there, unchanged
	kept := &corev1.Service{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-ext"), kept))
	assert.Equal(t, theirs.UID, kept.UID)
	assert.Nil(t, metav1.GetControllerOf(kept))
}

// setExpose sets spec.expose of the RedisCluster (nil removes it).
func setExpose(t *testing.T, rc *cachev1.RedisCluster, expose *cachev1.ExposeSpec) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		current := &cachev1.RedisCluster{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), current))
		current.Spec.Expose = expose
		require.NoError(c, k8sClient.Update(context.Background(), current))
	}, waitFor, tick)
}

// eventuallyService waits until the Service exists and satisfies check, and returns it.
func eventuallyService(t *testing.T, namespace, name string, check func(*assert.CollectT, *corev1.Service)) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), key(namespace, name), svc))
		check(c, svc)
	}, waitFor, tick, "Service %s", name)
	return svc
}

// podsSelectedBy names the pods the Service's selector selects, as its endpoints would.
func podsSelectedBy(c *assert.CollectT, namespace, service string) []string {
	svc := &corev1.Service{}
	require.NoError(c, k8sClient.Get(context.Background(), key(namespace, service), svc))
	pods := &corev1.PodList{}
	require.NoError(c, k8sClient.List(context.Background(), pods, client.InNamespace(namespace), client.MatchingLabels(svc.Spec.Selector)))
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}
