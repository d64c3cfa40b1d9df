package controllers

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/topology"
)

// A reconcile is a list of phases: those every RedisCluster has, then its mode's
// (rediscluster_modes.go). Each phase ends done, waiting or failed (package outcome); runPhases
// decides what runs after one that did not finish.

// phase is one step of a reconcile. reason is the condition reason of its failures, unless
// the error says otherwise (outcome.Fail).
type phase struct {
	name   string
	reason string
	run    func(context.Context, *reconcileState) error
	// kind says what else may run when this phase fails.
	kind phaseKind
}

// phaseKind sorts the phases by what a failure stops.
type phaseKind int

const (
	// prerequisite: nothing after it can run without it (the password).
	prerequisite phaseKind = iota
	// appliesChild: it applies a child. When it fails (the API server refuses what the spec asks
	// for), the other children and the rollout wait for a spec that can be applied, but the
	// phases that keep Redis served still run: a refused spec must not leave the cluster
	// without failover.
	appliesChild
	// servesRedis: it observes the nodes, or keeps them one primary and its replicas.
	servesRedis
	// rollout: it moves pods to the applied spec.
	rollout
)

// runPhases runs the phases in order and records in state how each that did not finish ended:
// a failure (its Warning Event; the status keeps the first) or a wait. After a phase that did
// not finish, only what its kind allows runs. It returns the kind of the phase that failed.
func (r *RedisClusterReconciler) runPhases(ctx context.Context, rc *cachev1.RedisCluster, state *reconcileState, phases []phase) phaseKind {
	// stoppedKind is the kind of the first phase that did not finish (it failed or waits): it
	// says which phases after it still run.
	var stoppedKind, failedKind phaseKind
	for _, p := range phases {
		stopped := state.Failed != nil || state.Waiting != nil
		if stopped {
			if stoppedKind != appliesChild {
				break
			}
			if p.kind != servesRedis {
				continue
			}
		}
		err := p.run(ctx, state)
		if err == nil {
			continue
		}
		if w, ok := outcome.AsWaiting(p.name, err); ok {
			if state.Waiting == nil {
				state.Waiting = w
			}
		} else {
			if errors.Is(err, topology.ErrNoPermission) {
				// A node whose operator user is not this build's: given again by the
				// next reconcile's Passwords phase.
				state.OperatorRefused()
			}
			perr := outcome.AsFailure(p.name, p.reason, err)
			r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, perr.Reason, p.name, "%s", perr.Error())
			if state.Failed != nil {
				// Redis could not be served after a child failed: the status keeps the first
				// failure, this one has its Event.
				break
			}
			state.Failed, failedKind = perr, p.kind
		}
		if !stopped {
			stoppedKind = p.kind
		}
	}
	return failedKind
}
