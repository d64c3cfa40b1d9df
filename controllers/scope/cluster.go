// Package scope is what a phase of the RedisCluster reconciler is handed (Cluster): the
// RedisCluster, the API it writes through, its pods and how to reach their Redis nodes, and
// how every child is applied (server-side apply, written only on drift). A phase is a
// function of a Cluster and of its own feature's state, so that a feature can live in a
// package of its own below the reconciler.
package scope

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/metrics"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/internal/auth"
	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/internal/topology"
)

// Cluster is one reconcile of one RedisCluster, as its phases see it. The reconciler fills it
// as the reconcile goes: the pods and the dialer once the nodes' phase has listed them.
type Cluster struct {
	RC *cachev1.RedisCluster
	// Client reads from the cache and writes; APIReader reads uncached (Secrets, which the
	// operator never lists or watches).
	Client    client.Client
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Pods are the RedisCluster's pods, in both modes.
	Pods []corev1.Pod
	// Dial reaches the pods' Redis nodes with the operator's current login.
	Dial topology.Dialer
	// DialAs opens connections of their own with another login (a previous password, a
	// configuration that checks no name).
	DialAs func(auth.Login) topology.Dialer
	// Nodes is every node as this reconcile observed it, in either mode (in cluster mode, every
	// shard's), with no primary: for what reaches every node alike. Observe asks them again,
	// once a phase changed what they take.
	Nodes   func() topology.View
	Observe func(context.Context) error
	// Members are the pods as Redis nodes (name, ordinal, address), in both modes: the dialer
	// holds connections to exactly these.
	Members []topology.Member
	// Exited says why a node's Redis is down and restarted with back-off; nil when none is.
	Exited *NodeExit
	// Stranded are the pods on machines that are not ready (lost, powered off, cut off).
	Stranded []StrandedPod
	// ChildrenKnown is true when the ConfigMap, the Services, the PodDisruptionBudget and the
	// StatefulSets matched the spec at this version of the RedisCluster and none changed since:
	// the health check then leaves them alone. ChildrenMatched records that they all did (the
	// phase of the last child calls it).
	ChildrenKnown   bool
	ChildrenMatched func()
	// Restore is the backup of spec.restore, as recorded (status.restore); nil without one.
	Restore *cachev1.RestoreStatus
	// OperatorImage and RedisImages are what the StatefulSets run: the operator's own image (the
	// restore's init container) and Redis's by version.
	OperatorImage string
	RedisImages   resources.RedisImages
	// BackupsServed is true when the API server serves RedisBackups: spec.backup and
	// spec.restore need them.
	BackupsServed bool
	// Metrics is what the metrics remember of this RedisCluster (when each node's load was
	// last read).
	Metrics *metrics.Memory
	// Applied is what this reconcile's writes of children did.
	Applied Applied
	// Outside are the addresses clients outside the Kubernetes cluster dial (spec.expose), as
	// the phase that owns the external Services read them (replication: Services; cluster mode:
	// Outside); nil when none did in this reconcile.
	Outside []resources.OutsideAddress
	// Failed is the phase that failed, with its reason; Waiting the first phase that waits.
	Failed  *outcome.Failure
	Waiting *outcome.Waiting
	// Lost says what data this reconcile found lost, in either mode (the DataLost condition): a
	// promotion of a node holding no data, or shards whose nodes all came back empty and were
	// given their slots again; empty when none.
	Lost string
	// WriteStatus writes the status as it stands now, before the reconcile ends: a change of
	// primary is announced so, while it happens.
	WriteStatus func(context.Context) error
	// OperatorRefused has every node given the operator's own user again: a node refused the
	// operator a command (its user is an earlier build's).
	OperatorRefused func()
}

// Applied is what a reconcile's writes of children did, for the Events that say so and for
// the status (a StatefulSet just written describes the spec before).
type Applied struct {
	// Created, Updated and Deleted name the children ("Kind name") created, changed and
	// deleted.
	Created, Updated, Deleted []string
	// Changed is true when a child was created or changed, or (in cluster mode) the cluster was:
	// slots, a failover, a pod replaced.
	Changed bool
}

// NameOf is the name of one of the RedisCluster's objects, in its namespace.
func (c *Cluster) NameOf(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: c.RC.Namespace, Name: name}
}

// Created records a child made other than by Apply (a Secret created once), for the Event
// that names the children created.
func (c *Cluster) Created(ctx context.Context, kind string, obj client.Object, note string) {
	c.Applied.Created = append(c.Applied.Created, kind+" "+obj.GetName()+note)
	log.FromContext(ctx).Info("Created child", "kind", kind, "child", klog.KObj(obj))
}

// Deleted records a child deleted because the spec no longer asks for it, for the Event that
// names the children deleted.
func (c *Cluster) Deleted(ctx context.Context, kind string, obj client.Object) {
	c.Applied.Changed = true
	c.Applied.Deleted = append(c.Applied.Deleted, kind+" "+obj.GetName())
	log.FromContext(ctx).Info("Deleted child", "kind", kind, "child", klog.KObj(obj))
}

// Apply applies one child when it drifted, and records what it did.
func Apply[T client.Object, A runtime.ApplyConfiguration](ctx context.Context, c *Cluster, kind string, ch Child[T, A]) error {
	// Bounded: an API server whose etcd stopped answers no write, and a phase that waited on
	// one would hold back the phases that keep Redis served (a failover) until it gave up.
	wctx, cancel := context.WithTimeout(ctx, childWriteTimeout)
	defer cancel()
	result, err := ch.apply(wctx, c.Client)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, ch.objectName(), err)
	}
	switch result {
	case created:
		c.Applied.Changed = true
		c.Applied.Created = append(c.Applied.Created, kind+" "+ch.objectName())
		log.FromContext(ctx).Info("Created child", "kind", kind, "child", klog.KRef(c.RC.Namespace, ch.objectName()))
	case updated:
		c.Applied.Changed = true
		c.Applied.Updated = append(c.Applied.Updated, kind+" "+ch.objectName())
		log.FromContext(ctx).Info("Updated child", "kind", kind, "child", klog.KRef(c.RC.Namespace, ch.objectName()))
	}
	return nil
}

// childWriteTimeout bounds the write of one child: it takes milliseconds when the API server
// answers.
const childWriteTimeout = 5 * time.Second

// PodNamed is the pod of that name among the RedisCluster's, for an Event's related object;
// nil (no related object) when it is not there.
func (c *Cluster) PodNamed(name string) runtime.Object {
	if p := PodByName(c.Pods, name); p != nil {
		return p
	}
	return nil // an untyped nil: a nil *Pod in the interface would not be nil
}

// PodByName is the pod of that name, nil when there is none.
func PodByName(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}
