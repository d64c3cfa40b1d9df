package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
)

// A failed reconcile that still served Redis is retried no later than its health check, once:
// the retry after a later failure that recorded no check (a refused status write) keeps the
// back-off, rather than running at once against a due time already past.
func TestCheckBoundBoundsTheRetryOfAServedFailureOnce(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "sessions"}
	req := reconcile.Request{NamespacedName: key}
	r := &RedisClusterReconciler{}
	limiter := checkBound{r: r, TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Minute, time.Hour)}
	cs := r.stateOf(key)

	// Given a reconcile whose child was refused while failover ran
	served := &reconcileState{Cluster: scope.Cluster{Failed: &outcome.Failure{Err: errors.New("refused")}}}
	cs.status.checkAfterFailure(served, appliesChild, time.Second)
	// Then its retry comes at its health check, not after the minute of back-off
	assert.LessOrEqual(t, limiter.When(req), time.Second)

	// And the next failure's retry, with no check recorded, backs off
	assert.Greater(t, limiter.When(req), time.Minute)

	// And a failure that stopped Redis being served (a prerequisite) records no check
	cs.status.checkAfterFailure(served, prerequisite, time.Second)
	assert.Greater(t, limiter.When(req), time.Minute)
}

// A cache behind this operator's own status write is decided on as the write left it: with
// the API server's etcd stopped, the watch would never bring it, and no reconcile would run
// (a failover that waited on it waited for etcd).
func TestACacheBehindTheLastStatusWriteIsReplacedByWhatTheWriteLeft(t *testing.T) {
	var s statusMemory
	assert.Nil(t, s.newerThanCache("10"), "nothing written yet")

	written := &cachev1.RedisCluster{}
	written.ResourceVersion = "12"
	written.Status.Primary = "r-1"
	s.wroteStatusOver(written, "10", "11")
	for _, behind := range []string{"10", "11"} {
		got := s.newerThanCache(behind)
		if assert.NotNil(t, got, behind) {
			assert.Equal(t, "12", got.ResourceVersion)
			assert.Equal(t, "r-1", got.Status.Primary)
			got.Status.Primary = "changed by its reconcile"
		}
	}
	assert.Equal(t, "r-1", s.newerThanCache("10").Status.Primary, "each reconcile gets its own copy")
	assert.Nil(t, s.newerThanCache("12"), "the cache caught up")
	assert.Nil(t, s.newerThanCache("13"), "a newer change than the write")
	assert.Nil(t, s.newerThanCache(""))
}
