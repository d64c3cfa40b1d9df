// Package podrunner runs a pod's redis-server container as a local process, for the envtest
// tests, where no kubelet runs. It does what the kubelet would: it writes
// ConfigMap and Secret volumes as files, makes emptyDir volumes new directories and claims
// their volume's directory, maps the paths the container's redis.conf names (include, dir)
// from its mounts to those directories, starts the process on its own loopback address (the
// pod IP), and restarts or stops it. Both the envtest StatefulSet emulator (test/testenv) and
// the topology tests run pods through it.
package podrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/org/redis-operator/test/redistest"
)

// Sources resolve a pod's volumes.
type Sources interface {
	ConfigMap(ctx context.Context, namespace, name string) (map[string]string, error)
	Secret(ctx context.Context, namespace, name string) (map[string][]byte, error)
	// ClaimDir is the directory of the volume bound to a PersistentVolumeClaim.
	ClaimDir(ctx context.Context, namespace, claim string) (string, error)
}

// Container is a pod's one container, running as a local process.
type Container interface {
	// PodIP is the pod's own loopback address.
	PodIP() string
	Alive() bool
	// Ready is the readiness probe's answer.
	Ready() bool
	// Unhealthy is true when the liveness probe says to restart the container.
	Unhealthy() bool
	// Restart starts the container again and counts it; Restarts says how often, and when
	// it last started.
	Restart() error
	Restarts() (int32, metav1.Time)
	// Stop ends the container for good: the pod is gone.
	Stop()
	// LogPath is the file holding what the container logs.
	LogPath() string
	// ExitCode is the exit code once the container exited; false while it runs.
	ExitCode() (int, bool)
	// TerminationMessage is the end of the container's log, which the kubelet reports for a
	// container that failed (terminationMessagePolicy FallbackToLogsOnError).
	TerminationMessage() string
}

// terminationMessageBytes is how much of a failed container's log the kubelet keeps as its
// termination message.
const terminationMessageBytes = 2048

// Runner starts pods' containers.
type Runner struct {
	Sources Sources
	// Dir holds each pod's directory.
	Dir string
	// Binaries maps a container image to the local binary that stands for it: the operator's
	// manager built at a given version, for example.
	Binaries map[string]string
	// Credentials returns the path of a kubeconfig with a token of the pod's ServiceAccount
	// (what the kubelet mounts), or "" when the pod gets none.
	Credentials func(ctx context.Context, pod *corev1.Pod, dir string) (string, error)
}

// Start runs the pod's container: redis-server with its volumes as files, or a binary that
// stands for its image.
func (r Runner) Start(ctx context.Context, pod *corev1.Pod) (Container, error) {
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("pod %s: only pods of one container run here", pod.Name)
	}
	c := pod.Spec.Containers[0]
	if _, ok := redisServerConf(c); ok {
		return StartPod(ctx, r.Sources, r.Dir, pod, r.Binaries)
	}
	binary, ok := r.Binaries[c.Image]
	if !ok {
		return nil, fmt.Errorf("pod %s: image %s has no local binary; the local node runs redis-server containers and the images it was given", pod.Name, c.Image)
	}
	podDir := filepath.Join(r.Dir, string(pod.UID))
	volumeDirs, emptyDirs, err := layOutVolumes(ctx, r.Sources, pod, podDir)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	kubeconfig := ""
	if r.Credentials != nil {
		var err error
		if kubeconfig, err = r.Credentials(ctx, pod, podDir); err != nil {
			return nil, fmt.Errorf("pod %s: credentials: %w", pod.Name, err)
		}
	}
	ip := redistest.AllocateIP()
	if err := runInitContainers(ctx, r.Sources, r.Binaries, pod, ip, podDir, volumeDirs, kubeconfig); err != nil {
		return nil, err
	}
	env, err := containerEnv(ctx, r.Sources, pod, c, ip)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	// The kubelet mounts a file at the container's terminationMessagePath and reports what the
	// container wrote there: here, a file of the pod's directory.
	termLog := filepath.Join(podDir, c.Name+".termination-log")
	mapped := hostPaths(c, volumeDirs)
	hostPath := func(p string) string {
		if p == c.TerminationMessagePath || (c.TerminationMessagePath == "" && p == corev1.TerminationMessagePathDefault) {
			return termLog
		}
		return mapped(p)
	}
	p, err := startBinary(pod, c, env, ip, binary, podDir, hostPath, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	p.emptyDirs, p.termLog = emptyDirs, termLog
	return p, nil
}

// InitError is an init container that exited with an error: the pod's container does not
// start, and the kubelet reports the init container's exit and termination message.
type InitError struct {
	Container string
	ExitCode  int
	// Message is the end of its log (terminationMessagePolicy FallbackToLogsOnError).
	Message string
}

