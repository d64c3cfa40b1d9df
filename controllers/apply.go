package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the server-side apply field manager of everything the controller writes.
const FieldOwner = "rediscluster-controller"

// applyResult says what applying one child did.
type applyResult int

const (
	unchanged applyResult = iota
	created
	updated
)

// child is one object the controller applies: the configuration it wants, an empty object of
// the live type to read into, and how to extract the fields our field manager owns from it.
type child[T client.Object, A runtime.ApplyConfiguration] struct {
	desired A
	name    types.NamespacedName
	live    T
	extract func(live T, fieldManager string) (A, error)
	// reader reads the live object; the cached client when nil. Secrets are read uncached.
	reader client.Reader
	// missing says the caller knows the object does not exist yet: it is applied unread.
	missing bool
	// read says the caller has just read the object into live: it is not read again.
	read bool
}

// childrenSeen says whether a RedisCluster's children (those built from the RedisCluster
// alone) were all found matching its spec at a resourceVersion of it, with no change to any of
// them since: their watches report every change (childEvents). While both hold, the health
// check, which reconciles every RedisCluster every second, does not read them again.
type childrenSeen struct {
	mu sync.Mutex
	// at is the RedisCluster's resourceVersion when every child last matched; empty when a
	// comparison is needed.
	at string
	// changedSince is true when a child changed since the last comparison began.
	changedSince bool
}

// unchanged is true when the children matched at this resourceVersion and none changed since.
// Otherwise a comparison begins: a child that changes from now on is compared again next time.
func (c *childrenSeen) unchanged(resourceVersion string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at != "" && c.at == resourceVersion && !c.changedSince {
		return true
	}
	c.at, c.changedSince = "", false
	return false
}

// compared records that every child matched at resourceVersion, unless one changed meanwhile.
func (c *childrenSeen) compared(resourceVersion string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.changedSince {
		c.at = resourceVersion
	}
}

// changed records that a child changed (or went).
func (c *childrenSeen) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changedSince = true
}

// apply applies the desired configuration of a child only when the live object lacks
// it: when the object is missing, or when what our field manager owns differs from what we
// want (another writer took a field over, or the spec changed). A converged child costs no
// write, and a manual edit of a field we own is put back with forced ownership.
func (ch child[T, A]) apply(ctx context.Context, c client.Client) (applyResult, error) {
	result := updated
	var reader client.Reader = c
	if ch.reader != nil {
		reader = ch.reader
	}
	var err error
	switch {
	case ch.missing:
		err = apierrors.NewNotFound(schema.GroupResource{}, ch.name.Name)
	case !ch.read:
		err = reader.Get(ctx, ch.name, ch.live)
	}
	switch {
	case apierrors.IsNotFound(err):
		result = created
	case err != nil:
		return unchanged, fmt.Errorf("reading: %w", err)
	default:
		owned, err := ch.extract(ch.live, FieldOwner)
		if err != nil {
			return unchanged, fmt.Errorf("extracting owned fields: %w", err)
		}
		same, err := sameJSON(owned, ch.desired)
		if err != nil {
			return unchanged, err
		}
		if same {
			return unchanged, nil
		}
	}
	if err := c.Apply(ctx, ch.desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return unchanged, err
	}
	return result, nil
}

func (ch child[T, A]) objectName() string { return ch.name.Name }

// sameJSON compares two apply configurations by their JSON form, which is what the API server
// would receive, so that nil and empty collections that serialise alike compare alike.
func sameJSON(a, b any) (bool, error) {
	var av, bv any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &av}, {b, &bv}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return false, fmt.Errorf("encoding apply configuration: %w", err)
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return false, fmt.Errorf("decoding apply configuration: %w", err)
		}
	}
	return reflect.DeepEqual(av, bv), nil
}
