package podrunner

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// BinaryProcess is a container whose image stands for a local binary (the operator's manager
// of a given version), run with the container's arguments and environment, on the pod's own
// loopback address.
type BinaryProcess struct {
	ip, logPath string
	// termLog is the file at the container's terminationMessagePath.
	termLog   string
	path      string
	args, env []string
	container corev1.Container
	grace     time.Duration

	lifecycle
	exitCode         int
	cmd              *exec.Cmd
	done             chan struct{}
	livenessFailures int32
}

// bindFlag matches an argument that makes a server listen on every address (":8081"): in a
// pod that is the pod's own network; here pods share the host's, so it becomes the pod IP.
var bindFlag = regexp.MustCompile(`^(--?[a-z-]*addr(?:ess)?=):(\d+)$`)

func startBinary(pod *corev1.Pod, c corev1.Container, env []string, ip, binary, podDir string, hostPath func(string) string, kubeconfig string) (*BinaryProcess, error) {
	tmp := filepath.Join(podDir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME="+podDir, "TMPDIR="+tmp)
	if kubeconfig != "" {
		env = append(env, "KUBECONFIG="+kubeconfig)
	}
	// The image's entrypoint is the binary; what follows it, and the args, are its arguments,
	// with paths under the container's mounts mapped to their directories here.
	var args []string
	for i, a := range append(append([]string(nil), c.Command...), c.Args...) {
		if i == 0 && len(c.Command) > 0 {
			continue
		}
		a = bindFlag.ReplaceAllString(a, "${1}"+ip+":${2}")
		if flag, path, ok := strings.Cut(a, "=/"); ok && strings.HasPrefix(flag, "-") {
			a = flag + "=" + hostPath("/"+path)
		} else if strings.HasPrefix(a, "/") {
			a = hostPath(a)
		}
		args = append(args, a)
	}
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return nil, err
	}
	p := &BinaryProcess{ip: ip, logPath: filepath.Join(podDir, c.Name+".log"), path: binary, args: args, env: env, container: c,
		grace: 10 * time.Second}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < p.grace {
		p.grace = time.Duration(*g) * time.Second
	}
	return p, p.start(false)
}

// containerEnv resolves the container's environment: values, the downward API fields OLM and
// our manifests use, Secret and ConfigMap keys, and whole ConfigMaps (envFrom). A missing
// optional source is left out, as the kubelet does.
func containerEnv(ctx context.Context, src Sources, pod *corev1.Pod, c corev1.Container, ip string) ([]string, error) {
	var env []string
	for _, from := range c.EnvFrom {
		ref := from.ConfigMapRef
		if ref == nil {
			return nil, fmt.Errorf("envFrom: only configMapRef runs here")
		}
		data, err := src.ConfigMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if ptr.Deref(ref.Optional, false) {
				continue
			}
			return nil, fmt.Errorf("envFrom: %w", err)
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			env = append(env, from.Prefix+k+"="+data[k])
		}
	}
	for _, e := range c.Env {
		value, ok, err := envValue(ctx, src, pod, e, ip)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env = append(env, e.Name+"="+value)
		}
	}
	return env, nil
}

// envValue is one variable's value; ok is false for a missing optional Secret key.
func envValue(ctx context.Context, src Sources, pod *corev1.Pod, e corev1.EnvVar, ip string) (string, bool, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return e.Value, true, nil
	case from.FieldRef != nil:
		v, err := fieldValue(pod, from.FieldRef.FieldPath, ip)
		return v, err == nil, err
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		data, err := src.Secret(ctx, pod.Namespace, ref.Name)
		raw, found := data[ref.Key]
		switch {
		case err == nil && found:
			return string(raw), true, nil
		case ptr.Deref(ref.Optional, false):
			return "", false, nil
		case err != nil:
			return "", false, err
		}
		return "", false, fmt.Errorf("no key %s", ref.Key)
	}
	return "", false, fmt.Errorf("only values, fieldRefs and secretKeyRefs run here")
}

var mapField = regexp.MustCompile(`^metadata\.(annotations|labels)\['([^']+)'\]$`)

