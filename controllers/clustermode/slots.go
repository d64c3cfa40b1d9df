package clustermode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Moving hash slots between shards, as shards.Decide plans it (see its safety rule in
// internal/shards/moves.go): its executor (internal/shards/executor.go) carries out each planned
// move's remaining steps in order, then the next reconcile looks at the nodes again. A reconcile moves slots for at most
// moveBudget, so that the status says how far the move is, then comes back at once.

const (
	// moveBudget is how long one reconcile moves slots before it writes the status.
	moveBudget = time.Second
	// movingRequeue is when a reconcile that stopped moving slots at its budget comes back.
	movingRequeue = 10 * time.Millisecond
)

// moveSlots carries out the plan's moves until the budget is spent (shards.MoveSlots), then
// waits: the next reconcile, at once, looks at the nodes again.
func moveSlots(ctx context.Context, c *scope.Cluster, s *State, pace shards.Pace) error {
	rc := c.RC
	plan := s.Plan
	var primaries []string
	for _, sh := range plan.Shards {
		if sh.Primary != "" {
			primaries = append(primaries, sh.Primary)
		}
	}
	if pace == (shards.Pace{}) {
		pace = shards.DefaultPace
	}
	moved, err := shards.MoveSlots(ctx, c.Dial, plan.Moves, s.Addrs, primaries, pace, moveBudget)
	if len(moved.Slots) == 0 {
		return err
	}
	c.Applied.Changed = true
	var parts []string
	for pair, n := range moved.Slots {
		parts = append(parts, fmt.Sprintf("%d slots from %s", n, pair))
	}
	slices.Sort(parts)
	c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "MoveSlots",
		"Moved %s, with %d keys", strings.Join(parts, ", "), moved.Keys)
	if err != nil {
		return err
	}
	// Back at once: for the rest, or the next shard's moves.
	return outcome.Wait(movingRequeue, cachev1.ReasonSlotsMoving, slotsMoving(rc, *plan))
}

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;delete

// removeDrainedShards deletes the StatefulSet of each shard being removed once it serves no
// slot; the garbage collector deletes its pods, and the cluster forgets their nodes once it
// agrees they have failed (shards.Decide).
func removeDrainedShards(ctx context.Context, c *scope.Cluster, s *State) error {
	rc := c.RC
	for _, i := range s.Plan.Drained {
		sts := &appsv1.StatefulSet{}
		key := client.ObjectKey{Namespace: rc.Namespace, Name: resources.ShardStatefulSetName(rc, i)}
		if err := c.Client.Get(ctx, key, sts); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("reading StatefulSet %s: %w", key.Name, err)
			}
			continue
		}
		if !sts.DeletionTimestamp.IsZero() {
			continue
		}
		if err := c.Client.Delete(ctx, sts, client.Preconditions{UID: &sts.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting StatefulSet %s of a drained shard: %w", key.Name, err)
		}
		c.Applied.Changed = true
		c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "RemoveShard",
			"Shard %d serves no slot any more: its StatefulSet %s is deleted", i, key.Name)
	}
	return nil
}
