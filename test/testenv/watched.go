package testenv

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// watched is one kind of a namespace's objects as a list and then a watch report them, for
// LocalNode to read at each of its syncs instead of listing them from the API server (two lists
// every 100 ms per node: in the fault suite, six nodes at once made kube-apiserver the machine's
// largest user of CPU). As an informer, but small: the harness reads a namespace of a few pods.
type watched struct {
	mu     sync.Mutex
	objs   map[string]client.Object
	listed bool
}

// follow keeps w up to date until ctx ends: a list, then a watch from its resourceVersion, and a
// list again whenever the watch ends or fails.
func (w *watched) follow(ctx context.Context, c client.WithWatch, namespace string, newList func() client.ObjectList) {
	for ctx.Err() == nil {
		if err := w.listAndWatch(ctx, c, namespace, newList); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func (w *watched) listAndWatch(ctx context.Context, c client.WithWatch, namespace string, newList func() client.ObjectList) error {
	list := newList()
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	objs := map[string]client.Object{}
	for _, item := range items {
		if o, ok := item.(client.Object); ok {
			objs[o.GetName()] = o
		}
	}
	w.mu.Lock()
	w.objs, w.listed = objs, true
	w.mu.Unlock()

	events, err := c.Watch(ctx, newList(), client.InNamespace(namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	if err != nil {
		return err
	}
	defer events.Stop()
	for ev := range events.ResultChan() {
		o, ok := ev.Object.(client.Object)
		switch {
		case ev.Type == watch.Error || !ok:
			return nil // list again (an expired resourceVersion, say)
		case ev.Type == watch.Deleted:
			w.mu.Lock()
			if cur, ok := w.objs[o.GetName()]; ok && cur.GetUID() == o.GetUID() {
				delete(w.objs, o.GetName())
			}
			w.mu.Unlock()
		case ev.Type == watch.Added || ev.Type == watch.Modified:
			w.put(o)
		}
	}
	return nil
}

// put records o unless w holds a later version of it: the harness puts what its own writes
// returned, which the watch reports again a moment later.
func (w *watched) put(o client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.objs == nil {
		return // the list is yet to come, and holds it
	}
	if cur, ok := w.objs[o.GetName()]; ok && cur.GetUID() == o.GetUID() && version(cur) > version(o) {
		return
	}
	w.objs[o.GetName()] = o.DeepCopyObject().(client.Object)
}

// version orders an object's versions: etcd's revisions, which the API server's resourceVersions
// are (opaque to clients in general; this harness runs against one API server of its own).
func version(o client.Object) int64 {
	v, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return v
}

// snapshot is a copy of every object, for a sync to change as it likes; false before the first list.
func (w *watched) snapshot() ([]client.Object, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]client.Object, 0, len(w.objs))
	for _, name := range slices.Sorted(maps.Keys(w.objs)) { // in the API's order, by name
		out = append(out, w.objs[name].DeepCopyObject().(client.Object))
	}
	return out, w.listed
}
