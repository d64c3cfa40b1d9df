// Package managedcache stands in for boxcutter's managedcache (see the boxcutter package): its
// tracking cache sets up no watch, and its source never fires.
package managedcache

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// TrackingCache watches the objects each owner installed.
type TrackingCache interface {
	client.Reader
	Start(ctx context.Context) error
	Source(h handler.EventHandler, predicates ...predicate.Predicate) source.Source
	Watch(ctx context.Context, user client.Object, gvks sets.Set[schema.GroupVersionKind]) error
	Free(ctx context.Context, user client.Object) error
}

type noWatches struct{}

// NewTrackingCache makes a tracking cache that watches nothing.
func NewTrackingCache(logr.Logger, *rest.Config, cache.Options) (TrackingCache, error) {
	return noWatches{}, nil
}

func (noWatches) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (noWatches) Source(handler.EventHandler, ...predicate.Predicate) source.Source { return silent{} }

func (noWatches) Watch(context.Context, client.Object, sets.Set[schema.GroupVersionKind]) error {
	return nil
}

func (noWatches) Free(context.Context, client.Object) error { return nil }

// Get and List read nothing: only the BoxcutterRuntime reads through the tracking cache.
func (noWatches) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errNotTracked
}

func (noWatches) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errNotTracked
}

var errNotTracked = errors.New("boxcutter's tracking cache is not in this build of operator-controller")

type silent struct{}

func (silent) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}