func (e *InitError) Error() string {
	return fmt.Sprintf("init container %s exited with %d: %s", e.Container, e.ExitCode, e.Message)
}

// InitContainerStatus is what the kubelet reports of an init container that failed: waiting to
// run again, its last run terminated with its exit code and message.
func (e *InitError) InitContainerStatus(pod *corev1.Pod) corev1.ContainerStatus {
	status := corev1.ContainerStatus{Name: e.Container}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == e.Container {
			status.Image, status.ImageID = c.Image, "local://"+c.Image
		}
	}
	status.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
	status.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: int32(e.ExitCode), Reason: "Error", Message: e.Message}
	return status
}

// runInitContainers runs the pod's init containers to completion, in order, each as the binary
// that stands for its image.
func runInitContainers(ctx context.Context, src Sources, binaries map[string]string, pod *corev1.Pod, ip, podDir string,
	volumeDirs map[string]string, kubeconfig string) error {
	for _, ic := range pod.Spec.InitContainers {
		initBinary, ok := binaries[ic.Image]
		if !ok {
			return fmt.Errorf("pod %s: init container image %s has no local binary", pod.Name, ic.Image)
		}
		env, err := containerEnv(ctx, src, pod, ic, ip)
		if err != nil {
			return fmt.Errorf("pod %s: init container %s: %w", pod.Name, ic.Name, err)
		}
		p, err := startBinary(pod, ic, env, ip, initBinary, podDir, hostPaths(ic, volumeDirs), kubeconfig)
		if err != nil {
			return fmt.Errorf("pod %s: init container %s: %w", pod.Name, ic.Name, err)
		}
		if code := p.wait(); code != 0 {
			return &InitError{Container: ic.Name, ExitCode: code, Message: p.TerminationMessage()}
		}
	}
	return nil
}

// Process is a pod's redis-server container, running as a local process.
type Process struct {
	*redistest.Server
	UID types.UID
	// podDir holds the pod's volumes.
	podDir string
	// readinessProbe is the container's; readiness what it said so far, from the last start on.
	// Both are used by Ready and Restart, which the node's one sync loop calls.
	readinessProbe *corev1.Probe
	readiness      readiness

	lifecycle
}

// RefreshVolumes writes the pod's ConfigMap and Secret volumes again from their objects, as the
// kubelet does every sync period: a running process sees the files change. Each file is
// replaced whole (written aside, then renamed), never seen half-written.
func (p *Process) RefreshVolumes(ctx context.Context, src Sources, pod *corev1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(p.podDir, "volumes", v.Name)
		files, ok, err := objectFiles(ctx, src, pod.Namespace, v)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for name, content := range files {
			path := filepath.Join(dir, name)
			if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
				continue
			}
			if err := os.WriteFile(path+".new", content, 0o600); err != nil {
				return err
			}
			if err := os.Rename(path+".new", path); err != nil {
				return err
			}
		}
	}
	return nil
}

// Start lays out the pod's volumes under dir/<pod UID> and starts its container. The pod must
// have one container, whose command is redis-server and the path of its redis.conf.
func Start(ctx context.Context, src Sources, dir string, pod *corev1.Pod) (*Process, error) {
	return StartPod(ctx, src, dir, pod, nil)
}

// StartPod is Start for a pod with init containers too: each runs to completion first, as the
// binary of binaries that stands for its image; one that fails is an *InitError.
func StartPod(ctx context.Context, src Sources, dir string, pod *corev1.Pod, binaries map[string]string) (*Process, error) {
	if _, ok := redisServerConf(pod.Spec.Containers[0]); len(pod.Spec.Containers) != 1 || !ok {
		return nil, fmt.Errorf("pod %s: only pods of one redis-server container run here", pod.Name)
	}
	podDir := filepath.Join(dir, string(pod.UID))
	volumeDirs, emptyDirs, err := layOutVolumes(ctx, src, pod, podDir)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	conf, dataDir, err := containerConf(pod.Spec.Containers[0], volumeDirs, filepath.Join(podDir, "data"))
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	if err := runInitContainers(ctx, src, binaries, pod, "", podDir, volumeDirs, ""); err != nil {
		return nil, err
	}
	server, err := redistest.StartIn(dataDir, pod.Name, conf)
	if err != nil && !errors.Is(err, redistest.ErrExitedAtStart) {
		return nil, err
	}
	// A redis-server that exits at start (a configuration it refuses) is a container that
	// crashed: the caller restarts it and reports why, as the kubelet does.
	p := &Process{Server: server, UID: pod.UID, podDir: podDir, readinessProbe: pod.Spec.Containers[0].ReadinessProbe}
	p.emptyDirs = emptyDirs
	p.markStarted(false)
	return p, nil
}

