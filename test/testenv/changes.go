package testenv

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// relistAfter is how long LocalNode uses its lists of StatefulSets and pods when nothing says
// they changed: a change its watches missed is still seen this late.
const relistAfter = time.Second

// changes says when LocalNode lists the namespace's StatefulSets and pods again: when a watch
// reported a change to one, after the node wrote (a list holds no pod it created since), after a
// sync failed, and at least every relistAfter. Between lists a sync works from the last ones,
// whose objects take what each write returned. The lists stay the truth: a watch only says when
// to read them. Listing both at every sync (each 100 ms) made kube-apiserver the largest user of
// CPU in the fault suite, which runs six nodes at once (2026-12-06).
type changes struct {
	// every is the longest the lists are used without a change seen (relistAfter in LocalNode).
	every  time.Duration
	mu     sync.Mutex
	dirty  bool
	listed time.Time
}

// seen says the lists may be out of date.
func (c *changes) seen() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty = true
}

// take says whether to list now; if so, the lists are up to date from now.
func (c *changes) take() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty && time.Since(c.listed) < c.every {
		return false
	}
	c.dirty, c.listed = false, time.Now()
	return true
}

// follow watches one kind of the namespace's objects until ctx ends; every event, and every
// watch that ends or cannot start, is a change seen.
func (c *changes) follow(ctx context.Context, cl client.WithWatch, namespace string, newList func() client.ObjectList) {
	for ctx.Err() == nil {
		if w, err := cl.Watch(ctx, newList(), client.InNamespace(namespace)); err == nil {
			for range w.ResultChan() {
				c.seen()
			}
			w.Stop()
		}
		c.seen()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
