package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	goredis "github.com/redis/go-redis/v9"
	policyv1 "k8s.io/api/policy/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/redis"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
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

// runLocalNode runs the namespace's pods as local redis-server processes until the test ends:
// envtest has no StatefulSet controller and no kubelet (see testenv.LocalNode).
func runLocalNode(t *testing.T, namespace string) *testenv.LocalNode {
	t.Helper()
	return runLocalNodeWith(t, namespace)
}

// runLocalNodeWith is runLocalNode with the node tuned first.
func runLocalNodeWith(t *testing.T, namespace string, tune ...func(*testenv.LocalNode)) *testenv.LocalNode {
	t.Helper()
	return testenv.RunLocalNode(t, k8sClient, namespace, tune...)
}

// eventuallyReady waits until the RedisCluster reports Ready for its current generation.
func eventuallyReady(t *testing.T, rc *cachev1.RedisCluster) *cachev1.RedisCluster {
	t.Helper()
	return eventuallyReadyWithin(t, rc, waitFor)
}

// eventuallyReadyWithin is the RedisCluster once Ready for its generation, within that long.
func eventuallyReadyWithin(t *testing.T, rc *cachev1.RedisCluster, within time.Duration) *cachev1.RedisCluster {
	t.Helper()
	got := &cachev1.RedisCluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(rc), got))
		assert.True(c, testenv.Ready(got), "generation %d, observed %d, conditions: %+v", got.Generation, got.Status.ObservedGeneration, got.Status.Conditions)
	}, within, tick)
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
	t.Parallel()
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

	// and so are the Services, the ConfigMap, the PodDisruptionBudget and the password Secrets
	for _, obj := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sessions"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sessions-replicas"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sessions-headless"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sessions-config"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "sessions"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sessions-auth"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sessions-auth-conf"}},
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
	generated := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-auth"), generated))
	assert.Len(t, generated.Data["password"], 32, "a random password is generated")
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(context.Background(), key(ns, "sessions-config"), cm))
	assert.NotContains(t, cm.Data["redis.conf"], string(generated.Data["password"]), "the password is never in the ConfigMap")

	// and the user is told through one Event that names every child created
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var created []string
		for _, e := range eventsFor(c, rc) {
			if e.Reason == cachev1.EventChildCreated {
				created = append(created, e.Note)
			}
		}
		require.Len(c, created, 1)
		assert.Equal(c, "Created Secret sessions-auth (a random password), Secret sessions-operator (the operator's own password), Secret sessions-auth-conf, ConfigMap sessions-config, "+
			"Service sessions-headless, Service sessions, Service sessions-replicas, PodDisruptionBudget sessions, StatefulSet sessions",
			created[0])
	}, waitFor, tick)
}

func TestAGeneratedPasswordSecretAlreadyThereIsKept(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)

	// Given the password Secret a RedisCluster would generate is already there (an operator
	// that stopped after creating it, before it wrote the status)
	existing := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sessions-auth"},
		Data:       map[string][]byte{"password": []byte("kept-password")},
	}
	require.NoError(t, k8sClient.Create(context.Background(), existing))

	// When the RedisCluster is created
	createSample(t, ns)

	// Then its password is the one there, in the file the nodes include
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conf := &corev1.Secret{}
		require.NoError(c, k8sClient.Get(context.Background(), key(ns, "sessions-auth-conf"), conf))
		assert.True(c, strings.HasPrefix(string(conf.Data[resources.AuthConfKey]), resources.AuthConf("kept-password")),
			"the default user's password, then the operator's own user")
	}, waitFor, tick)
	assert.Equal(t, "kept-password", secretValue(t, ns, "sessions-auth", "password"))
}

