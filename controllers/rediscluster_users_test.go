package controllers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/testenv"
)

// userClient is a client of a pod's Redis logged in as an ACL user.
func userClient(t *testing.T, node *testenv.LocalNode, pod, user, password string) *goredis.Client {
	t.Helper()
	server := node.Server(pod)
	require.NotNil(t, server, "pod %s runs no Redis", pod)
	c := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Username: user, Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// loggedIn reads a key the user may read (app:probe), so that only a refused login fails.
func loggedIn(c *goredis.Client) error {
	if err := c.Get(context.Background(), "app:probe").Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	return nil
}

func TestUsersCanDoWhatTheirRulesAllowAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.SecretResync = time.Second })
	for name, pw := range map[string]string{"app-password": "app-pw-1", "reports-password": "reports-pw-1"} {
		require.NoError(t, k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data: map[string][]byte{"password": []byte(pw)}}))
	}
	rc := testenv.RedisCluster(ns, "sessions", 2)
	rc.Spec.Users = []cachev1.UserSpec{
		{Name: "app", PasswordSecretRef: cachev1.SecretKeyRef{Name: "app-password"}, Rules: "~app:* +@read +@write -@dangerous"},
		{Name: "reports", PasswordSecretRef: cachev1.SecretKeyRef{Name: "reports-password"}, Rules: "~* +@read"},
	}
	require.NoError(t, k8sClient.Create(ctx, rc))
	node := runLocalNodeWith(t, ns, func(n *testenv.LocalNode) { n.VolumeSync = 200 * time.Millisecond })
	rc = eventuallyReady(t, rc)
	pods := []string{"sessions-0", "sessions-1"}

	// Then on every node each user may do what its rules allow and nothing else
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, pod := range pods {
			assert.NoError(c, loggedIn(userClient(t, node, pod, "app", "app-pw-1")), pod)
		}
	}, waitFor, tick)
	app := userClient(t, node, "sessions-0", "app", "app-pw-1")
	require.NoError(t, app.Set(ctx, "app:1", "v", 0).Err())
	assert.ErrorContains(t, app.Set(ctx, "other:1", "v", 0).Err(), "NOPERM", "a key outside ~app:*")
	assert.ErrorContains(t, app.FlushAll(ctx).Err(), "NOPERM", "-@dangerous")
	reports := userClient(t, node, "sessions-1", "reports", "reports-pw-1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := reports.Get(ctx, "app:1").Result()
		assert.NoError(c, err)
		assert.Equal(c, "v", v, "read on the replica")
	}, waitFor, tick)
	assert.ErrorContains(t, userClient(t, node, "sessions-0", "reports", "reports-pw-1").Set(ctx, "x", "v", 0).Err(), "NOPERM")
	assert.ErrorContains(t, loggedIn(userClient(t, node, "sessions-0", "app", "wrong")), "WRONGPASS")

	// When a user's rules change and another user is removed from the spec: live, on every node
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Users = []cachev1.UserSpec{{Name: "app", PasswordSecretRef: cachev1.SecretKeyRef{Name: "app-password"}, Rules: "~app:* +get"}}
	require.NoError(t, k8sClient.Patch(ctx, rc, patch))
	for _, pod := range pods {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.ErrorContains(c, userClient(t, node, pod, "app", "app-pw-1").Set(ctx, "app:2", "v", 0).Err(), "NOPERM")
			assert.ErrorContains(c, loggedIn(userClient(t, node, pod, "reports", "reports-pw-1")), "WRONGPASS", "reports is deleted")
		}, waitFor, tick, pod)
	}

	// And a node that restarts has the users from its configuration
	eventuallyReady(t, rc)
	require.NoError(t, node.Server("sessions-1").Restart())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := userClient(t, node, "sessions-1", "app", "app-pw-1").Get(ctx, "app:1").Result()
		assert.NoError(c, err)
		assert.Equal(c, "v", v)
	}, waitFor, tick)
}

func TestAUserRedisRefusesIsExplainedAndTheOthersAreApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns)
	require.NoError(t, k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw", Namespace: ns},
		Data: map[string][]byte{"password": []byte("pw-1")}}))
	rc := testenv.RedisCluster(ns, "sessions", 2)
	rc.Spec.Users = []cachev1.UserSpec{
		{Name: "good", PasswordSecretRef: cachev1.SecretKeyRef{Name: "pw"}, Rules: "~* +get"},
		{Name: "typo", PasswordSecretRef: cachev1.SecretKeyRef{Name: "pw"}, Rules: "~* +gett"},
		{Name: "lost", PasswordSecretRef: cachev1.SecretKeyRef{Name: "no-such-secret"}, Rules: "~* +get"},
	}
	require.NoError(t, k8sClient.Create(ctx, rc))
	node := runLocalNode(t, ns)

	// Then the status names each user that could not be applied, and why
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := meta.FindStatusCondition(getRC(c, rc).Status.Conditions, cachev1.ConditionDegraded)
		require.NotNil(c, cond)
		assert.Equal(c, cachev1.ReasonUserRejected, cond.Reason)
		assert.Contains(c, cond.Message, "user typo")
		assert.Contains(c, cond.Message, "gett")
		assert.Contains(c, cond.Message, "user lost: password Secret no-such-secret not found")
	}, waitFor, tick)
	// and the others work, the cluster serves, and a node that restarts starts (the file lists
	// only what Redis took)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, loggedIn(userClient(t, node, "sessions-0", "good", "pw-1")))
		assert.Equal(c, "sessions-0", getRC(c, rc).Status.Primary)
	}, waitFor, tick)
	assert.ErrorContains(t, loggedIn(userClient(t, node, "sessions-0", "typo", "pw-1")), "WRONGPASS")
	// the file is written at the next reconcile
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conf := &corev1.Secret{}
		require.NoError(c, k8sClient.Get(ctx, key(ns, rc.Name+cachev1.AuthConfSecretSuffix), conf))
		file := string(conf.Data[resources.AuthConfKey])
		assert.Contains(c, file, "user good ")
		assert.NotContains(c, file, "user typo ")
	}, waitFor, tick)
	require.NoError(t, node.Server("sessions-1").Restart())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, loggedIn(userClient(t, node, "sessions-1", "good", "pw-1")))
	}, waitFor, tick)

	// When the user fixes the spec, it becomes Ready
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Users = rc.Spec.Users[:1]
	require.NoError(t, k8sClient.Patch(ctx, rc, patch))
	eventuallyReady(t, rc)
}