// Ready is the container's readiness as the kubelet keeps it from the pods' tcpSocket probe:
// not ready while the process is not running; once running, ready at the first probe that
// connects; then not ready again only after failureThreshold probes in a row failed, one each
// periodSeconds, each given timeoutSeconds. Judged by a single 200 ms connection instead, a pod
// turned not ready whenever a connect to its live redis-server waited on a loaded machine.
func (p *Process) Ready() bool { return p.readiness.check(p.Server, p.readinessProbe) }

// readiness is what a container's readiness probe said since it last started.
type readiness struct {
	ready    bool
	failures int32
	probed   time.Time
}

// probed is what a readiness probe asks of a container's process.
type probed interface {
	Alive() bool
	ListeningWithin(timeout time.Duration) bool
}

// check probes c when the probe is due and returns the readiness; a container without a
// probe is probed each second, ready while it connects.
func (r *readiness) check(c probed, probe *corev1.Probe) bool {
	if !c.Alive() {
		*r = readiness{}
		return false
	}
	if probe == nil {
		probe = &corev1.Probe{}
	}
	period := time.Duration(max(probe.PeriodSeconds, 1)) * time.Second
	if r.ready && time.Since(r.probed) < period {
		return true
	}
	r.probed = time.Now()
	if c.ListeningWithin(time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second) {
		r.ready, r.failures = true, 0
		return true
	}
	r.failures++
	if r.failures >= max(probe.FailureThreshold, 1) {
		r.ready = false
	}
	return r.ready
}

// PodIP is the pod's loopback address, where Redis listens.
func (p *Process) PodIP() string { return p.IP }

// Unhealthy is never true: an exited redis-server is restarted, a hung one is the operator's
// to notice (its liveness probe is the same TCP check as readiness).
func (p *Process) Unhealthy() bool { return false }

// LogPath is Redis's log file.
func (p *Process) LogPath() string { return filepath.Join(p.Dir, "redis.log") }

// ExitCode is redis-server's exit code once it exited.
func (p *Process) ExitCode() (int, bool) { return p.Server.ExitCode() }

// TerminationMessage is the end of what redis-server wrote: why it exited.
func (p *Process) TerminationMessage() string { return p.LogTail(terminationMessageBytes) }

// Restart starts the exited container again, as restartPolicy Always does, and counts it; one
// a test has just started again (redistest.Server.Restart) is left running.
func (p *Process) Restart() error {
	started, err := p.StartIfExited()
	if err != nil {
		return err
	}
	if started {
		p.markStarted(true)
		p.readiness = readiness{} // a new process is ready once it connects
	}
	return nil
}

// Stop ends the process and removes its emptyDir volumes: the pod is gone.
func (p *Process) Stop() {
	p.Kill()
	p.removeEmptyDirs()
}

// lifecycle is what every container keeps of its life: how often it restarted, when it last
// started, and its emptyDir volumes, which go with the pod. Its mutex guards the container's
// other mutable state too.
type lifecycle struct {
	mu        sync.Mutex
	restarts  int32
	started   metav1.Time
	emptyDirs []string
}

func (l *lifecycle) markStarted(restart bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if restart {
		l.restarts++
	}
	l.started = metav1.Now()
}

// Restarts is the container's restart count, and when it last started.
func (l *lifecycle) Restarts() (int32, metav1.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restarts, l.started
}

func (l *lifecycle) removeEmptyDirs() {
	for _, d := range l.emptyDirs {
		_ = os.RemoveAll(d)
	}
}

// layOutVolumes gives each volume of the pod a directory: ConfigMaps and Secrets written as
// files, emptyDirs new under the pod's directory, claims at their volume's directory.
func layOutVolumes(ctx context.Context, src Sources, pod *corev1.Pod, podDir string) (map[string]string, []string, error) {
	dirs := map[string]string{}
	var emptyDirs []string
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(podDir, "volumes", v.Name)
		var err error
		switch {
		case v.ConfigMap != nil || v.Secret != nil:
			var files map[string][]byte
			if files, _, err = objectFiles(ctx, src, pod.Namespace, v); err == nil {
				err = writeFiles(dir, files)
			}
		case v.EmptyDir != nil:
			emptyDirs = append(emptyDirs, dir)
		case v.PersistentVolumeClaim != nil:
			dir, err = src.ClaimDir(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		case v.Projected != nil:
			// The ServiceAccount token the API server injects (kube-api-access-*): pods here
			// get their credentials as a kubeconfig instead (Runner.Credentials).
		default:
			err = fmt.Errorf("only configMap, secret, emptyDir, persistentVolumeClaim and the service account's projected volumes run here")
		}
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		dirs[v.Name] = dir
	}
	return dirs, emptyDirs, nil
}

