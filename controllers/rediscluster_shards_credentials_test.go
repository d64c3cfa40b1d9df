package controllers_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/org/redis-operator/internal/resources"
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

// A cluster made by an earlier build whose operator user lacks a right this build needs (here:
// every cluster-mode right, MIGRATE among them) gets the user as this build defines it from the
// operator that replaces that build, live: the slots then move, with no pod replaced. So does a
// node whose user loses a right under a running operator, at its first refusal (a move's, or
// the health check's).
func TestAnUpgradedOperatorGivesRunningNodesItsOwnUsersNewRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newShardedCluster(t, "upgraded")
	for i := range 300 {
		require.NoError(t, e.cc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err())
	}
	before := podUIDs(t, e.ns)

	// Given nodes whose operator user has the rights of an earlier build (the other mode's)
	e.op.stop()
	opPassword := secretValue(t, e.ns, "upgraded-operator", "password")
	earlier := resources.OperatorUser(opPassword, false)
	for _, n := range e.ready.Status.Nodes {
		c := redisClient(t, e.node, n.Name, e.password)
		require.NoError(t, c.Do(ctx, append([]any{"ACL", "SETUSER", earlier.Name}, toAny(earlier.SetUserArgs())...)...).Err())
		assert.Contains(t, mayMigrate(ctx, c, earlier.Name), "no permissions", "%s's operator user may not MIGRATE", n.Name)
	}

	// When this build's operator takes over and the cluster grows a shard
	startOperator(t, adminCfg, e.ns)
	patchSpec(t, e.rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 4 })

	// Then every node's operator user may MIGRATE again, the slots move, every key reads back,
	// and none of the pods was replaced
	got := eventuallyShards(t, e.rc, 4, 2*waitFor)
	for _, n := range e.ready.Status.Nodes {
		c := redisClient(t, e.node, n.Name, e.password)
		assert.Equal(t, "OK", mayMigrate(ctx, c, earlier.Name), n.Name)
	}
	cc := clusterClient(t, e.node, got, e.password)
	for i := range 300 {
		v, err := cc.Get(ctx, fmt.Sprintf("k%d", i)).Int()
		require.NoError(t, err, "k%d", i)
		require.Equal(t, i, v)
	}
	after := podUIDs(t, e.ns)
	for pod, uid := range before {
		assert.Equal(t, uid, after[pod], pod)
	}

	// And when the running operator's user loses MIGRATE behind its back, the first NOPERM has
	// it given again: the cluster shrinks back to 3 shards
	for _, n := range got.Status.Nodes {
		c := redisClient(t, e.node, n.Name, e.password)
		require.NoError(t, c.Do(ctx, "ACL", "SETUSER", earlier.Name, "-migrate").Err())
		assert.Contains(t, mayMigrate(ctx, c, earlier.Name), "no permissions", "%s's operator user may not MIGRATE", n.Name)
	}
	patchSpec(t, e.rc, func(rc *cachev1.RedisCluster) { rc.Spec.Cluster.Shards = 3 })
	got = eventuallyShards(t, e.rc, 3, 2*waitFor)
	cc = clusterClient(t, e.node, got, e.password)
	for i := range 300 {
		v, err := cc.Get(ctx, fmt.Sprintf("k%d", i)).Int()
		require.NoError(t, err, "k%d", i)
		require.Equal(t, i, v)
	}

	// And when it loses CLUSTER NODES, which the health check sends, every node gets it back
	// and the cluster is Ready again
	for _, n := range got.Status.Nodes {
		require.NoError(t, redisClient(t, e.node, n.Name, e.password).Do(ctx, "ACL", "SETUSER", earlier.Name, "-cluster|nodes").Err())
	}
	for _, n := range got.Status.Nodes {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, err := redisClient(t, e.node, n.Name, e.password).Do(ctx, "ACL", "DRYRUN", earlier.Name, "CLUSTER", "NODES").Text()
			assert.NoError(c, err)
			assert.Equal(c, "OK", out)
		}, waitFor, tick, "%s's operator user may run CLUSTER NODES again", n.Name)
	}
	eventuallyShards(t, e.rc, 3, waitFor)
}

// mayMigrate is what ACL DRYRUN says of user sending a MIGRATE: OK, or why not.
func mayMigrate(ctx context.Context, c *goredis.Client, user string) string {
	out, err := c.Do(ctx, "ACL", "DRYRUN", user, "MIGRATE", "127.0.0.1", "6379", "", "0", "1000", "KEYS", "k").Text()
	if err != nil {
		return err.Error()
	}
	return out
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
