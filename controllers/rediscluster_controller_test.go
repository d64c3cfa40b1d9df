package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/internal/testenv"
)

// createSample creates config/samples' RedisCluster (sessions, 3 replicas, 7.2) in namespace.
func createSample(t *testing.T, namespace string) *cachev1.RedisCluster {
	t.Helper()
	rc, err := testenv.Sample(namespace)
	require.NoError(t, err)
	require.NoError(t, k8sClient.Create(context.Background(), rc))
	return rc
}

func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// eventuallyStatefulSet waits until the StatefulSet exists and satisfies check, and returns it.
func eventuallyStatefulSet(t *testing.T, namespace, name string, check func(*assert.CollectT, *appsv1.StatefulSet)) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), key(namespace, name), sts))
		check(c, sts)
	}, waitFor, tick)
	return sts
}

// markStatefulSetReady stands in for the StatefulSet controller, which envtest does not run.
func markStatefulSetReady(t *testing.T, sts *appsv1.StatefulSet, ready int32) {
	t.Helper()
	require.NoError(t, testenv.SetStatefulSetReady(context.Background(), k8sClient, sts, ready))
}

// eventuallyReady waits until the RedisCluster reports Ready for its current generation.
func eventuallyReady(t *testing.T, rc *cachev1.RedisCluster) *cachev1.RedisCluster {
	t.Helper()
	got := &cachev1.RedisCluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
		assert.True(c, meta.IsStatusConditionTrue(got.Status.Conditions, cachev1.ConditionReady))
	}, waitFor, tick)
	return got
}

// eventsFor lists the events recorded about the RedisCluster.
func eventsFor(c require.TestingT, rc *cachev1.RedisCluster) []eventsv1.Event {
	list := &eventsv1.EventList{}
	require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(rc.Namespace)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "RedisCluster" && e.Regarding.Name == rc.Name {
			out = append(out, e)
		}
	}
	return out
}

func TestSampleCreatesItsChildren(t *testing.T) {
	// Given an operator watching a namespace
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)

	// When the sample RedisCluster is created
	rc := createSample(t, ns)

	// Then a StatefulSet of 3 redis:7.2 pods is controlled by it
	sts := eventuallyStatefulSet(t, ns, "sessions", func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
	})
	assert.Equal(t, "redis:7.2", sts.Spec.Template.Spec.Containers[0].Image)
	owner := metav1.GetControllerOf(sts)
	require.NotNil(t, owner, "the StatefulSet needs a controller owner reference")
	assert.Equal(t, rc.UID, owner.UID)
	assert.Equal(t, "RedisCluster", owner.Kind)
	assert.True(t, ptr.Deref(owner.BlockOwnerDeletion, false))

	// and so are the two Services and the ConfigMap
	for _, obj := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sessions"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sessions-headless"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sessions-config"}},
	} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, k8sClient.Get(context.Background(), key(ns, obj.GetName()), obj))
			owner := metav1.GetControllerOf(obj)
			require.NotNil(c, owner)
			assert.Equal(c, rc.UID, owner.UID)
		}, waitFor, tick, "%T %s", obj, obj.GetName())
	}
	headless := &corev1.Service{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-headless"), headless))
	assert.Equal(t, corev1.ClusterIPNone, headless.Spec.ClusterIP)

	// and the user is told through Events
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var reasons []string
		for _, e := range eventsFor(c, rc) {
			reasons = append(reasons, e.Reason)
		}
		assert.Contains(c, reasons, cachev1.EventChildCreated)
	}, waitFor, tick)
}

func TestScalingChangesTheStatefulSet(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	eventuallyStatefulSet(t, ns, "sessions", func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
	})

	// When replicas goes from 3 to 5 on the live object
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Replicas = 5
	require.NoError(t, k8sClient.Patch(context.Background(), rc, patch))

	// Then the StatefulSet follows
	eventuallyStatefulSet(t, ns, "sessions", func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(5), ptr.Deref(sts.Spec.Replicas, 0))
	})
}

