package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
)

func redisCluster(mutate func(*cachev1.RedisCluster)) *cachev1.RedisCluster {
	rc := &cachev1.RedisCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions", Namespace: "team-a", UID: types.UID("uid-1")},
		Spec:       cachev1.RedisClusterSpec{Replicas: 3, Version: "7.2"},
	}
	if mutate != nil {
		mutate(rc)
	}
	return rc
}

func TestDesiredStatefulSet(t *testing.T) {
	tests := []struct {
		name         string
		rc           *cachev1.RedisCluster
		wantReplicas int32
		wantImage    string
	}{
		{"sample", redisCluster(nil), 3, "redis:7.2"},
		{"single node", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = 1 }), 1, "redis:7.2"},
		{"patch version", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Version = "7.2.5" }), 3, "redis:7.2.5"},
		{"version not defaulted yet", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Version = "" }), 3, "redis:" + cachev1.DefaultVersion},
		{"image override", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Image = "mirror.example.com/redis:7.2" }), 3, "mirror.example.com/redis:7.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := resources.DesiredStatefulSet(tt.rc)

			assert.Equal(t, "sessions", *sts.Name)
			assert.Equal(t, "team-a", *sts.Namespace)
			assert.Equal(t, tt.wantReplicas, *sts.Spec.Replicas)
			assert.Equal(t, "sessions-headless", *sts.Spec.ServiceName)
			assert.Equal(t, resources.SelectorLabels(tt.rc), sts.Spec.Selector.MatchLabels)
			assert.Subset(t, sts.Spec.Template.Labels, sts.Spec.Selector.MatchLabels, "the selector must match the pods")

			require.Len(t, sts.OwnerReferences, 1)
			owner := sts.OwnerReferences[0]
			assert.Equal(t, "RedisCluster", *owner.Kind)
			assert.Equal(t, "cache.example.com/v1", *owner.APIVersion)
			assert.Equal(t, types.UID("uid-1"), *owner.UID)
			assert.True(t, *owner.Controller)
			assert.True(t, *owner.BlockOwnerDeletion)

			pod := sts.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			assert.Equal(t, tt.wantImage, *c.Image)
			require.Len(t, c.Ports, 1)
			assert.Equal(t, int32(6379), *c.Ports[0].ContainerPort)
			assert.NotNil(t, c.ReadinessProbe)
			assert.NotNil(t, c.LivenessProbe)
		})
	}
}

// The restricted Pod Security Standard: what a namespace with enforce=restricted admits.
func TestStatefulSetMeetsRestrictedPodSecurity(t *testing.T) {
	pod := resources.DesiredStatefulSet(redisCluster(nil)).Spec.Template.Spec

	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, *pod.SecurityContext.SeccompProfile.Type)
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		require.NotNil(t, sc, "container %s", *c.Name)
		assert.False(t, *sc.AllowPrivilegeEscalation)
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
		assert.Empty(t, sc.Capabilities.Add)
		assert.True(t, *sc.ReadOnlyRootFilesystem)
	}
	for _, v := range pod.Volumes {
		assert.Nil(t, v.HostPath, "volume %s", *v.Name)
	}
}

func TestConfigHashFollowsRedisConf(t *testing.T) {
	rc := redisCluster(nil)
	sts := resources.DesiredStatefulSet(rc)
	cm := resources.DesiredConfigMap(rc)

	conf := cm.Data[resources.ConfigFileName]
	assert.Contains(t, conf, "port 6379\n")
	assert.Equal(t, resources.ConfigHash(conf), sts.Spec.Template.Annotations[resources.ConfigHashAnnotation])
	assert.NotEqual(t, resources.ConfigHash(conf), resources.ConfigHash(conf+"maxmemory 1mb\n"))
}

func TestDesiredServices(t *testing.T) {
	rc := redisCluster(nil)
	tests := []struct {
		name          string
		svc           *corev1ac.ServiceApplyConfiguration
		wantName      string
		wantClusterIP *string
		wantNotReady  bool
	}{
		{"headless", resources.DesiredHeadlessService(rc), "sessions-headless", ptr.To(corev1.ClusterIPNone), true},
		// The API server allocates the client Service's ClusterIP.
		{"client", resources.DesiredClientService(rc), "sessions", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := tt.svc
			assert.Equal(t, tt.wantName, *svc.Name)
			assert.Equal(t, tt.wantClusterIP, svc.Spec.ClusterIP)
			assert.Equal(t, tt.wantNotReady, ptr.Deref(svc.Spec.PublishNotReadyAddresses, false))
			assert.Equal(t, resources.SelectorLabels(rc), svc.Spec.Selector)
			require.Len(t, svc.Spec.Ports, 1)
			assert.Equal(t, int32(6379), *svc.Spec.Ports[0].Port)
			require.Len(t, svc.OwnerReferences, 1)
			assert.Equal(t, "sessions", *svc.OwnerReferences[0].Name)
		})
	}
}
