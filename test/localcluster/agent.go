package localcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/podrunner"
	"github.com/org/redis-operator/test/redistest"
)

// NodeName is the one node of a local cluster.
const NodeName = "local-node"

// Agent is the node agent: it registers a Node and runs the pods bound to it through
// test/podrunner: each redis-server container becomes a local process on the pod's own loopback
// address (reported as the pod IP), with its volumes as files. It runs the readiness probe,
// restarts an exited container (restartPolicy Always), stops the processes of deleted pods, and
// provisions a local volume for each claim.
type Agent struct {
	Client client.Client
	Dir    string
	// Credentials writes a kubeconfig of a pod's ServiceAccount; nil: pods get none.
	Credentials func(ctx context.Context, pod *corev1.Pod, dir string) (string, error)

	// kubeletPort serves container logs (kubelet.go).
	kubeletPort int

	mu   sync.Mutex
	pods map[types.UID]*runningPod
	// initFailed is when each pod's init container last failed: it runs again 2s later, as
	// after the kubelet's back-off.
	initFailed map[types.UID]time.Time
	// binaries maps container images to the local binaries that stand for them.
	binaries map[string]string
}

// AddBinary makes pods whose image is image run binary.
func (a *Agent) AddBinary(image, binary string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.binaries == nil {
		a.binaries = map[string]string{}
	}
	a.binaries[image] = binary
}

type runningPod struct {
	namespace, name string
	podrunner.Container
	// The kubelet's restart back-off: the first restart is immediate, then each crash waits
	// twice as long (10s up to 5 minutes) while the container keeps failing.
	backoff     time.Duration
	nextRestart time.Time
	// volumesSynced is when its ConfigMap and Secret volumes were last written again.
	volumesSynced time.Time
}

// volumeSync is how often a running pod's ConfigMap and Secret volumes are written again from
// their objects: the kubelet's sync period is about a minute; shorter here, so that a changed
// Secret (a rotated certificate) reaches the pods soon.
const volumeSync = 10 * time.Second

const (
	initialBackoff = 10 * time.Second
	maxBackoff     = 5 * time.Minute
)

// restartDue says whether an exited container may restart now, and arms the next back-off.
// A container that ran for longer than the longest back-off starts afresh.
func (p *runningPod) restartDue(now time.Time) bool {
	if now.Before(p.nextRestart) {
		return false
	}
	if _, started := p.Restarts(); now.Sub(started.Time) > 2*maxBackoff {
		p.backoff = 0
	}
	switch {
	case p.backoff == 0:
		p.backoff = initialBackoff
	case p.backoff < maxBackoff:
		p.backoff = min(2*p.backoff, maxBackoff)
	}
	p.nextRestart = now.Add(p.backoff)
	return true
}

// Server returns the redis-server process of a pod, for tests that kill it.
func (a *Agent) Server(namespace, name string) *redistest.Server {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if redis, ok := p.Container.(*podrunner.Process); ok && p.namespace == namespace && p.name == name {
			return redis.Server
		}
	}
	return nil
}

// Run registers the Node and keeps its pods running until ctx ends; then it stops every process.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	a.pods = map[types.UID]*runningPod{}
	a.mu.Unlock()
	defer a.stopAll()
	port, err := a.serveKubelet(ctx)
	if err != nil {
		return err
	}
	a.kubeletPort = port
	if err := a.register(ctx); err != nil {
		return err
	}
	lastBeat := time.Now()
	for ctx.Err() == nil {
		if time.Since(lastBeat) > 10*time.Second {
			if err := a.heartbeat(ctx); err == nil {
				lastBeat = time.Now()
			}
		}
		_ = provisioner{client: a.Client, dir: a.Dir}.provisionPending(ctx)
		_ = a.syncPods(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func (a *Agent) register(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
		corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	}}}
	if err := a.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node: %w", err)
	}
	return a.heartbeat(ctx)
}