func TestStatusFollowsTheStatefulSet(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	sts := eventuallyStatefulSet(t, ns, "sessions", func(*assert.CollectT, *appsv1.StatefulSet) {})

	// While no pod is ready, the RedisCluster is not Ready
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &cachev1.RedisCluster{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		require.NotNil(c, ready)
		assert.Equal(c, metav1.ConditionFalse, ready.Status)
		assert.Equal(c, cachev1.ReasonReplicasNotReady, ready.Reason)
		assert.Equal(c, got.Generation, ready.ObservedGeneration)
	}, waitFor, tick)

	// When the StatefulSet reports its 3 pods ready
	markStatefulSetReady(t, sts, 3)

	// Then readyReplicas and the Ready condition follow
	got := eventuallyReady(t, rc)
	assert.Equal(t, int32(3), got.Status.ReadyReplicas)
	ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
	assert.Equal(t, cachev1.ReasonAllReplicasReady, ready.Reason)
	assert.True(t, meta.IsStatusConditionFalse(got.Status.Conditions, cachev1.ConditionDegraded))
	assert.True(t, meta.IsStatusConditionFalse(got.Status.Conditions, cachev1.ConditionProgressing))
}

func TestConvergedReconcileWritesNothing(t *testing.T) {
	// Given a converged, Ready RedisCluster
	ns := newNamespace(t)
	op := startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	sts := eventuallyStatefulSet(t, ns, "sessions", func(*assert.CollectT, *appsv1.StatefulSet) {})
	markStatefulSetReady(t, sts, 3)
	eventuallyReady(t, rc)

	children := []client.Object{
		&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Service{}, &corev1.ConfigMap{}, &cachev1.RedisCluster{},
	}
	names := []string{"sessions", "sessions", "sessions-headless", "sessions-config", "sessions"}
	versions := func() []string {
		var out []string
		for i, obj := range children {
			require.NoError(t, k8sClient.Get(context.Background(), key(ns, names[i]), obj))
			out = append(out, obj.GetResourceVersion())
		}
		return out
	}
	// The operator's own cache must have caught up with its last write before we count.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cached := &cachev1.RedisCluster{}
		require.NoError(c, op.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(rc), cached))
		assert.True(c, meta.IsStatusConditionTrue(cached.Status.Conditions, cachev1.ConditionReady))
	}, waitFor, tick)
	before := versions()
	writesBefore := op.requests.Writes()

	// When it is reconciled again, and again
	reconciler := &controllers.RedisClusterReconciler{
		Client:   op.mgr.GetClient(),
		Scheme:   op.mgr.GetScheme(),
		Recorder: op.mgr.GetEventRecorder("idempotency-test"),
	}
	for range 5 {
		_, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rc)})
		require.NoError(t, err)
	}

	// Then nothing was written and no object changed
	assert.Equal(t, writesBefore, op.requests.Writes(), "write requests by converged reconciles")
	assert.Equal(t, before, versions(), "resourceVersions of the RedisCluster and its children")
}

func TestManualEditOfOwnedFieldIsPutBackAndForeignFieldKept(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	createSample(t, ns)
	sts := eventuallyStatefulSet(t, ns, "sessions", func(*assert.CollectT, *appsv1.StatefulSet) {})

	// When someone scales the StatefulSet by hand and another tool annotates it
	sts.Spec.Replicas = ptr.To[int32](7)
	if sts.Annotations == nil {
		sts.Annotations = map[string]string{}
	}
	sts.Annotations["other-tool.example.com/note"] = "keep me"
	require.NoError(t, k8sClient.Update(context.Background(), sts, client.FieldOwner("kubectl-edit")))

	// Then replicas is put back, and the annotation we do not own stays
	eventuallyStatefulSet(t, ns, "sessions", func(c *assert.CollectT, sts *appsv1.StatefulSet) {
		assert.Equal(c, int32(3), ptr.Deref(sts.Spec.Replicas, 0))
		assert.Equal(c, "keep me", sts.Annotations["other-tool.example.com/note"])
	})
}

