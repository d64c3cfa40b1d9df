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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
)

// External access in replication mode, on envtest: the Services spec.expose asks for, which
// select what the in-cluster ones select, changed in place and deleted when it goes. (envtest
// has no kube-proxy: that a client outside reaches Redis through them is the real node's test.)
func TestExposeAddsExternalServicesThatFollowTheRolesAndGoWithIt(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// External access in cluster mode, on envtest: a Service per node, selecting its one pod, with
// Redis's port and the bus port, kept while the RedisCluster is converged (no write) and deleted
// when spec.expose goes. envtest's pods are on no Kubernetes node (no hostIP) and it has no
// kube-proxy: the nodes keep announcing their own addresses here, and what they announce through
// the node ports, and a client outside, are the real node's test (test/e2e/external_cluster_test.go).
func TestInClusterModeExposeGivesEachNodeAServiceOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Given a Ready RedisCluster in cluster mode, 3 shards of 2, exposed on node ports
	e := newShardedCluster(t, "outside", func(rc *cachev1.RedisCluster) {
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
	})

	// Then each of its 6 nodes has a Service of its own, on node ports, publishing it before it
	// is ready (its peers reach it there)
	var names []string
	for _, n := range e.ready.Status.Nodes {
		name := n.Name + "-ext"
		names = append(names, "Service "+name)
		svc := eventuallyService(t, e.ns, name, func(c *assert.CollectT, svc *corev1.Service) {
			assert.Equal(c, corev1.ServiceTypeNodePort, svc.Spec.Type)
		})
		require.Len(t, svc.Spec.Ports, 2)
		assert.NotZero(t, svc.Spec.Ports[0].NodePort, "Redis's port")
		assert.NotZero(t, svc.Spec.Ports[1].NodePort, "the bus port")
		assert.True(t, svc.Spec.PublishNotReadyAddresses)
		assert.Equal(t, e.rc.Name, metav1.GetControllerOf(svc).Name)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{n.Name}, podsSelectedBy(c, e.ns, name))
		}, waitFor, tick)
		// With no hostIP, a node's outside address is not known: it announces its own
		announced, err := redisClient(t, e.node, n.Name, e.password).ConfigGet(ctx, "cluster-announce-*").Result()
		require.NoError(t, err)
		assert.Equal(t, e.node.Server(n.Name).IP, announced["cluster-announce-ip"], n.Name)
		assert.Equal(t, "0", announced["cluster-announce-port"], n.Name)
	}
	require.Len(t, names, 6)
	// and Exposed says so, naming the Services still without an outside address
	exposed := meta.FindStatusCondition(getRC(t, e.rc).Status.Conditions, cachev1.ConditionExposed)
	require.NotNil(t, exposed)
	assert.Equal(t, cachev1.ReasonAddressPending, exposed.Reason)
	assert.Contains(t, exposed.Message, e.rc.Name+"-shard2-1-ext", "every node's Service named")

	// And a converged reconcile writes nothing
	assertHealthChecksWriteNothing(t, e.op, e.rc)
	writes := e.op.requests.Writes()
	reconcileAfresh(t, e.op, e.rc, 3)
	assert.Equal(t, writes, e.op.requests.Writes(), "writes by converged reconciles with a Service per node")

	// When spec.expose is removed
	setExpose(t, e.rc, nil)

	// Then every node's Service is deleted (no node announces one: they may go at once), and an
	// Event names them
	for _, n := range e.ready.Status.Nodes {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := k8sClient.Get(ctx, key(e.ns, n.Name+"-ext"), &corev1.Service{})
			assert.True(c, apierrors.IsNotFound(err), "Service %s-ext: %v", n.Name, err)
		}, waitFor, tick)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var deleted string
		for _, ev := range eventsFor(c, e.rc) {
			if ev.Reason == cachev1.EventChildDeleted {
				deleted += ev.Note
			}
		}
		for _, name := range names {
			assert.Contains(c, deleted, name)
		}
	}, waitFor, tick)
	eventuallyReady(t, e.rc)
}