func TestScalingChangesTheStatefulSet(t *testing.T) {
	t.Parallel()
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

func TestSampleBecomesReadyWithReplication(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)

	// While no pod runs, the RedisCluster is not Ready
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := getRC(c, rc)
		ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
		require.NotNil(c, ready)
		assert.Equal(c, metav1.ConditionFalse, ready.Status)
		assert.Equal(c, cachev1.ReasonReplicasNotReady, ready.Reason)
		assert.Equal(c, got.Generation, ready.ObservedGeneration)
		assert.True(c, meta.IsStatusConditionFalse(got.Status.Conditions, cachev1.ConditionPersistent), "emptyDir is not persistent")
	}, waitFor, tick)

	// When the pods run
	node := runLocalNode(t, ns)

	// Then it becomes Ready: one primary, two caught-up replicas
	got := eventuallyReady(t, rc)
	assert.Equal(t, int32(3), got.Status.ReadyReplicas)
	assert.Equal(t, "sessions-0", got.Status.Primary)
	assert.Equal(t, []cachev1.NodeStatus{
		{Name: "sessions-0", Role: cachev1.RolePrimary, State: cachev1.NodeServing},
		{Name: "sessions-1", Role: cachev1.RoleReplica, State: cachev1.NodeServing},
		{Name: "sessions-2", Role: cachev1.RoleReplica, State: cachev1.NodeServing},
	}, got.Status.Nodes)
	ready := meta.FindStatusCondition(got.Status.Conditions, cachev1.ConditionReady)
	assert.Equal(t, cachev1.ReasonAllReplicasReady, ready.Reason)
	assert.True(t, meta.IsStatusConditionFalse(got.Status.Conditions, cachev1.ConditionDegraded))

	// and the pods carry the role labels the Services select on
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		roles := map[string]string{}
		pods := &corev1.PodList{}
		require.NoError(c, k8sClient.List(context.Background(), pods, client.InNamespace(ns)))
		for _, p := range pods.Items {
			roles[p.Name] = p.Labels["cache.example.com/role"]
		}
		assert.Equal(c, map[string]string{"sessions-0": "primary", "sessions-1": "replica", "sessions-2": "replica"}, roles)
	}, waitFor, tick)

	// and a key written on the primary is read on a replica, with the generated password
	password := secretValue(t, ns, "sessions-auth", "password")
	primary := redisClient(t, node, "sessions-0", password)
	require.NoError(t, primary.Set(context.Background(), "greeting", "hello", 0).Err())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := redisClient(t, node, "sessions-2", password).Get(context.Background(), "greeting").Result()
		assert.NoError(c, err)
		assert.Equal(c, "hello", v)
	}, waitFor, tick)
	// Without the password Redis refuses.
	assert.Error(t, redisClient(t, node, "sessions-0", "").Ping(context.Background()).Err())
}

func secretValue(t *testing.T, ns, name, key string) string {
	t.Helper()
	s := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s))
	return string(s.Data[key])
}

func redisClient(t *testing.T, node *testenv.LocalNode, pod, password string) *goredis.Client {
	t.Helper()
	server := node.Server(pod)
	require.NotNil(t, server, "pod %s runs no Redis", pod)
	c := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConvergedReconcileWritesNothing(t *testing.T) {
	t.Parallel()
	// Given a converged, Ready RedisCluster
	ns := newNamespace(t)
	op := startOperator(t, adminCfg, ns)
	rc := createSample(t, ns)
	runLocalNode(t, ns)
	eventuallyReady(t, rc)

	children := []client.Object{
		&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Service{}, &corev1.Service{}, &corev1.ConfigMap{},
		&corev1.Secret{}, &corev1.Secret{}, &policyv1.PodDisruptionBudget{}, &cachev1.RedisCluster{},
		&corev1.Pod{}, &corev1.Pod{}, &corev1.Pod{},
	}
	names := []string{"sessions", "sessions", "sessions-replicas", "sessions-headless", "sessions-config",
		"sessions-auth", "sessions-auth-conf", "sessions", "sessions", "sessions-0", "sessions-1", "sessions-2"}
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

	// When it is reconciled again and again: by its periodic health check, and directly
	time.Sleep(3 * controllers.DefaultCheckInterval)
	reconcileAfresh(t, op, rc, 5)

	// Then nothing was written and no object changed
	assert.Equal(t, writesBefore, op.requests.Writes(), "write requests by converged reconciles and health checks")
	assert.Equal(t, before, versions(), "resourceVersions of the RedisCluster and its children")
}

// reconcileAfresh reconciles the RedisCluster times times with a reconciler of its own beside the
// operator's, with none of its memory: it compares every child with the spec.
func reconcileAfresh(t *testing.T, op *runningOperator, rc *cachev1.RedisCluster, times int) {
	t.Helper()
	reconciler := &controllers.RedisClusterReconciler{
		Client:    op.mgr.GetClient(),
		APIReader: op.mgr.GetAPIReader(),
		Recorder:  op.mgr.GetEventRecorder("idempotency-test"),
		Dial:      operator.RedisDialer(redis.Options{Timeout: time.Second}),
	}
	for range times {
		_, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rc)})
		require.NoError(t, err)
	}
}

func TestManualEditOfOwnedFieldIsPutBackAndForeignFieldKept(t *testing.T) {
	t.Parallel()
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
	runLocalNode(t, ns)

	// Everything, the Secrets and the pod labels included, works with that role alone.
	got := eventuallyReady(t, rc)
	assert.Equal(t, "sessions-0", got.Status.Primary)
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
		assert.Contains(c, notes[0], `cannot patch resource "secrets"`)
	}, waitFor, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		degraded := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, degraded)
		assert.Equal(c, metav1.ConditionTrue, degraded.Status)
		assert.Equal(c, cachev1.ReasonApplyFailed, degraded.Reason)
		assert.Contains(c, degraded.Message, "forbidden")
	}, waitFor, tick)
}
