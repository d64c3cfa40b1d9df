package operator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNotLeading is what every Redis command and every API write of a process fails with once
// it may no longer be the leader.
var ErrNotLeading = errors.New("this operator process may no longer lead")

// leaseFence is the lease the operator's replicas elect their leader with, and the fence that
// keeps a leader that lost it from acting. A leader frozen past its lease (a stopped process, a
// VM paused, a long garbage collection) resumes with reconciles half done and decisions taken
// on what it saw before the freeze, while another replica leads; client-go tells it that it
// lost only at its next renewal attempt, and its other goroutines run first. So the process
// acts only while its last renewal is recent: a renewal that began at t proves the lease is
// ours until t + LeaseDuration on any other replica's clock (it waits that long after it saw
// the renewal before it takes the lease), and the fence closes at t + RenewDeadline, when
// client-go gives up leading too. Every Redis command (redis.Options.Fence) and every API
// write (fencedClient) asks it first, measured on the monotonic clock, which runs on while the
// process is stopped.
//
// What is left: a command that passed the fence and is then frozen for longer than
// LeaseDuration - RenewDeadline (15s by default) before it reaches the network is sent late.
// Redis cannot check a fencing token, so that window is closed only by keeping the margin
// larger than any pause between a check and the write that follows it (microseconds of code).
type leaseFence struct {
	resourcelock.Interface
	renewDeadline time.Duration
	// renewed is when the last renewal by this process that succeeded began; nil when it does
	// not hold the lease (never had it, or released it).
	renewed atomic.Pointer[time.Time]
}

func newLeaseFence(lock resourcelock.Interface, renewDeadline time.Duration) *leaseFence {
	return &leaseFence{Interface: lock, renewDeadline: renewDeadline}
}

// Create takes the lease.
func (f *leaseFence) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return f.record(rec, func() error { return f.Interface.Create(ctx, rec) })
}

// Update renews, takes or releases the lease.
func (f *leaseFence) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return f.record(rec, func() error { return f.Interface.Update(ctx, rec) })
}

// record writes rec and notes when a write that leaves the lease ours began; a release (another
// or no holder) closes the fence before it is sent.
func (f *leaseFence) record(rec resourcelock.LeaderElectionRecord, write func() error) error {
	if rec.HolderIdentity != f.Identity() {
		f.renewed.Store(nil)
		return write()
	}
	began := time.Now()
	if err := write(); err != nil {
		return err
	}
	f.renewed.Store(&began)
	return nil
}

// Check is nil while the process may act as the leader.
func (f *leaseFence) Check() error {
	renewed := f.renewed.Load()
	if renewed == nil {
		return fmt.Errorf("%w: it does not hold the lease", ErrNotLeading)
	}
	if since := time.Since(*renewed); since >= f.renewDeadline {
		return fmt.Errorf("%w: its last renewal of the lease began %s ago, the renew deadline is %s", ErrNotLeading,
			since.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}

// fencedClient is the manager's client with every write asking the fence first; reads pass.
type fencedClient struct {
	client.Client
	fence func() error
}

func (c fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

func (c fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c fencedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.fence(); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c fencedClient) Status() client.SubResourceWriter {
	return fencedSubResource{SubResourceClient: c.Client.SubResource("status"), fence: c.fence}
}

func (c fencedClient) SubResource(name string) client.SubResourceClient {
	return fencedSubResource{SubResourceClient: c.Client.SubResource(name), fence: c.fence}
}

// fencedSubResource is a subresource's client with every write asking the fence first.
type fencedSubResource struct {
	client.SubResourceClient
	fence func() error
}

func (s fencedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := s.fence(); err != nil {
		return err
	}
	return s.SubResourceClient.Create(ctx, obj, sub, opts...)
}

func (s fencedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.fence(); err != nil {
		return err
	}
	return s.SubResourceClient.Update(ctx, obj, opts...)
}

func (s fencedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.fence(); err != nil {
		return err
	}
	return s.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

func (s fencedSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := s.fence(); err != nil {
		return err
	}
	return s.SubResourceClient.Apply(ctx, obj, opts...)
}
