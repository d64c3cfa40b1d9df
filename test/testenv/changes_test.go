package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestANodeListsAgainWhenItsWatchReportsAChangeAndNotBefore: LocalNode's lists are read again
// when a watch on the real API server reports a change (a pod created by someone else), after
// the node's own writes, and not while nothing changes. The time after which it lists anyway is
// an hour here, so that only the watch can say so.
func TestANodeListsAgainWhenItsWatchReportsAChangeAndNotBefore(t *testing.T) {
	_, cfg := StartFor(t)
	c, err := client.NewWithWatch(cfg, client.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ns, err := CreateNamespace(ctx, c, "changes")
	require.NoError(t, err)
	ch := &changes{every: time.Hour}
	var follows sync.WaitGroup
	follows.Go(func() { ch.follow(ctx, c, ns, func() client.ObjectList { return &corev1.PodList{} }) })
	t.Cleanup(func() { cancel(); follows.Wait() })

	// Given a first list, and nothing changing
	require.True(t, ch.take(), "a node that never listed lists")
	assert.Never(t, ch.take, 500*time.Millisecond, 50*time.Millisecond, "nothing changed")

	// When someone else creates a pod, then a list is due, once
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}}}}
	require.NoError(t, c.Create(ctx, pod))
	require.Eventually(t, ch.take, 10*time.Second, 20*time.Millisecond, "the watch reported the new pod")
	assert.Never(t, ch.take, 500*time.Millisecond, 50*time.Millisecond, "nothing changed since the list")

	// And a write of the node's own makes one due at once
	n := &LocalNode{changes: changes{every: time.Hour, listed: time.Now()}}
	require.NoError(t, n.wrote(nil))
	assert.True(t, n.changes.take(), "after a write")
}
