package topology

import "fmt"

// Pod is what a rollout decision knows of a node's pod besides its Redis.
type Pod struct {
	Name string
	// Outdated is true when the pod does not run the StatefulSet's current template.
	Outdated bool
	// Terminating is true once the pod is being deleted.
	Terminating bool
	// Failing is true when the pod's Redis keeps exiting as it starts (CrashLoopBackOff).
	Failing bool
}

// RolloutInput is the state of the pods a rollout decision weighs.
type RolloutInput struct {
	// Replicas is spec.replicas: a node whose ordinal is not below it is going away.
	Replicas int
	Pods     []Pod
	// RevisionKnown is true when the pods' Outdated marks can be trusted: the StatefulSet
	// controller has seen the current template, it runs Replicas pods, and this reconcile
	// changed none of the children.
	RevisionKnown bool
}

// RolloutAction is the one disruptive step a rollout takes now.
type RolloutAction int

const (
	// RolloutNone: nothing to do, or not now.
	RolloutNone RolloutAction = iota
	// RolloutSwitchover: move the primary role from From to To.
	RolloutSwitchover
	// RolloutReplacePod: delete Pod so that it comes back with the current template.
	RolloutReplacePod
)

// RolloutStep is what DecideRollout wants done.
type RolloutStep struct {
	Action RolloutAction
	// From and To are the switchover's primary and target.
	From, To Observed
	// Pod is the pod to replace, and Role its role in words, for the Event.
	Pod, Role string
	// Reason says why, in words for an Event.
	Reason string
}

// DecideRollout chooses at most one disruptive step: a switchover off a primary whose pod is
// being deleted or that scale-in removes, or the replacement of one outdated pod, replicas first
// (highest ordinal first), the primary last and only after a switchover to an up-to-date
// replica.
//
// Safety: nothing moves unless every node serves and no pod is still going away, so a step
// never takes down a second node while one is missing, and the primary's pod is replaced only
// when no replica could take its role (a single node). Two exceptions: an outdated pod whose
// Redis keeps exiting serves nothing; and a primary whose pod is going away anyway (a drain, a
// delete) is switched over to a caught-up replica whose pod stays, whatever the others do: the
// switchover loses no acknowledged write (it holds the primary's writes until the replica has
// them all), where waiting would leave a failover once the pod is gone.
func DecideRollout(v View, in RolloutInput) RolloutStep {
	if step, ok := handOverFromTerminatingPrimary(v, in); ok {
		return step
	}
	// An outdated pod whose Redis keeps exiting serves nothing and holds nothing a client was
	// told is written: replacing it is how a fixed spec (a directive Redis refused) reaches it.
	if in.RevisionKnown {
		for _, p := range in.Pods {
			if p.Outdated && p.Failing && !p.Terminating {
				return RolloutStep{Action: RolloutReplacePod, Pod: p.Name, Role: "its Redis keeps exiting"}
			}
		}
	}
	if !v.AllServing() {
		return RolloutStep{}
	}
	outdated := map[string]bool{}
	for _, p := range in.Pods {
		if p.Terminating {
			// Its Redis may answer a little longer: one step at a time.
			return RolloutStep{}
		}
		outdated[p.Name] = p.Outdated
	}
	primary, _ := v.Find(v.Primary)
	if primary.Ordinal >= in.Replicas {
		target, ok := v.BestReplica(func(o Observed) bool { return o.Ordinal < in.Replicas })
		if !ok {
			return RolloutStep{}
		}
		return RolloutStep{Action: RolloutSwitchover, From: primary, To: target,
			Reason: fmt.Sprintf("scale-in to %d removes %s", in.Replicas, primary.Name)}
	}
	if !in.RevisionKnown {
		return RolloutStep{}
	}
	for i := len(v.Nodes) - 1; i >= 0; i-- {
		if o := v.Nodes[i]; o.Name != primary.Name && outdated[o.Name] {
			return RolloutStep{Action: RolloutReplacePod, Pod: o.Name, Role: "replica"}
		}
	}
	if !outdated[primary.Name] {
		return RolloutStep{}
	}
	target, ok := v.BestReplica(func(o Observed) bool { return !outdated[o.Name] })
	if !ok {
		return RolloutStep{Action: RolloutReplacePod, Pod: primary.Name, Role: "the only node; writes pause until it is back"}
	}
	return RolloutStep{Action: RolloutSwitchover, From: primary, To: target, Reason: "rolling out the new spec, replicas are done"}
}

// handOverFromTerminatingPrimary is the switchover off a primary whose pod is being deleted,
// while its Redis still answers (the pod's preStop hook holds its SIGTERM until it is a
// replica): to the caught-up replica holding the most, among those whose pods stay. ok is
// false when the primary's pod is not going away; a step without an action means it is, but
// no replica can take the role now.
func handOverFromTerminatingPrimary(v View, in RolloutInput) (RolloutStep, bool) {
	terminating := map[string]bool{}
	for _, p := range in.Pods {
		terminating[p.Name] = p.Terminating
	}
	primary, ok := v.Find(v.Primary)
	if !ok || !terminating[primary.Name] {
		return RolloutStep{}, false
	}
	if !primary.IsPrimary() {
		return RolloutStep{}, true
	}
	target, ok := v.BestReplica(func(o Observed) bool { return !terminating[o.Name] && o.Ordinal < in.Replicas })
	if !ok {
		return RolloutStep{}, true
	}
	return RolloutStep{Action: RolloutSwitchover, From: primary, To: target,
		Reason: fmt.Sprintf("the pod of %s is being deleted", primary.Name)}, true
}
