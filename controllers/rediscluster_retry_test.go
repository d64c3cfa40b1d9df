package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
	served := &reconcileState{err: &phaseError{err: errors.New("refused")}}
	cs.status.checkAfterFailure(served, appliesChild, time.Second)
	// Then its retry comes at its health check, not after the minute of back-off
	assert.LessOrEqual(t, limiter.When(req), time.Second)

	// And the next failure's retry, with no check recorded, backs off
	assert.Greater(t, limiter.When(req), time.Minute)

	// And a failure that stopped Redis being served (a prerequisite) records no check
	cs.status.checkAfterFailure(served, prerequisite, time.Second)
	assert.Greater(t, limiter.When(req), time.Minute)
}
