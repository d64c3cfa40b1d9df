package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/internal/resources"
	"github.com/org/redis-operator/test/podrunner"
	"github.com/org/redis-operator/test/redistest"
)

// LocalNode plays, for envtest (which runs no controllers and no kubelet), the parts of the
// StatefulSet controller and the kubelet that a RedisCluster needs: it creates each
// StatefulSet's pods, runs each pod through test/podrunner (a real redis-server process on its
// own loopback address, reported as the pod IP, with the pod's volumes as files), restarts a
// process that exits, reports readiness from a TCP probe, and writes the StatefulSet's status. Everything
// the operator talks to is real: the API server, and Redis over its protocol.
type LocalNode struct {
	// Client reads and writes; its watches only tell the node when to list again (changes).
	Client    client.WithWatch
	Namespace string
	// Dir holds each pod's data directory.
	Dir string
	// NoRestart, while true, leaves a process that exited down, as a node that is gone would.
	// Atomic: a test sets it while the node runs.
	NoRestart atomic.Bool
	// VolumeSync, when set, is how often the pods' ConfigMap and Secret volumes are written
	// again from their objects, as the kubelet's sync does (about a minute there): a changed
	// Secret reaches the running pods' files.
	VolumeSync time.Duration
	// Binaries maps the images of init containers to the local binaries that stand for them:
	// the operator's image, whose restore subcommand fills a restored cluster's first node.
	Binaries map[string]string

	mu    sync.Mutex
	procs map[string]*podProcess // pod name -> process
	// runOnce are the containers of pods that run once (restartPolicy Never), by pod UID.
	runOnce map[types.UID]podrunner.Container
	// initFailed is when each pod's init container last failed: it runs again after
	// initRetry, as the kubelet's back-off does.
	initFailed map[string]time.Time
	// volumesSynced is when the volumes were last written again.
	volumesSynced time.Time
	// changes says when to list the namespace's StatefulSets and pods again.
	changes changes
	// history is what the node did to each pod, newest last (History).
	history map[string][]string
}

// historyLength bounds what History keeps of each pod.
const historyLength = 12

// note records what the node did to a pod, with the time, for History.
func (n *LocalNode) note(pod, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.history == nil {
		n.history = map[string][]string{}
	}
	h := append(n.history[pod], time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	n.history[pod] = h[max(0, len(h)-historyLength):]
}

// History says, for each pod by name, what the node last did to it (created, started, stopped,
// restarted, the readiness it reported, with the times): a test that fails on a pod's state says how
// it came to be.
func (n *LocalNode) History() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, pod := range slices.Sorted(maps.Keys(n.history)) {
		fmt.Fprintf(&b, "%s: %s; ", pod, strings.Join(n.history[pod], ", "))
	}
	return strings.TrimSuffix(b.String(), "; ")
}

type podProcess struct {
	sts string
	*podrunner.Process
}