// pathDirectives are the redis.conf directives whose value is a path in the container.
// execRedisServer is how a shell wrapper of the pod's command starts Redis (cluster mode without
// storage waits there before a restart in the same pod, resources.crashedPrimaryWait).
var execRedisServer = regexp.MustCompile(`exec redis-server (\S+)`)

// redisServerConf is the redis.conf a redis-server container's command names: redis-server <conf>,
// or a /bin/sh -c wrapper that ends in exec redis-server <conf>. The wrapper's script itself is
// not run here: a Redis this runner restarts is a process started again at once, and what the
// wrapper waits for is the real node's test (test/e2e/restarts_test.go).
func redisServerConf(c corev1.Container) (string, bool) {
	switch {
	case len(c.Command) >= 2 && c.Command[0] == "redis-server":
		return c.Command[1], true
	case len(c.Command) == 4 && c.Command[0] == "/bin/sh" && c.Command[1] == "-c" && c.Command[3] == "redis-server":
		if m := execRedisServer.FindStringSubmatch(c.Command[2]); m != nil {
			return m[1], true
		}
	}
	return "", false
}

var pathDirectives = map[string]bool{
	"include": true, "dir": true, "aclfile": true,
	"tls-cert-file": true, "tls-key-file": true, "tls-ca-cert-file": true,
}

// containerConf reads the redis.conf the container's command names and maps the paths in it
// (include, dir, the TLS files) from the container's mounts to their directories. It returns the
// conf and the data directory.
func containerConf(container corev1.Container, volumeDirs map[string]string, defaultDataDir string) (string, string, error) {
	hostPath := hostPaths(container, volumeDirs)
	confPath, _ := redisServerConf(container)
	raw, err := os.ReadFile(hostPath(confPath))
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", confPath, err)
	}
	dataDir := defaultDataDir
	lines := strings.Split(string(raw), "\n")
	for i, line := range lines {
		fields := strings.Fields(line)
		if len(fields) != 2 || !pathDirectives[fields[0]] {
			continue
		}
		lines[i] = fields[0] + " " + hostPath(fields[1])
		if fields[0] == "dir" {
			dataDir = hostPath(fields[1])
		}
	}
	return strings.Join(lines, "\n"), dataDir, nil
}

// hostPaths maps a path inside the container to where it is on this host: under the
// directory of the volume mounted there, or unchanged outside every mount.
func hostPaths(container corev1.Container, volumeDirs map[string]string) func(string) string {
	var mounts [][2]string
	for _, m := range container.VolumeMounts {
		mounts = append(mounts, [2]string{m.MountPath, volumeDirs[m.Name]})
	}
	// The longest mount path first: /etc/redis-auth before /etc.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i][0]) > len(mounts[j][0]) })
	return func(p string) string {
		for _, m := range mounts {
			if p == m[0] || strings.HasPrefix(p, m[0]+"/") {
				return m[1] + strings.TrimPrefix(p, m[0])
			}
		}
		return p
	}
}

// objectFiles are the files of a ConfigMap or Secret volume, from its object; ok is false for
// any other volume.
func objectFiles(ctx context.Context, src Sources, namespace string, v corev1.Volume) (files map[string][]byte, ok bool, err error) {
	switch {
	case v.ConfigMap != nil:
		data, err := src.ConfigMap(ctx, namespace, v.ConfigMap.Name)
		if err != nil {
			return nil, true, err
		}
		files = map[string][]byte{}
		for k, v := range data {
			files[k] = []byte(v)
		}
		return files, true, nil
	case v.Secret != nil:
		data, err := src.Secret(ctx, namespace, v.Secret.SecretName)
		return data, true, err
	}
	return nil, false, nil
}

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// APISources read volumes from the API server; Claims resolves claims to directories.
type APISources struct {
	Client client.Reader
	Claims func(ctx context.Context, namespace, claim string) (string, error)
}

func (s APISources) ConfigMap(ctx context.Context, namespace, name string) (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	data := maps.Clone(cm.Data)
	if data == nil {
		data = map[string]string{}
	}
	for k, v := range cm.BinaryData {
		data[k] = string(v)
	}
	return data, nil
}

func (s APISources) Secret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	secret := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("Secret %s: %w", name, err)
	}
	return secret.Data, nil
}

func (s APISources) ClaimDir(ctx context.Context, namespace, claim string) (string, error) {
	return s.Claims(ctx, namespace, claim)
}
