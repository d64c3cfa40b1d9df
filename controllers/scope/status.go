package scope

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// What both modes' status says alike: the condition builders, Degraded from how the phases
// ended, Ready while nodes are missing (and the machines that keep them), and the StatefulSets'
// rollout.

// StrandedPod is a pod whose machine (its Kubernetes node) is not ready: the node controller
// found its kubelet silent, or the node is gone. Its Redis answers nobody; Kubernetes lets the
// pod go only once the machine comes back or is marked out of service. A pod started again
// after that, whose volume is that machine's disk (a local volume), waits for the machine:
// Claim names its claim. So does one whose volume is on a cordoned node (drained: Cordoned is
// true; the node is ready).
type StrandedPod struct {
	Pod, Node   string
	Terminating bool
	Claim       string
	Cordoned    bool
}

// NodeExit is why a node's Redis is down while its container waits out a restart back-off:
// Redis refused to start (ReasonRedisFailedToStart), or it was killed (ReasonRedisKilled).
type NodeExit struct {
	Reason, Message string
}

// OutcomeDegraded is Degraded as both modes say it from how the phases ended: True when one
// failed or a node's Redis keeps exiting, False when one waits (a wait is not a failure:
// Progressing and Ready say what for); nil leaves it to the mode.
func (c *Cluster) OutcomeDegraded() *metav1.Condition {
	switch {
	case c.Failed != nil:
		return Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, c.Failed.Reason, c.Failed.Error())
	case c.Exited != nil:
		return Condition(cachev1.ConditionDegraded, metav1.ConditionTrue, c.Exited.Reason, c.Exited.Message)
	case c.Waiting != nil:
		return Condition(cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected,
			fmt.Sprintf("Nothing failed; phase %s waits", c.Waiting.Phase))
	}
	return nil
}

// ReplicasNotReady is Ready False while fewer nodes are ready than wanted (both modes), naming
// the pods whose machines are not ready, and what lets a pod deleted there go.
func ReplicasNotReady(ready, want int32, stranded []StrandedPod) *metav1.Condition {
	counted := fmt.Sprintf("%d of %d Redis nodes are ready", ready, want)
	if len(stranded) == 0 {
		return Condition(cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonReplicasNotReady, counted)
	}
	reason := cachev1.ReasonNodeCordoned
	var says []string
	for _, s := range stranded {
		if !s.Cordoned {
			reason = cachev1.ReasonNodeNotReady
		}
		switch {
		case s.Cordoned:
			says = append(says, fmt.Sprintf("%s waits for its volume (claim %s) on node %s, which is cordoned: it starts when %s is uncordoned, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted", s.Pod, s.Claim, s.Node, s.Node))
		case s.Claim != "":
			says = append(says, fmt.Sprintf("%s waits for its volume (claim %s) on node %s, which is not ready: it starts when %s comes back, or on another node with an empty volume (its data copied from its primary) once its claim and its pod are deleted", s.Pod, s.Claim, s.Node, s.Node))
		case s.Terminating:
			says = append(says, fmt.Sprintf("%s is on node %s, which is not ready; its pod is being deleted, and stays until %s comes back or is marked out of service (taint node.kubernetes.io/out-of-service), when it starts again on another node", s.Pod, s.Node, s.Node))
		default:
			says = append(says, fmt.Sprintf("%s is on node %s, which is not ready", s.Pod, s.Node))
		}
	}
	return Condition(cachev1.ConditionReady, metav1.ConditionFalse, reason, counted+": "+strings.Join(says, "; "))
}

// PersistentCondition says whether the nodes' data survives their pods.
func PersistentCondition(rc *cachev1.RedisCluster) *metav1.Condition {
	if rc.Spec.Storage != nil {
		return Condition(cachev1.ConditionPersistent, metav1.ConditionTrue, cachev1.ReasonPersistentVolumeClaims,
			"Each Redis node keeps its data on its own PersistentVolumeClaim")
	}
	return Condition(cachev1.ConditionPersistent, metav1.ConditionFalse, cachev1.ReasonEmptyDir,
		"Data lives in emptyDir volumes and is lost when a pod is deleted or moves; set spec.storage to keep it")
}

// StatefulSetObserved is true when the StatefulSet controller has seen the StatefulSet's current spec,
// so that its status counts describe it.
func StatefulSetObserved(sts *appsv1.StatefulSet) bool {
	return sts != nil && sts.Status.ObservedGeneration >= sts.Generation
}

// RolledOut is true when every pod of the StatefulSet runs its current template.
func RolledOut(sts *appsv1.StatefulSet) bool {
	if !StatefulSetObserved(sts) {
		return false
	}
	s := sts.Status
	return s.UpdatedReplicas >= ptr.Deref(sts.Spec.Replicas, 1) && s.CurrentRevision == s.UpdateRevision
}

// Condition is a condition of the status, at no generation yet (SetCondition gives it one).
func Condition(condType string, status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
	return &metav1.Condition{Type: condType, Status: status, Reason: reason, Message: msg}
}

// SetCondition sets c, when not nil, at the RedisCluster's generation.
func SetCondition(rc *cachev1.RedisCluster, c *metav1.Condition) {
	if c == nil {
		return
	}
	c.ObservedGeneration = rc.Generation
	meta.SetStatusCondition(&rc.Status.Conditions, *c)
}

// CrashLoops is true when the pod's container waits out a restart back-off.
func CrashLoops(p corev1.Pod) bool {
	_, ok := CrashLoopingContainer(p)
	return ok
}

// CrashLoopingContainer is the pod's container that waits out a restart back-off, if any.
func CrashLoopingContainer(p corev1.Pod) (corev1.ContainerStatus, bool) {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff" {
			return c, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// WroteStatefulSet is true when this reconcile created or changed a StatefulSet: its status
// still describes the spec before (the StatefulSet controller has not seen the write), so its
// pods do not count as ready for the new one. A write of another child (the ConfigMap, a
// Service, the Secret) changes no pod, and leaves Ready as it was.
func (c *Cluster) WroteStatefulSet() bool {
	isSts := func(child string) bool { return strings.HasPrefix(child, "StatefulSet ") }
	return slices.ContainsFunc(c.Applied.Created, isSts) || slices.ContainsFunc(c.Applied.Updated, isSts)
}