func (a *Agent) heartbeat(ctx context.Context) error {
	node := &corev1.Node{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: NodeName}, node); err != nil {
		return err
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("24Gi"),
		corev1.ResourcePods: resource.MustParse("250"),
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: NodeName}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(a.kubeletPort)
	node.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "LocalAgentReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "LocalAgent", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "LocalAgent", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "LocalAgent", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	if err := a.Client.Status().Update(ctx, node); err != nil {
		return err
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Namespace: corev1.NamespaceNodeLease}}
	err := a.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease)
	lease.Spec.HolderIdentity = ptr.To(NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](40)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Time}
	if apierrors.IsNotFound(err) {
		return a.Client.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	return a.Client.Update(ctx, lease)
}

func (a *Agent) syncPods(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := a.Client.List(ctx, pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", NodeName)}); err != nil {
		return err
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		if pod.DeletionTimestamp != nil {
			a.stopPod(pod.UID)
			_ = a.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
			continue
		}
		if err := a.syncPod(ctx, pod); err != nil {
			a.reportFailure(ctx, pod, err)
		}
	}
	a.mu.Lock()
	var gone []types.UID
	for uid := range a.pods {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	a.mu.Unlock()
	for _, uid := range gone {
		a.stopPod(uid)
	}
	return nil
}

func (a *Agent) syncPod(ctx context.Context, pod *corev1.Pod) error {
	a.mu.Lock()
	p, ok := a.pods[pod.UID]
	a.mu.Unlock()
	if !ok {
		a.mu.Lock()
		failedAt, failed := a.initFailed[pod.UID]
		a.mu.Unlock()
		if failed && time.Since(failedAt) < 2*time.Second {
			return nil
		}
		var err error
		if p, err = a.startPod(ctx, pod); err != nil {
			if initErr := (*podrunner.InitError)(nil); errors.As(err, &initErr) {
				a.mu.Lock()
				if a.initFailed == nil {
					a.initFailed = map[types.UID]time.Time{}
				}
				a.initFailed[pod.UID] = time.Now()
				a.mu.Unlock()
			}
			return err
		}
	} else if p.Unhealthy() || (!p.Alive() && pod.Spec.RestartPolicy != corev1.RestartPolicyNever && p.restartDue(time.Now())) {
		if err := p.Restart(); err != nil {
			return err
		}
	}
	if redis, ok := p.Container.(*podrunner.Process); ok && time.Since(p.volumesSynced) >= volumeSync {
		src := podrunner.APISources{Client: a.Client, Claims: a.claimDir}
		if err := redis.RefreshVolumes(ctx, src, pod); err != nil {
			return err
		}
		p.volumesSynced = time.Now()
	}
	ready := p.Ready()
	return a.writeStatus(ctx, pod, p, ready)
}

// startPod runs the pod's container through the pod runner: its volumes as files under the
// agent's directory, claims at their local volume, an image of Binaries as its binary with a
// kubeconfig of the pod's ServiceAccount.
func (a *Agent) startPod(ctx context.Context, pod *corev1.Pod) (*runningPod, error) {
	a.mu.Lock()
	binaries := maps.Clone(a.binaries)
	a.mu.Unlock()
	runner := podrunner.Runner{
		Sources:     podrunner.APISources{Client: a.Client, Claims: a.claimDir},
		Dir:         filepath.Join(a.Dir, "pods"),
		Binaries:    binaries,
		Credentials: a.Credentials,
	}
	c, err := runner.Start(ctx, pod)
	if err != nil {
		return nil, err
	}
	p := &runningPod{namespace: pod.Namespace, name: pod.Name, Container: c}
	a.mu.Lock()
	a.pods[pod.UID] = p
	a.mu.Unlock()
	return p, nil
}

func (a *Agent) claimDir(ctx context.Context, namespace, claim string) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, pvc); err != nil {
		return "", err
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("claim %s is not bound yet", claim)
	}
	pv := &corev1.PersistentVolume{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", err
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("volume %s is not local", pv.Name)
	}
	return pv.Spec.HostPath.Path, nil
}

