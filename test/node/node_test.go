//go:build node

package node_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/org/redis-operator/test/images"
	"github.com/org/redis-operator/test/node"
	"github.com/org/redis-operator/test/registry"
	"github.com/org/redis-operator/test/testenv"
)

const redisImage = "docker.io/library/redis:7.2"

// A pod on the real node: the kubelet has containerd pull Redis's image through the registry,
// the CNI bridge gives it an address, runc runs it as its user on a read-only root with the
// memory limit in its cgroup, the readiness probe runs redis-cli in it, and a client inside the
// node's namespace reaches it at the pod's IP. The API server is envtest's: no scheduler or
// controllers, so the pod names its node. Then the node stops and leaves the machine as it was.
func TestAPodRunsOnTheRealNodeAndTheNodeLeavesNothingBehind(t *testing.T) {
	require.NoError(t, node.Required())
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	_, redisImg, err := images.Load(filepath.Join(root, "bin", "images", "redis"))
	require.NoError(t, err, "make redis-image")
	pauseImg, err := images.Pause(staticBuild(t, "github.com/org/redis-operator/test/images/pause"))
	require.NoError(t, err)

	_, cfg := testenv.StartFor(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, testenv.WriteKubeconfig(cfg, kubeconfig))
	apiURL, err := url.Parse(cfg.Host)
	require.NoError(t, err)
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	reg, err := registry.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Stop()) })
	mirrored, err := reg.PushAll(ctx, map[string]v1.Image{redisImage: redisImg, "registry.k8s.io/pause:3.10": pauseImg})
	require.NoError(t, err)

	before := node.Snapshot()
	dir := shortDir(t)
	name := "node-" + strconv.Itoa(os.Getpid()%100000)
	network, err := node.CreateNetwork("net-" + strconv.Itoa(os.Getpid()%100000))
	require.NoError(t, err)
	netns, addrs, err := network.AddNode(name, 1)
	require.NoError(t, err)
	n, err := node.Start(node.Config{Dir: dir, Name: name, Netns: netns, Addrs: addrs, Network: network, Kubeconfig: kubeconfig,
		ForwardFromMachine: []string{apiURL.Host, reg.Host}, RegistryHost: reg.Host, Mirrored: mirrored})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.Stop()
			network.Delete()
			node.Restore(before)
		}
	})
	t.Cleanup(func() {
		if t.Failed() && !stopped {
			t.Logf("kubelet:\n%s\nkube-proxy:\n%s", n.Log("kubelet"), n.Log("kube-proxy"))
			out, _ := n.Netns.Command(context.Background(), "iptables-save").CombinedOutput()
			t.Logf("iptables in the node's namespace:\n%s", out)
		}
	})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		assert.True(c, nodeReady(got), "node Ready")
	}, 90*time.Second, time.Second, "the kubelet registers a Ready node")

	_, err = clientset.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "redis"},
		Spec: corev1.PodSpec{
			NodeName:                     name,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](images.RedisUID), FSGroup: ptr.To[int64](images.RedisUID)},
			Containers: []corev1.Container{{
				Name: "redis", Image: redisImage,
				Command: []string{"redis-server", "--port", "6379", "--save", "", "--dir", "/data", "--protected-mode", "no"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")}},
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"redis-cli", "ping"}}},
					PeriodSeconds: 1},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	start := time.Now()
	_, err = clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var running *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := clientset.CoreV1().Pods("default").Get(ctx, "redis", metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		assert.True(c, podReady(got), "pod Ready: %+v", got.Status)
		running = got
	}, 120*time.Second, 250*time.Millisecond, "the pod runs and its probe passes")
	t.Logf("pod Ready %.1fs after its creation, at %s", time.Since(start).Seconds(), running.Status.PodIP)
	assert.True(t, strings.HasPrefix(running.Status.PodIP, "10.244.1."), running.Status.PodIP)

	client := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(running.Status.PodIP, "6379"),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return n.Netns.Dial(ctx, network, addr)
		}})
	defer client.Close()
	require.NoError(t, client.Set(ctx, "k", "v", 0).Err(), "reached at the pod's IP inside the node's namespace")
	assert.Equal(t, "v", client.Get(ctx, "k").Val())

	// Limits alone make the pod Guaranteed, whose cgroups sit right under kubepods (the other
	// classes have a level of their own), in the node's own cgroup root.
	require.Equal(t, corev1.PodQOSGuaranteed, running.Status.QOSClass)
	// A Service's ClusterIP, routed by kube-proxy's rules to the pod. envtest runs no
	// controllers: the test writes the EndpointSlice the EndpointSlice controller would.
	svc, err := clientset.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "redis"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 6379, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = clientset.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "redis-1", Labels: map[string]string{discoveryv1.LabelServiceName: "redis"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{running.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](6379), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	viaService := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(svc.Spec.ClusterIP, "6379"), MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return n.Netns.Dial(ctx, network, addr)
		}})
	defer viaService.Close()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "v", viaService.Get(ctx, "k").Val())
	}, 30*time.Second, 250*time.Millisecond, "kube-proxy routes the ClusterIP %s to the pod", svc.Spec.ClusterIP)

	limits, err := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/memory%s/kubepods/pod%s/*/memory.limit_in_bytes", n.CgroupRoot(), running.UID))
	require.NoError(t, err)
	var found bool
	for _, l := range limits {
		b, err := os.ReadFile(l)
		require.NoError(t, err)
		found = found || strings.TrimSpace(string(b)) == strconv.Itoa(64<<20)
	}
	assert.True(t, found, "a container cgroup limited to 64Mi among %v", limits)

	// Pods first, then the node.
	require.NoError(t, clientset.CoreV1().Pods("default").Delete(ctx, "redis", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := clientset.CoreV1().Pods("default").Get(ctx, "redis", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "pod gone: %v", err)
	}, 60*time.Second, 250*time.Millisecond, "the kubelet removes the deleted pod")
	n.Stop()
	network.Delete()
	node.Restore(before)
	stopped = true
	assert.Equal(t, before, node.Snapshot(), "the machine after the node stopped")
	assert.Empty(t, node.MountPointsUnder(dir))
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