func TestInvalidRedisClustersAreRefused(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	tests := []struct {
		name      string
		mutate    func(*cachev1.RedisCluster)
		wantField string
	}{
		{"zero replicas", func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = 0 }, "spec.replicas"},
		{"negative replicas", func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = -1 }, "spec.replicas"},
		{"too many replicas", func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = 101 }, "spec.replicas"},
		{"shell in version", func(rc *cachev1.RedisCluster) { rc.Spec.Version = "latest; rm -rf /" }, "spec.version"},
		{"tag as version", func(rc *cachev1.RedisCluster) { rc.Spec.Version = "latest" }, "spec.version"},
		{"Redis 5", func(rc *cachev1.RedisCluster) { rc.Spec.Version = "5.0" }, "spec.version"},
		{"image with spaces", func(rc *cachev1.RedisCluster) { rc.Spec.Image = "redis:7.2 --evil" }, "spec.image"},
		{"name too long for its Services", func(rc *cachev1.RedisCluster) { rc.Name = strings.Repeat("a", 53) }, "metadata.name"},
		{"name starting with a digit", func(rc *cachev1.RedisCluster) { rc.Name = "1sessions" }, "metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := testenv.RedisCluster(ns, "bad", 3)
			tt.mutate(rc)

			err := k8sClient.Create(context.Background(), rc)

			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
			assert.Contains(t, err.Error(), tt.wantField)
		})
	}
	// A missing spec.replicas is refused too; a typed client cannot omit it, so send raw JSON.
	t.Run("missing replicas", func(t *testing.T) {
		raw := &cachev1.RedisCluster{}
		raw.SetGroupVersionKind(cachev1.GroupVersion.WithKind("RedisCluster"))
		raw.Namespace, raw.Name = ns, "no-replicas"
		body := []byte(`{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"no-replicas"},"spec":{"version":"7.2"}}`)
		err := k8sClient.Patch(context.Background(), raw, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner("test"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.replicas")
	})

	// And nothing was created for them
	list := &appsv1.StatefulSetList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(ns)))
	assert.Empty(t, list.Items)
	rcs := &cachev1.RedisClusterList{}
	require.NoError(t, k8sClient.List(context.Background(), rcs, client.InNamespace(ns)))
	assert.Empty(t, rcs.Items)
}

// managerRole reads the ClusterRole that `make manifests` generates from the RBAC markers.
func managerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.UnmarshalStrict(raw, role))
	return role
}

// operatorWithRole runs the operator as a user that holds only role, bound in namespace.
func operatorWithRole(t *testing.T, role *rbacv1.ClusterRole, namespace string) {
	t.Helper()
	ctx := context.Background()
	user := "system:serviceaccount:redis-operator-system:" + namespace
	role.Name = "redis-operator-" + namespace
	require.NoError(t, k8sClient.Create(ctx, role))
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	require.NoError(t, k8sClient.Create(ctx, binding))
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, binding) })

	authn, err := env.ControlPlane.AddUser(envtest.User{Name: user}, adminCfg)
	require.NoError(t, err)
	startOperator(t, authn.Config(), namespace)
}

func TestOperatorWorksWithOnlyTheGeneratedRole(t *testing.T) {
	ns := newNamespace(t)
	operatorWithRole(t, managerRole(t), ns)

	rc := createSample(t, ns)

	sts := eventuallyStatefulSet(t, ns, "sessions", func(*assert.CollectT, *appsv1.StatefulSet) {})
	for _, name := range []string{"sessions", "sessions-headless"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, k8sClient.Get(context.Background(), key(ns, name), &corev1.Service{}))
		}, waitFor, tick)
	}
	markStatefulSetReady(t, sts, 3)
	eventuallyReady(t, rc)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEmpty(c, eventsFor(c, rc), "the operator may record events")
	}, waitFor, tick)
}

func TestMissingPermissionIsExplainedByAWarningEvent(t *testing.T) {
	// Given the operator without the right to patch Services
	role := managerRole(t)
	for i, rule := range role.Rules {
		if len(rule.APIGroups) == 1 && rule.APIGroups[0] == "" {
			var verbs []string
			for _, v := range rule.Verbs {
				if v != "patch" {
					verbs = append(verbs, v)
				}
			}
			role.Rules[i].Verbs = verbs
		}
	}
	ns := newNamespace(t)
	operatorWithRole(t, role, ns)

	// When a RedisCluster is created
	rc := createSample(t, ns)

	// Then describe shows a Warning that names the missing permission, and the status says why
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var notes []string
		for _, e := range eventsFor(c, rc) {
			if e.Type == corev1.EventTypeWarning && e.Reason == cachev1.EventApplyFailed {
				notes = append(notes, e.Note)
			}
		}
		require.NotEmpty(c, notes)
		assert.Contains(c, notes[0], `cannot patch resource "configmaps"`)
	}, waitFor, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &cachev1.RedisCluster{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
		degraded := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, metav1.ConditionTrue, degraded.Status)
		assert.Equal(c, cachev1.ReasonApplyFailed, degraded.Reason)
		assert.Contains(c, degraded.Message, "forbidden")
	}, waitFor, tick)
}
