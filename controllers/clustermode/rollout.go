package clustermode

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/shards"
)

// Rollout hands a shard whose primary's pod is being deleted to a replica
// (shards.DecideHandover), or else takes the next step of rolling the shards' current template
// out, as shards.DecideRollout says (see its safety rule): replace a replica's pod, or hand a
// shard to its updated replica (CLUSTER FAILOVER) before its primary's pod is replaced. Once every pod
// runs the current template, it hands a shard whose primary shares a machine with another
// shard's primary to a replica on a machine holding none (shards.DecidePrimaryPlacement).
func Rollout(ctx context.Context, c *scope.Cluster, _ *Memory, s *State) error {
	rc := c.RC
	if s.Plan == nil || c.Applied.Changed || s.ClusterDown != "" {
		return nil
	}
	step, purpose := nextShardStep(rc, c, s)
	switch step.Kind {
	case shards.Failover:
		if err := shards.TakeOver(ctx, c.Dial, s.Addrs[step.Pod]); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER on %s: %w", step.Pod, err)
		}
		c.Applied.Changed = true
		c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventClusterChanged, "Failover",
			"%s takes over shard %d %s: %s", step.Pod, step.Shard, purpose, step.Why)
	case shards.ReplacePod:
		pod := scope.PodByName(c.Pods, step.Pod)
		if pod == nil {
			return nil
		}
		if err := c.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replacing pod %s: %w", pod.Name, err)
		}
		c.Applied.Changed = true
		c.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, cachev1.EventReplacingPod, "RollOut",
			"Replacing pod %s to roll out the current spec: %s", pod.Name, step.Why)
	}
	return nil
}

// nextShardStep is the one step this reconcile takes on the shards' pods, and what it is for.
func nextShardStep(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) (shards.RolloutStep, string) {
	if step := shards.DecideHandover(*s.Plan, terminatingPods(c.Pods), nodesOf(c.Pods)); step.Kind != "" {
		return step, "while its primary still answers"
	}
	outdated, known := outdatedShardPods(rc, c, s)
	if !known {
		return shards.RolloutStep{}, ""
	}
	s.Rollout = shards.DecideRollout(*s.Plan, outdated, rc.Spec.Storage != nil)
	if len(outdated) > 0 {
		return s.Rollout, "to roll out the current spec"
	}
	// Rolled out: keep the primaries on machines of their own.
	return shards.DecidePrimaryPlacement(*s.Plan, nodesOf(c.Pods)), "to keep each primary on a machine of its own"
}

// terminatingPods are the pods being deleted.
func terminatingPods(pods []corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			out[p.Name] = true
		}
	}
	return out
}

// nodesOf is each pod's machine (spec.nodeName); a pod not scheduled yet is left out.
func nodesOf(pods []corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

// outdatedShardPods are the pods that do not run their shard StatefulSet's current template;
// known is false until every shard's StatefulSet has seen its template and has all its pods
// (a pod it just recreated would look outdated before).
func outdatedShardPods(rc *cachev1.RedisCluster, c *scope.Cluster, s *State) (outdated map[string]bool, known bool) {
	revisions := map[string]*appsv1.StatefulSet{}
	for _, sts := range s.StatefulSets {
		if !scope.StatefulSetObserved(sts) || sts.Status.UpdateRevision == "" {
			return nil, false
		}
		revisions[sts.Name] = sts
	}
	if len(revisions) < int(rc.Spec.Cluster.Shards) {
		return nil, false
	}
	count := map[string]int{}
	outdated = map[string]bool{}
	for _, p := range c.Pods {
		shard, ok := resources.ShardOf(p.Labels)
		if !ok {
			continue
		}
		sts, ok := revisions[resources.ShardStatefulSetName(rc, shard)]
		if !ok {
			continue
		}
		if p.DeletionTimestamp != nil {
			return nil, false
		}
		count[sts.Name]++
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
			outdated[p.Name] = true
		}
	}
	for name := range revisions {
		if count[name] != int(rc.Spec.Replicas) {
			return nil, false
		}
	}
	return outdated, true
}