func (a *Agent) writeStatus(ctx context.Context, pod *corev1.Pod, p *runningPod, ready bool) error {
	restarts, started := p.Restarts()
	c := pod.Spec.Containers[0]
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()}
	}
	var state, last corev1.ContainerState
	phase := corev1.PodRunning
	if code, exited := p.ExitCode(); exited {
		terminated := podrunner.Terminated(p.Container, c, code)
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// The pod ran to completion (a Job's, a scorecard test's).
			state.Terminated = terminated
			phase = corev1.PodSucceeded
			if code != 0 {
				phase = corev1.PodFailed
			}
		} else {
			// Waiting out the back-off before the next restart.
			state.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", p.backoff, c.Name, pod.Name)}
			last.Terminated = terminated
		}
	} else {
		state.Running = &corev1.ContainerStateRunning{StartedAt: started}
		if prev := pod.Status.ContainerStatuses; len(prev) == 1 {
			last = prev[0].LastTerminationState
		}
	}
	want := corev1.PodStatus{
		Phase:     phase,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     p.PodIP(),
		PodIPs:    []corev1.PodIP{{IP: p.PodIP()}},
		StartTime: pod.Status.StartTime,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, true), cond(corev1.PodInitialized, true),
			cond(corev1.ContainersReady, ready), cond(corev1.PodReady, ready),
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: "local://" + c.Image, Ready: ready, RestartCount: restarts,
			Started: ptr.To(p.Alive()), State: state, LastTerminationState: last,
		}},
	}
	if want.StartTime == nil {
		want.StartTime = &started
	}
	if samePodStatus(pod.Status, want) {
		return nil
	}
	pod.Status = want
	return a.Client.Status().Update(ctx, pod)
}

// samePodStatus compares what matters, so that an unchanged pod costs no write.
func samePodStatus(have, want corev1.PodStatus) bool {
	if have.Phase != want.Phase || have.PodIP != want.PodIP || len(have.ContainerStatuses) != 1 {
		return false
	}
	h, w := have.ContainerStatuses[0], want.ContainerStatuses[0]
	if h.Ready != w.Ready || h.RestartCount != w.RestartCount || (h.State.Running == nil) != (w.State.Running == nil) ||
		!equality.Semantic.DeepEqual(h.State.Waiting, w.State.Waiting) || !equality.Semantic.DeepEqual(h.State.Terminated, w.State.Terminated) ||
		!equality.Semantic.DeepEqual(h.LastTerminationState, w.LastTerminationState) {
		return false
	}
	for _, c := range have.Conditions {
		if c.Type == corev1.PodReady && (c.Status == corev1.ConditionTrue) != w.Ready {
			return false
		}
	}
	return true
}

func (a *Agent) reportFailure(ctx context.Context, pod *corev1.Pod, err error) {
	msg := err.Error()
	if pod.Status.Message == msg {
		return
	}
	if initErr := (*podrunner.InitError)(nil); errors.As(err, &initErr) {
		// Init:CrashLoopBackOff: the kubelet reports the init container's exit.
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{initErr.InitContainerStatus(pod)}
	}
	pod.Status.Phase = corev1.PodPending
	pod.Status.Message = msg
	pod.Status.Reason = "LocalNodeError"
	_ = a.Client.Status().Update(ctx, pod)
}

func (a *Agent) stopPod(uid types.UID) {
	a.mu.Lock()
	p := a.pods[uid]
	delete(a.pods, uid)
	a.mu.Unlock()
	if p == nil {
		return
	}
	p.Stop()
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	uids := make([]types.UID, 0, len(a.pods))
	for uid := range a.pods {
		uids = append(uids, uid)
	}
	a.mu.Unlock()
	for _, uid := range uids {
		a.stopPod(uid)
	}
}