// RunLocalNode runs a LocalNode for the namespace's pods, tuned by tune first, until the test or
// benchmark ends; its processes' files are under the test's temporary directory.
func RunLocalNode(tb testing.TB, c client.WithWatch, namespace string, tune ...func(*LocalNode)) *LocalNode {
	tb.Helper()
	node := &LocalNode{Client: c, Namespace: namespace, Dir: tb.TempDir()}
	for _, f := range tune {
		f(node)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return node
}

// Run works until ctx ends, then stops every process it started.
func (n *LocalNode) Run(ctx context.Context) {
	n.mu.Lock()
	n.procs = map[string]*podProcess{}
	n.mu.Unlock()
	defer n.stopAll()
	var follows sync.WaitGroup
	defer follows.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n.changes = changes{every: relistAfter}
	for _, newList := range []func() client.ObjectList{
		func() client.ObjectList { return &appsv1.StatefulSetList{} },
		func() client.ObjectList { return &corev1.PodList{} },
	} {
		follows.Go(func() { n.changes.follow(ctx, n.Client, n.Namespace, newList) })
	}
	var sts *appsv1.StatefulSetList
	var pods *corev1.PodList
	for {
		if n.changes.take() {
			sts, pods = &appsv1.StatefulSetList{}, &corev1.PodList{}
			if err := n.list(ctx, sts, pods); err != nil {
				sts = nil
				n.changes.seen()
				n.logUnlessConflict(ctx, err)
			}
		}
		if sts != nil {
			if err := n.sync(ctx, sts, pods); err != nil {
				n.changes.seen() // what failed may be what the lists missed
				n.logUnlessConflict(ctx, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Server is the redis-server process of a pod, for tests that kill or inspect it.
func (n *LocalNode) Server(pod string) *redistest.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p, ok := n.procs[pod]; ok {
		return p.Server
	}
	return nil
}

func (n *LocalNode) stopAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.procs {
		p.Stop()
	}
	for _, c := range n.runOnce {
		c.Stop()
	}
}

// syncRunOncePods runs the pods that are no StatefulSet's and run once (restartPolicy Never:
// the operator's backup and restore pods) as the kubelet would: the container runs to its exit,
// which the pod's status then reports, with the termination message.
func (n *LocalNode) syncRunOncePods(ctx context.Context, pods []corev1.Pod) error {
	seen := map[types.UID]bool{}
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || metav1.GetControllerOf(pod) == nil ||
			metav1.GetControllerOf(pod).Kind == "StatefulSet" {
			continue
		}
		seen[pod.UID] = true
		n.mu.Lock()
		c, ok := n.runOnce[pod.UID]
		n.mu.Unlock()
		if !ok {
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			runner := podrunner.Runner{Sources: podrunner.APISources{Client: n.Client, Claims: n.claimDir},
				Dir: filepath.Join(n.Dir, "pods"), Binaries: n.Binaries}
			var err error
			if c, err = runner.Start(ctx, pod); err != nil {
				return err
			}
			n.mu.Lock()
			if n.runOnce == nil {
				n.runOnce = map[types.UID]podrunner.Container{}
			}
			n.runOnce[pod.UID] = c
			n.mu.Unlock()
		}
		want := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: c.PodIP(), PodIPs: []corev1.PodIP{{IP: c.PodIP()}}}
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		if code, exited := c.ExitCode(); exited {
			want.Phase = corev1.PodSucceeded
			if code != 0 {
				want.Phase = corev1.PodFailed
			}
			state = corev1.ContainerState{Terminated: podrunner.Terminated(c, pod.Spec.Containers[0], code)}
		}
		want.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, State: state}}
		if pod.Status.Phase != want.Phase || pod.Status.PodIP != want.PodIP {
			pod.Status = want
			if err := n.wrote(n.Client.Status().Update(ctx, pod)); err != nil {
				return err
			}
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid, c := range n.runOnce {
		if !seen[uid] {
			c.Stop()
			delete(n.runOnce, uid)
		}
	}
	return nil
}

// wrote makes the next sync list again after a write, done or not: the lists hold no pod created
// since, and a write that failed may be one they missed.
func (n *LocalNode) wrote(err error) error {
	n.changes.seen()
	return err
}

func (n *LocalNode) logUnlessConflict(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
		fmt.Fprintln(os.Stderr, "local node:", err)
	}
}

// list reads the namespace's StatefulSets and pods: one list of the pods, not one per
// StatefulSet (a benchmark runs 100 of them).
func (n *LocalNode) list(ctx context.Context, list *appsv1.StatefulSetList, pods *corev1.PodList) error {
	if err := n.Client.List(ctx, list, client.InNamespace(n.Namespace)); err != nil {
		return err
	}
	return n.Client.List(ctx, pods, client.InNamespace(n.Namespace))
}

// sync keeps the pods of the listed StatefulSets running and their statuses true.
func (n *LocalNode) sync(ctx context.Context, list *appsv1.StatefulSetList, pods *corev1.PodList) error {
	for i := range list.Items {
		if err := n.syncStatefulSet(ctx, &list.Items[i], pods.Items); err != nil {
			return err
		}
	}
	if err := n.collectOrphans(ctx, list.Items, pods.Items); err != nil {
		return err
	}
	if err := n.syncRunOncePods(ctx, pods.Items); err != nil {
		return err
	}
	if n.VolumeSync > 0 && time.Since(n.volumesSynced) >= n.VolumeSync {
		n.volumesSynced = time.Now()
		src := podrunner.APISources{Client: n.Client, Claims: n.claimDir}
		for i := range pods.Items {
			n.mu.Lock()
			p, ok := n.procs[pods.Items[i].Name]
			n.mu.Unlock()
			if ok && p.UID == pods.Items[i].UID {
				if err := p.RefreshVolumes(ctx, src, &pods.Items[i]); err != nil {
					return fmt.Errorf("refreshing the volumes of pod %s: %w", pods.Items[i].Name, err)
				}
			}
		}
	}
	return nil
}

// collectOrphans plays the garbage collector for the pods of a StatefulSet that was deleted
// (cluster mode removes a drained shard's): the pods are deleted and their processes end.
func (n *LocalNode) collectOrphans(ctx context.Context, statefulSets []appsv1.StatefulSet, pods []corev1.Pod) error {
	live := map[types.UID]bool{}
	for _, sts := range statefulSets {
		live[sts.UID] = true
	}
	for i := range pods {
		owner := metav1.GetControllerOf(&pods[i])
		if owner == nil || owner.Kind != "StatefulSet" || live[owner.UID] {
			continue
		}
		n.mu.Lock()
		if p, ok := n.procs[pods[i].Name]; ok && p.UID == pods[i].UID {
			p.Stop()
			delete(n.procs, pods[i].Name)
		}
		n.mu.Unlock()
		if err := n.wrote(n.Client.Delete(ctx, &pods[i])); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (n *LocalNode) syncStatefulSet(ctx context.Context, sts *appsv1.StatefulSet, pods []corev1.Pod) error {
	revision := templateRevision(sts)
	replicas := int(ptr.Deref(sts.Spec.Replicas, 1))
	selector := labels.SelectorFromSet(sts.Spec.Selector.MatchLabels)
	existing := map[string]*corev1.Pod{}
	for i := range pods {
		if selector.Matches(labels.Set(pods[i].Labels)) {
			existing[pods[i].Name] = &pods[i]
		}
	}
	// Processes of pods that were deleted end with them.
	stopped := map[string]types.UID{}
	n.mu.Lock()
	for name, p := range n.procs {
		if pod, ok := existing[name]; p.sts == sts.Name && (!ok || pod.UID != p.UID) {
			p.Stop()
			delete(n.procs, name)
			stopped[name] = p.UID
		}
	}
	n.mu.Unlock()
	for name, uid := range stopped {
		n.note(name, "stopped %s (its pod is not in the list: deleted or replaced)", shortUID(uid))
	}

	status := appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, UpdateRevision: revision, CurrentRevision: revision}
	for ordinal := 0; ordinal < replicas; ordinal++ {
		name := fmt.Sprintf("%s-%d", sts.Name, ordinal)
		pod, ok := existing[name]
		if !ok {
			var err error
			if pod, err = n.createPod(ctx, sts, name, revision); err != nil {
				return err
			}
		}
		ready, err := n.runPod(ctx, sts, pod)
		if err != nil {
			return err
		}
		status.Replicas++
		if ready {
			status.ReadyReplicas++
			status.AvailableReplicas++
		}
		if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == revision {
			status.UpdatedReplicas++
		} else {
			status.CurrentRevision = pod.Labels[appsv1.ControllerRevisionHashLabelKey]
		}
	}
	status.CurrentReplicas = status.Replicas
	for name, pod := range existing {
		if ordinal, ok := resources.PodOrdinal(name); ok && ordinal >= replicas {
			if err := n.wrote(n.Client.Delete(ctx, pod)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	if !jsonEqual(sts.Status, status) {
		sts.Status = status
		return n.wrote(n.Client.Status().Update(ctx, sts))
	}
	return nil
}

func (n *LocalNode) createPod(ctx context.Context, sts *appsv1.StatefulSet, name, revision string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: sts.Namespace,
			Labels:      map[string]string{},
			Annotations: sts.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: sts.Spec.Template.Spec,
	}
	for k, v := range sts.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		podrunner.AddClaimVolume(pod, claim.Name)
	}
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
	pod.Labels[appsv1.StatefulSetPodNameLabel] = name
	if err := n.wrote(n.Client.Create(ctx, pod)); err != nil {
		return nil, fmt.Errorf("creating pod %s: %w", name, err)
	}
	n.note(name, "created %s at %s (StatefulSet generation %d)", shortUID(pod.UID), revision, sts.Generation)
	return pod, nil
}

// runPod keeps the pod's process running and its status true; it returns whether it is ready.
func (n *LocalNode) runPod(ctx context.Context, sts *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	n.mu.Lock()
	p, ok := n.procs[pod.Name]
	n.mu.Unlock()
	if !ok {
		n.mu.Lock()
		failedAt, failed := n.initFailed[string(pod.UID)]
		n.mu.Unlock()
		if failed && time.Since(failedAt) < initRetry {
			return false, nil
		}
		src := podrunner.APISources{Client: n.Client, Claims: n.claimDir}
		proc, err := podrunner.StartPod(ctx, src, filepath.Join(n.Dir, "pods"), pod, n.Binaries)
		if initErr := (*podrunner.InitError)(nil); errors.As(err, &initErr) {
			n.mu.Lock()
			if n.initFailed == nil {
				n.initFailed = map[string]time.Time{}
			}
			n.initFailed[string(pod.UID)] = time.Now()
			n.mu.Unlock()
			pod.Status = corev1.PodStatus{Phase: corev1.PodPending,
				InitContainerStatuses: []corev1.ContainerStatus{initErr.InitContainerStatus(pod)},
				Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
			return false, n.wrote(n.Client.Status().Update(ctx, pod))
		}
		if err != nil {
			return false, err
		}
		p = &podProcess{sts: sts.Name, Process: proc}
		n.mu.Lock()
		n.procs[pod.Name] = p
		n.mu.Unlock()
		n.note(pod.Name, "started %s on %s", shortUID(pod.UID), p.IP)
	}
	if !p.Alive() && !n.NoRestart.Load() {
		_ = p.Restart()
		n.note(pod.Name, "restarted %s (its process had exited)", shortUID(pod.UID))
	}
	ready := p.Ready()
	want := corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  p.IP,
		PodIPs: []corev1.PodIP{{IP: p.IP}},
		Conditions: []corev1.PodCondition{{
			Type: corev1.PodReady, Status: boolStatus(ready),
		}},
	}
	if pod.Status.PodIP != want.PodIP || len(pod.Status.Conditions) != 1 || pod.Status.Conditions[0].Status != want.Conditions[0].Status {
		pod.Status = want
		if err := n.wrote(n.Client.Status().Update(ctx, pod)); err != nil {
			return false, err
		}
		n.note(pod.Name, "reported %s ready %v", shortUID(pod.UID), ready)
	}
	return ready, nil
}

// initRetry is how long a pod whose init container failed waits before it runs again.
const initRetry = 2 * time.Second

// claimDir is a claim's volume: envtest runs no volume binder, so each claim is a directory of
// its own, kept across its pod's replacements as a PersistentVolume would be.
func (n *LocalNode) claimDir(_ context.Context, namespace, claim string) (string, error) {
	return filepath.Join(n.Dir, "claims", namespace, claim), nil
}

func templateRevision(sts *appsv1.StatefulSet) string {
	raw, _ := json.Marshal(sts.Spec.Template)
	sum := sha256.Sum256(raw)
	return sts.Name + "-" + hex.EncodeToString(sum[:5])
}

// shortUID is the start of a UID: enough to tell a pod's incarnations apart in History.
func shortUID(uid types.UID) string { return string(uid)[:min(8, len(uid))] }

func boolStatus(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func jsonEqual(a, b any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return string(ra) == string(rb)
}
