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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/operator"
	"github.com/org/redis-operator/test/testenv"
)

// In cluster mode as in replication mode, a new password and new users reach every node of
// every shard live: no pod is replaced, the old password works beside the new one for its
// time, then no more.
func TestClusterModeTakesANewPasswordAndNewUsersLive(t *testing.T) {
	t.Parallel()
	const first, second = "first-password-0c1d", "second-password-7e2f"
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, adminCfg, ns, func(o *operator.Options) { o.SecretResync = 500 * time.Millisecond })
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-redis", Namespace: ns}, Data: map[string][]byte{"password": []byte(first)}}
	require.NoError(t, k8sClient.Create(ctx, secret))
	require.NoError(t, k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-password", Namespace: ns},
		Data: map[string][]byte{"password": []byte("app-pw-1")}}))
	rc := testenv.RedisCluster(ns, "sharded", 2)
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: time.Second}}
	rc.Spec.Auth = &cachev1.AuthSpec{SecretRef: cachev1.SecretKeyRef{Name: "my-redis"}, PreviousPasswordValidFor: &metav1.Duration{Duration: 4 * time.Second}}
	require.NoError(t, k8sClient.Create(ctx, rc))
	node := runLocalNode(t, ns)
	ready := eventuallyReadyWithin(t, rc, 2*waitFor)
	var pods []string
	for _, n := range ready.Status.Nodes {
		pods = append(pods, n.Name)
	}
	require.Len(t, pods, 6)
	before := podUIDs(t, ns)

	// When the Secret changes under the running nodes
	secret.Data["password"] = []byte(second)
	require.NoError(t, k8sClient.Update(ctx, secret))

	// Then every node of every shard takes the new password, with the old one beside it
	changed := time.Now()
	for _, pod := range pods {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, redisClient(t, node, pod, second).Ping(ctx).Err())
		}, waitFor, tick, pod)
	}
	for _, pod := range pods {
		assert.NoError(t, redisClient(t, node, pod, first).Ping(ctx).Err(), "the old password still works on %s", pod)
	}
	require.Less(t, time.Since(changed), 4*time.Second, "checked within the old password's time")

	// And when its time is up, no node takes the old one, and the rotation's Secret goes
	for _, pod := range pods {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Error(c, redisClient(t, node, pod, first).Ping(ctx).Err())
		}, waitFor, tick, "the old password no longer works on %s", pod)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, key(ns, "sharded-auth-previous"), &corev1.Secret{})
		assert.True(c, apierrors.IsNotFound(err), "sharded-auth-previous is deleted")
	}, waitFor, tick)

	// When a user is added to the running cluster
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := getRC(c, rc)
		now.Spec.Users = []cachev1.UserSpec{{Name: "app", PasswordSecretRef: cachev1.SecretKeyRef{Name: "app-password"}, Rules: "~app:* +@read +@write"}}
		assert.NoError(c, k8sClient.Update(ctx, now))
	}, waitFor, tick)

	// Then every node has it, and it may do what its rules allow and nothing else
	for _, pod := range pods {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			// (MOVED: logged in and allowed; the key's slot is another shard's)
			err := userClient(t, node, pod, "app", "app-pw-1").Get(ctx, "app:1").Err()
			if err != nil && !errors.Is(err, goredis.Nil) {
				assert.Contains(c, err.Error(), "MOVED", pod)
			}
		}, waitFor, tick, pod)
		assert.ErrorContains(t, userClient(t, node, pod, "app", "app-pw-1").Get(ctx, "other:1").Err(), "NOPERM", pod)
	}

	// and no pod was replaced for any of it
	eventuallyReady(t, rc)
	assert.Equal(t, before, podUIDs(t, ns))
}