func fieldValue(pod *corev1.Pod, path, ip string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "status.podIP":
		return ip, nil
	}
	if m := mapField.FindStringSubmatch(path); m != nil {
		if m[1] == "annotations" {
			return pod.Annotations[m[2]], nil
		}
		return pod.Labels[m[2]], nil
	}
	return "", fmt.Errorf("fieldPath %s is not supported here", path)
}

func (p *BinaryProcess) start(restart bool) error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.exitCode = cmd.ProcessState.ExitCode()
		p.mu.Unlock()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.livenessFailures = cmd, done, 0
	p.mu.Unlock()
	p.markStarted(restart)
	return nil
}

// PodIP is the pod's loopback address.
func (p *BinaryProcess) PodIP() string { return p.ip }

// ExitCode is the exit code of the process once it exited.
func (p *BinaryProcess) ExitCode() (int, bool) {
	if p.Alive() {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, p.cmd != nil
}

// wait waits until the process exits and returns its exit code.
func (p *BinaryProcess) wait() int {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	<-done
	code, _ := p.ExitCode()
	return code
}

// LogPath is the file holding the container's stdout and stderr.
func (p *BinaryProcess) LogPath() string { return p.logPath }

// TerminationLog is what the container wrote to its terminationMessagePath: the kubelet's
// termination message, whatever the exit.
func (p *BinaryProcess) TerminationLog() string {
	if p.termLog == "" {
		return ""
	}
	raw, _ := os.ReadFile(p.termLog)
	return string(raw)
}

// TerminationMessage is the end of the container's log.
func (p *BinaryProcess) TerminationMessage() string {
	raw, _ := os.ReadFile(p.logPath)
	return string(raw[len(raw)-min(len(raw), terminationMessageBytes):])
}

// Alive is true while the process runs.
func (p *BinaryProcess) Alive() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Ready runs the container's readiness probe (httpGet), or is Alive without one.
func (p *BinaryProcess) Ready() bool {
	return p.Alive() && (p.container.ReadinessProbe == nil || p.probe(p.container.ReadinessProbe))
}

// Unhealthy runs the liveness probe and says whether it failed failureThreshold times in a
// row after its initial delay: the kubelet then restarts the container.
func (p *BinaryProcess) Unhealthy() bool {
	probe := p.container.LivenessProbe
	if probe == nil || !p.Alive() {
		return false
	}
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if time.Since(started.Time) < time.Duration(probe.InitialDelaySeconds)*time.Second {
		return false
	}
	ok := p.probe(probe)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.livenessFailures = 0
		return false
	}
	p.livenessFailures++
	threshold := probe.FailureThreshold
	if threshold == 0 {
		threshold = 3
	}
	return p.livenessFailures >= threshold
}

func (p *BinaryProcess) probe(probe *corev1.Probe) bool {
	get := probe.HTTPGet
	if get == nil {
		return true
	}
	port, err := p.port(get.Port)
	if err != nil {
		return false
	}
	client := http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(p.ip, strconv.Itoa(port)) + get.Path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

func (p *BinaryProcess) port(port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range p.container.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no port named %s", port.StrVal)
}

// Restart ends the process if it still runs, starts it again and counts the restart.
func (p *BinaryProcess) Restart() error {
	p.terminate()
	return p.start(true)
}

// Stop ends the process as the kubelet does (SIGTERM, then SIGKILL after the grace period) and
// removes its emptyDir volumes.
func (p *BinaryProcess) Stop() {
	p.terminate()
	p.removeEmptyDirs()
}

func (p *BinaryProcess) terminate() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(p.grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Terminated is the state the kubelet reports for container c of a pod that exited with code:
// its termination message is what it wrote to its terminationMessagePath, or, when that is
// empty and it failed, the end of its log (terminationMessagePolicy FallbackToLogsOnError).
func Terminated(p Container, c corev1.Container, code int) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Completed"}
	if b, ok := p.(*BinaryProcess); ok {
		t.Message = b.TerminationLog()
	}
	if code != 0 {
		t.Reason = "Error"
		if t.Message == "" && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			t.Message = p.TerminationMessage()
		}
	}
	return t
}
