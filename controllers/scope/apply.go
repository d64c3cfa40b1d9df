package scope

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

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

// Child is one object the controller applies: the configuration it wants, an empty object of
// the live type to read into, and how to extract the fields our field manager owns from it.
type Child[T client.Object, A runtime.ApplyConfiguration] struct {
	Desired A
	Name    types.NamespacedName
	Live    T
	Extract func(live T, fieldManager string) (A, error)
	// Missing says the caller knows the object does not exist yet: it is applied unread.
	Missing bool
	// Read says the caller has just read the object into Live: it is not read again.
	Read bool
}

// apply applies the desired configuration of a child only when the live object lacks
// it: when the object is missing, or when what our field manager owns differs from what we
// want (another writer took a field over, or the spec changed). A converged child costs no
// write, and a manual edit of a field we own is put back with forced ownership.
func (ch Child[T, A]) apply(ctx context.Context, c client.Client) (applyResult, error) {
	result := updated
	var err error
	switch {
	case ch.Missing:
		err = apierrors.NewNotFound(schema.GroupResource{}, ch.Name.Name)
	case !ch.Read:
		err = c.Get(ctx, ch.Name, ch.Live)
	}
	switch {
	case apierrors.IsNotFound(err):
		result = created
	case err != nil:
		return unchanged, fmt.Errorf("reading: %w", err)
	default:
		owned, err := ch.Extract(ch.Live, FieldOwner)
		if err != nil {
			return unchanged, fmt.Errorf("extracting owned fields: %w", err)
		}
		same, err := sameJSON(owned, ch.Desired)
		if err != nil {
			return unchanged, err
		}
		if same {
			return unchanged, nil
		}
	}
	if err := c.Apply(ctx, ch.Desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return unchanged, err
	}
	return result, nil
}

func (ch Child[T, A]) objectName() string { return ch.Name.Name }

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
