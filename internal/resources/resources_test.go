package resources_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
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

func TestRedisImagesFromEnv(t *testing.T) {
	images := resources.RedisImagesFromEnv([]string{
		"RELATED_IMAGE_REDIS_7_2=example.com/redis@sha256:aa",
		"RELATED_IMAGE_REDIS_7_2_4=example.com/redis:7.2.4",
		"RELATED_IMAGE_REDIS_LATEST=example.com/redis:latest", // not a version
		"RELATED_IMAGE_REDIS_7_4=",                            // empty: none
		"RELATED_IMAGE_OTHER=example.com/other:1",
		"PATH=/usr/bin",
	})
	assert.Equal(t, resources.RedisImages{"7.2": "example.com/redis@sha256:aa", "7.2.4": "example.com/redis:7.2.4"}, images)
	assert.Equal(t, "RELATED_IMAGE_REDIS_7_2", resources.RelatedImageEnv("7.2"))
}

func TestDesiredStatefulSet(t *testing.T) {
	pinned := resources.RedisImages{"7.2": "mirror.example.com/redis@sha256:0123"}
	tests := []struct {
		name         string
		rc           *cachev1.RedisCluster
		wantReplicas int32
		images       resources.RedisImages // the operator's, by version
		wantImage    string
	}{
		{"sample", redisCluster(nil), 3, nil, "redis:7.2"},
		{"the operator's image of the version", redisCluster(nil), 3, pinned, pinned["7.2"]},
		{"the operator has no image of the version", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Version = "7.4" }), 3, pinned, "redis:7.4"},
		{"image override beats the operator's", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Image = "mine/redis:7.2" }), 3, pinned, "mine/redis:7.2"},
		{"single node", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Replicas = 1 }), 1, nil, "redis:7.2"},
		{"patch version", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Version = "7.2.5" }), 3, pinned, "redis:7.2.5"},
		{"version not defaulted yet", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Version = "" }), 3, nil, "redis:" + cachev1.DefaultVersion},
		{"image override", redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Image = "mirror.example.com/redis:7.2" }), 3, nil, "mirror.example.com/redis:7.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := resources.DesiredStatefulSet(tt.rc, resources.StatefulSetOptions{Replicas: tt.rc.Spec.Replicas, ConfigHash: "h", RedisImages: tt.images})

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
	pod := resources.DesiredStatefulSet(redisCluster(nil), resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec

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

func TestRedisConf(t *testing.T) {
	tests := []struct {
		name        string
		rc          *cachev1.RedisCluster
		contains    []string
		notContains []string
	}{
		{"defaults", redisCluster(nil),
			[]string{"port 6379\n", "replicaof 127.0.0.1 1\n", "replica-read-only yes\n", "include /etc/redis-auth/auth.conf\n", "repl-diskless-sync-delay 0\n"},
			[]string{"appendonly yes", "requirepass"}},
		{"storage turns on the append-only file", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
		}), []string{"appendonly yes\n"}, nil},
		{"user settings, sorted", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.Config = map[string]cachev1.ConfigValue{"maxmemory-policy": "allkeys-lru", "maxmemory": "256mb"}
		}), []string{"maxmemory 256mb\nmaxmemory-policy allkeys-lru\n"}, nil},
		{"no write safety unless asked", redisCluster(nil), nil, []string{"min-replicas"}},
		{"write safety with the default lag", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.Failover = &cachev1.FailoverSpec{MinReplicasToWrite: ptr.To[int32](1)}
		}), []string{"min-replicas-to-write 1\nmin-replicas-max-lag 10\n"}, nil},
		{"TLS only, for clients and replication", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls"}
		}), []string{"port 0\ntls-port 6379\n", "tls-cert-file /etc/redis-tls/tls.crt\ntls-key-file /etc/redis-tls/tls.key\ntls-ca-cert-file /etc/redis-tls/ca.crt\n",
			"tls-replication yes\n", "tls-auth-clients no\n"}, []string{"\nport 6379", "tls-cluster"}},
		{"TLS with client certificates", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls", ClientAuth: true}
		}), []string{"tls-auth-clients yes\n"}, nil},
		{"a lag in part seconds is rounded up", redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.Failover = &cachev1.FailoverSpec{MinReplicasToWrite: ptr.To[int32](2), MaxReplicaLag: &metav1.Duration{Duration: 1500 * time.Millisecond}}
		}), []string{"min-replicas-to-write 2\nmin-replicas-max-lag 2\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := resources.RedisConf(tt.rc)
			for _, want := range tt.contains {
				assert.Contains(t, conf, want)
			}
			for _, unwanted := range tt.notContains {
				assert.NotContains(t, conf, unwanted)
			}
			// The fence is the last word on replication: nothing after it can undo it.
			assert.True(t, strings.HasSuffix(conf, "replicaof 127.0.0.1 1\n"))
		})
	}
}

func TestConfigHash(t *testing.T) {
	rc := redisCluster(nil)
	h := resources.ConfigHash(rc)

	assert.Equal(t, h, resources.ConfigHash(redisCluster(nil)), "stable")
	assert.NotEqual(t, h, resources.ConfigHash(redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Config = map[string]cachev1.ConfigValue{"maxmemory": "1mb"}
	})), "follows redis.conf")
	assert.Len(t, h, 16)
}

// A live setting is in redis.conf (a node that starts reads it) but not in the hash: the
// operator sets it on running nodes, and a change of it, or its arrival with a new build, rolls
// no pod. A user's value for it in spec.config is its value, written once.
func TestALiveSettingIsInRedisConfButRollsNoPod(t *testing.T) {
	rc := redisCluster(nil)
	assert.Contains(t, resources.RedisConf(rc), "\nrepl-ping-replica-period 1\n")
	assert.Equal(t, []resources.LiveSetting{{Directive: "repl-ping-replica-period", Value: "1"}, {Directive: "maxmemory", Value: "0"}},
		resources.LiveSettings(rc))

	slower := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Config = map[string]cachev1.ConfigValue{"repl-ping-replica-period": "5"}
	})
	conf := resources.RedisConf(slower)
	assert.Equal(t, 1, strings.Count(conf, "repl-ping-replica-period"), conf)
	assert.Contains(t, conf, "\nrepl-ping-replica-period 5\n")
	assert.Equal(t, int64(5), resources.ReplicaPingPeriod(slower))
	assert.Equal(t, resources.ConfigHash(rc), resources.ConfigHash(slower), "a live setting's change rolls nothing")

	sharded := redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3} })
	assert.Equal(t, []resources.LiveSetting{{Directive: "maxmemory", Value: "0"}}, resources.LiveSettings(sharded),
		"Redis Cluster fails over by itself: no vouching")
	assert.NotContains(t, resources.RedisConf(sharded), "repl-ping-replica-period")
}

func TestAuthConfEscapesEveryByte(t *testing.T) {
	conf := resources.AuthConf("a\"b \n\\c")

	assert.Equal(t, "user default on #"+resources.PasswordHash("a\"b \n\\c")+" ~* &* +@all\n"+
		"masterauth \"\\x61\\x22\\x62\\x20\\x0a\\x5c\\x63\"\n", conf)
	assert.Equal(t, 2, strings.Count(conf, "\n"), "a password cannot add a line")
}

func TestAuthConfKeepsThePreviousPasswordValidBesideTheNewOne(t *testing.T) {
	conf := resources.AuthConf("new", "old")
	assert.True(t, strings.HasPrefix(conf, "user default on #"+resources.PasswordHash("new")+" #"+resources.PasswordHash("old")+" ~* &* +@all\n"))
	got, ok := resources.PasswordInAuthConf(conf)
	assert.True(t, ok)
	assert.Equal(t, "new", got, "replicas give the new one")
	// Redis's own name for a password
	assert.Equal(t, "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437", resources.PasswordHash("new"))
}

func TestPasswordInAuthConfReadsWhatAuthConfWrote(t *testing.T) {
	for _, password := range []string{"a\"b \n\\c", "plain", "ünïcode \x00 byte"} {
		got, ok := resources.PasswordInAuthConf(resources.AuthConf(password))
		assert.True(t, ok, "%q", password)
		assert.Equal(t, password, got)
	}
	// the file before Redis 7's users: requirepass and masterauth
	got, ok := resources.PasswordInAuthConf("requirepass \"\\x61\"\nmasterauth \"\\x61\"\n")
	assert.True(t, ok)
	assert.Equal(t, "a", got)
	for _, conf := range []string{"", "requirepass plain\n", `masterauth "\x6"`, `masterauth "\xzz"`, "masterauth plain\n"} {
		_, ok := resources.PasswordInAuthConf(conf)
		assert.False(t, ok, "%q is not a password file", conf)
	}
}

func TestRandomPassword(t *testing.T) {
	a, b := resources.RandomPassword(), resources.RandomPassword()
	assert.Len(t, a, 32)
	assert.NotEqual(t, a, b)
	assert.Regexp(t, "^[a-zA-Z0-9]{32}$", a)
}

func TestStatefulSetMountsTheTLSSecretOnlyWithTLS(t *testing.T) {
	plain := resources.DesiredStatefulSet(redisCluster(nil), resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec
	for _, v := range plain.Volumes {
		assert.NotEqual(t, "tls", *v.Name)
	}
	withTLS := resources.DesiredStatefulSet(redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls"}
	}), resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec
	var secret string
	for _, v := range withTLS.Volumes {
		if *v.Name == "tls" {
			secret = *v.Secret.SecretName
		}
	}
	assert.Equal(t, "sessions-tls", secret, "the tls volume is the user's Secret")
	var mounted bool
	for _, m := range withTLS.Containers[0].VolumeMounts {
		if *m.Name == "tls" {
			mounted = *m.MountPath == "/etc/redis-tls" && *m.ReadOnly
		}
	}
	assert.True(t, mounted, "read-only at the path redis.conf names")
}

func TestStatefulSetStorageAndScheduling(t *testing.T) {
	class := "fast"
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("5Gi"), StorageClassName: &class, WhenScaled: cachev1.PVCDelete}
		rc.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		rc.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		rc.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	})
	sts := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 4, ConfigHash: "abc"})

	assert.Equal(t, int32(4), *sts.Spec.Replicas, "the controller may keep a pod for a switchover")
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, *sts.Spec.UpdateStrategy.Type, "the operator replaces pods, replicas first")
	assert.Equal(t, "abc", sts.Spec.Template.Annotations[resources.ConfigHashAnnotation])
	require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
	claim := sts.Spec.VolumeClaimTemplates[0]
	assert.Equal(t, "data", *claim.Name)
	assert.Equal(t, "fast", *claim.Spec.StorageClassName)
	assert.Equal(t, resource.MustParse("5Gi"), (*claim.Spec.Resources.Requests)[corev1.ResourceStorage])
	assert.Equal(t, appsv1.RetainPersistentVolumeClaimRetentionPolicyType, *sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted)
	assert.Equal(t, appsv1.DeletePersistentVolumeClaimRetentionPolicyType, *sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled)
	pod := sts.Spec.Template.Spec
	for _, v := range pod.Volumes {
		assert.NotEqual(t, "data", *v.Name, "no emptyDir beside the claim")
	}
	assert.Equal(t, resource.MustParse("1Gi"), (*pod.Containers[0].Resources.Limits)[corev1.ResourceMemory])
	assert.Equal(t, map[string]string{"disk": "ssd"}, pod.NodeSelector)
	require.Len(t, pod.Tolerations, 1)
	assert.Equal(t, "dedicated", *pod.Tolerations[0].Key)
	require.Len(t, pod.TopologySpreadConstraints, 2, "spread across nodes and zones by default")
	assert.Equal(t, corev1.LabelHostname, *pod.TopologySpreadConstraints[0].TopologyKey)
	assert.Equal(t, corev1.LabelTopologyZone, *pod.TopologySpreadConstraints[1].TopologyKey)
}

// The default placement keeps the copies of a shard's data on different machines where the
// nodes allow (preferred anti-affinity by hostname among the shard's pods: in cluster mode the
// shard's alone, so that six pods on three nodes put each shard's two on two nodes), and
// spreads every pod of the RedisCluster over nodes and zones; what the user gives replaces
// each default, and only it.
func TestPlacementDefaultsAndTheUsersReplaceThem(t *testing.T) {
	antiAffinity := func(pod *corev1ac.PodSpecApplyConfiguration) map[string]string {
		require.NotNil(t, pod.Affinity)
		require.NotNil(t, pod.Affinity.PodAntiAffinity)
		terms := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		require.Len(t, terms, 1)
		assert.Equal(t, int32(100), *terms[0].Weight)
		assert.Equal(t, corev1.LabelHostname, *terms[0].PodAffinityTerm.TopologyKey)
		assert.Empty(t, pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "preferred: fewer nodes than pods still run them all")
		return terms[0].PodAffinityTerm.LabelSelector.MatchLabels
	}
	spread := func(pod *corev1ac.PodSpecApplyConfiguration) []string {
		var keys []string
		for _, c := range pod.TopologySpreadConstraints {
			assert.Equal(t, corev1.ScheduleAnyway, *c.WhenUnsatisfiable)
			assert.Equal(t, int32(1), *c.MaxSkew)
			keys = append(keys, *c.TopologyKey)
		}
		return keys
	}

	rc := redisCluster(nil)
	pod := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec
	assert.Equal(t, resources.SelectorLabels(rc), antiAffinity(pod), "replication: every pod apart")
	assert.Equal(t, []string{corev1.LabelHostname, corev1.LabelTopologyZone}, spread(pod))

	sharded := redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3} })
	pod = resources.DesiredStatefulSet(sharded, resources.StatefulSetOptions{Replicas: 2, Shard: 1}).Spec.Template.Spec
	apart := antiAffinity(pod)
	assert.Equal(t, "1", apart[resources.LabelShard], "cluster mode: a shard's pods apart")
	for k, v := range resources.SelectorLabels(sharded) {
		assert.Equal(t, v, apart[k])
	}
	assert.Equal(t, []string{corev1.LabelHostname, corev1.LabelTopologyZone}, spread(pod))
	for _, c := range pod.TopologySpreadConstraints {
		assert.Equal(t, resources.SelectorLabels(sharded), c.LabelSelector.MatchLabels, "every shard's pods spread together")
	}

	own := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"redis"}}}}}}}}
	})
	pod = resources.DesiredStatefulSet(own, resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec
	assert.Nil(t, pod.Affinity.PodAntiAffinity, "the user's affinity replaces the default")
	require.NotNil(t, pod.Affinity.NodeAffinity)
	assert.Len(t, pod.TopologySpreadConstraints, 2, "and leaves the default spread")

	ownSpread := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
	})
	pod = resources.DesiredStatefulSet(ownSpread, resources.StatefulSetOptions{Replicas: 3}).Spec.Template.Spec
	require.Len(t, pod.TopologySpreadConstraints, 1, "the user's constraints replace both defaults")
	assert.Equal(t, "rack", *pod.TopologySpreadConstraints[0].TopologyKey)
	assert.NotNil(t, pod.Affinity.PodAntiAffinity, "and leave the default anti-affinity")
}

func TestPodDisruptionBudget(t *testing.T) {
	pdb := resources.DesiredPodDisruptionBudget(redisCluster(nil))

	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	assert.Equal(t, resources.SelectorLabels(redisCluster(nil)), pdb.Spec.Selector.MatchLabels)
}

func TestDesiredServices(t *testing.T) {
	rc := redisCluster(nil)
	tests := []struct {
		name          string
		svc           *corev1ac.ServiceApplyConfiguration
		wantName      string
		wantClusterIP *string
		wantNotReady  bool
		wantRole      string
	}{
		{"headless", resources.DesiredHeadlessService(rc), "sessions-headless", ptr.To(corev1.ClusterIPNone), true, ""},
		// The API server allocates the other Services' ClusterIPs.
		{"client", resources.DesiredClientService(rc), "sessions", nil, false, "primary"},
		{"replicas", resources.DesiredReplicasService(rc), "sessions-replicas", nil, false, "replica"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := tt.svc
			assert.Equal(t, tt.wantName, *svc.Name)
			assert.Equal(t, tt.wantClusterIP, svc.Spec.ClusterIP)
			assert.Equal(t, tt.wantNotReady, ptr.Deref(svc.Spec.PublishNotReadyAddresses, false))
			for k, v := range resources.SelectorLabels(rc) {
				assert.Equal(t, v, svc.Spec.Selector[k])
			}
			assert.Equal(t, tt.wantRole, svc.Spec.Selector[resources.LabelRole])
			require.Len(t, svc.Spec.Ports, 1)
			assert.Equal(t, int32(6379), *svc.Spec.Ports[0].Port)
			require.Len(t, svc.OwnerReferences, 1)
			assert.Equal(t, "sessions", *svc.OwnerReferences[0].Name)
		})
	}
}

// TestExternalServicesFollowTheRolesOutside: spec.expose adds two Services of its type that
// select as the in-cluster ones do (the primary; the replicas), with its annotations and, for a
// LoadBalancer only, its source ranges; the in-cluster Services do not change.
func TestExternalServicesFollowTheRolesOutside(t *testing.T) {
	assert.Empty(t, resources.DesiredExternalServices(redisCluster(nil)), "none without spec.expose")

	for _, tc := range []struct {
		expose      cachev1.ExposeSpec
		wantRanges  []string
		wantAnnotes map[string]string
	}{
		{cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}, nil, nil},
		{cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer, Annotations: map[string]string{"metallb.universe.tf/address-pool": "redis"},
			LoadBalancerSourceRanges: []string{"203.0.113.0/24"}}, []string{"203.0.113.0/24"}, map[string]string{"metallb.universe.tf/address-pool": "redis"}},
	} {
		t.Run(string(tc.expose.Type), func(t *testing.T) {
			rc := redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Expose = &tc.expose })
			services := resources.DesiredExternalServices(rc)
			require.Len(t, services, 2)
			for i, want := range []struct{ name, role string }{{"sessions-ext", "primary"}, {"sessions-ext-ro", "replica"}} {
				svc := services[i]
				assert.Equal(t, want.name, *svc.Name)
				assert.Equal(t, corev1.ServiceType(tc.expose.Type), *svc.Spec.Type)
				assert.Equal(t, want.role, svc.Spec.Selector[resources.LabelRole])
				assert.Equal(t, rc.Name, svc.Spec.Selector[resources.LabelInstance])
				assert.Equal(t, tc.wantRanges, svc.Spec.LoadBalancerSourceRanges)
				assert.Equal(t, tc.wantAnnotes, svc.Annotations)
				assert.Equal(t, int32(6379), *svc.Spec.Ports[0].Port)
				assert.Nil(t, svc.Spec.Ports[0].NodePort, "Kubernetes chooses the node port")
				require.Len(t, svc.OwnerReferences, 1)
			}
			assert.Equal(t, corev1.ServiceTypeClusterIP, *resources.DesiredClientService(rc).Spec.Type, "the in-cluster Service stays")
		})
	}

	cluster := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3}
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
	})
	assert.Empty(t, resources.DesiredExternalServices(cluster), "not in cluster mode: a Service per node there")
}

func TestInClusterModeEachNodeHasAServiceOfItsOwnWithItsBusPort(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3}
		rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeLoadBalancer, Annotations: map[string]string{"a": "b"},
			LoadBalancerSourceRanges: []string{"203.0.113.0/24"}}
	})
	services := resources.DesiredNodeServices(rc, []string{"sessions-shard0-0", "sessions-shard2-1"})
	require.Len(t, services, 2)
	svc := services[1]
	assert.Equal(t, "sessions-shard2-1-ext", *svc.Name)
	assert.Equal(t, "sessions-shard2-1", svc.Spec.Selector[resources.LabelPodName], "its one pod")
	assert.Equal(t, rc.Name, svc.Spec.Selector[resources.LabelInstance])
	assert.Equal(t, resources.NodeServiceComponent, svc.Labels[resources.LabelComponent])
	assert.True(t, *svc.Spec.PublishNotReadyAddresses, "its peers reach a node that is not ready yet")
	assert.Equal(t, corev1.ServiceTypeLoadBalancer, *svc.Spec.Type)
	assert.Equal(t, map[string]string{"a": "b"}, svc.Annotations)
	assert.Equal(t, []string{"203.0.113.0/24"}, svc.Spec.LoadBalancerSourceRanges)
	require.Len(t, svc.Spec.Ports, 2)
	assert.Equal(t, int32(6379), *svc.Spec.Ports[0].Port)
	assert.Equal(t, "bus", *svc.Spec.Ports[1].Name)
	assert.Equal(t, int32(16379), *svc.Spec.Ports[1].Port)
	assert.Equal(t, intstr.FromInt32(16379), *svc.Spec.Ports[1].TargetPort)
	require.Len(t, svc.OwnerReferences, 1)

	rc.Spec.Expose = nil
	assert.Empty(t, resources.DesiredNodeServices(rc, []string{"sessions-shard0-0"}), "none without spec.expose")
	replication := redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort} })
	assert.Empty(t, resources.DesiredNodeServices(replication, []string{"sessions-0"}), "none in replication mode")
}

func TestANodesOutsideAddressIsItsServicesOnceKnown(t *testing.T) {
	ports := []corev1.ServicePort{{Name: "redis", Port: 6379, NodePort: 30001}, {Name: "bus", Port: 16379, NodePort: 30002}}
	nodePort := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: ports}}
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports}}
	for _, tc := range []struct {
		name      string
		svc       *corev1.Service
		hostIP    string
		ingress   []corev1.LoadBalancerIngress
		ip        string
		port, bus int32
		ok        bool
	}{
		{"a NodePort: the pod's Kubernetes node and the node ports", nodePort, "10.87.0.11", nil, "10.87.0.11", 30001, 30002, true},
		{"a NodePort of a pod not scheduled yet", nodePort, "", nil, "", 30001, 30002, false},
		{"a LoadBalancer: its address and the Service's ports", lb, "10.87.0.11", []corev1.LoadBalancerIngress{{IP: "10.87.1.1"}}, "10.87.1.1", 6379, 16379, true},
		{"a LoadBalancer without an address yet", lb, "10.87.0.11", nil, "", 6379, 16379, false},
		{"a LoadBalancer that gives only a name", lb, "10.87.0.11", []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}, "", 6379, 16379, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc.DeepCopy()
			svc.Status.LoadBalancer.Ingress = tc.ingress
			ip, port, bus, ok := resources.NodeOutside(svc, tc.hostIP)
			assert.Equal(t, tc.ip, ip)
			assert.Equal(t, tc.port, port)
			assert.Equal(t, tc.bus, bus)
			assert.Equal(t, tc.ok, ok)
		})
	}
}

func TestPodOrdinal(t *testing.T) {
	tests := []struct {
		name   string
		want   int
		wantOK bool
	}{
		{"sessions-0", 0, true},
		{"my-redis-12", 12, true},
		{"sessions", 0, false},
		{"sessions-x", 0, false},
		{"sessions-", 0, false},
	}
	for _, tt := range tests {
		got, ok := resources.PodOrdinal(tt.name)
		assert.Equal(t, tt.wantOK, ok, tt.name)
		if tt.wantOK {
			assert.Equal(t, tt.want, got, tt.name)
		}
	}
}

func TestARestoredClusterGetsTheRestoreInitContainer(t *testing.T) {
	restore := &cachev1.RestoreStatus{Backup: "nightly", Location: "s3://backups/team-a/src/nightly.rdb", Checksum: "sha256:ab",
		Destination: cachev1.BackupDestination{S3: &cachev1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "backups",
			CredentialsSecret: "s3", CABundle: &cachev1.SecretKeyRef{Name: "s3-ca", Key: "ca.crt"}}}}
	opts := resources.StatefulSetOptions{Replicas: 3, OperatorImage: "example.com/redis-operator:v1", Restore: restore}

	plain := resources.DesiredStatefulSet(redisCluster(nil), opts).Spec.Template.Spec
	assert.Empty(t, plain.InitContainers, "without spec.restore, no init container")

	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "nightly"}
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	})
	pod := resources.DesiredStatefulSet(rc, opts).Spec.Template.Spec
	require.Len(t, pod.InitContainers, 1)
	c := pod.InitContainers[0]
	assert.Equal(t, "example.com/redis-operator:v1", *c.Image)
	assert.Equal(t, []string{"/manager", "restore"}, c.Command)
	assert.Equal(t, []string{"--data-dir=/data", "--aof=true", "--ca-file=/etc/redis-restore-ca/ca.crt"}, c.Args)
	// The credentials come from their Secret, optional: once restored, the Secret may go.
	for _, e := range c.Env[1:] {
		require.NotNil(t, e.ValueFrom.SecretKeyRef, *e.Name)
		assert.Equal(t, "s3", *e.ValueFrom.SecretKeyRef.Name)
		assert.True(t, *e.ValueFrom.SecretKeyRef.Optional)
	}
	// What to restore comes from the <name>-restore ConfigMap, optional: deleted once done.
	require.Len(t, c.EnvFrom, 1)
	assert.Equal(t, "sessions-restore", *c.EnvFrom[0].ConfigMapRef.Name)
	assert.True(t, *c.EnvFrom[0].ConfigMapRef.Optional)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)

	cms := resources.DesiredRestoreConfigMaps(rc, restore)
	require.Len(t, cms, 1)
	assert.Equal(t, map[string]string{"RESTORE_LOCATION": restore.Location, "RESTORE_CHECKSUM": "sha256:ab",
		"RESTORE_ENDPOINT": "https://s3.example.com", "RESTORE_REGION": ""}, cms[0].Data)

	// In cluster mode each shard's first node reads its own shard's ConfigMap
	rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 2}
	restore.Shards = []cachev1.ShardBackup{{Name: "s0", Location: "s3://b/k/s0.rdb", Checksum: "sha256:a0"}, {Name: "s1", Location: "s3://b/k/s1.rdb", Checksum: "sha256:a1"}}
	cms = resources.DesiredRestoreConfigMaps(rc, restore)
	require.Len(t, cms, 2)
	for i, cm := range cms {
		assert.Equal(t, fmt.Sprintf("sessions-shard%d-restore", i), *cm.Name)
		assert.Equal(t, restore.Shards[i].Location, cm.Data["RESTORE_LOCATION"])
		assert.Equal(t, restore.Shards[i].Checksum, cm.Data["RESTORE_CHECKSUM"])
		opts.Shard = i
		envFrom := resources.DesiredStatefulSet(rc, opts).Spec.Template.Spec.InitContainers[0].EnvFrom
		assert.Equal(t, *cm.Name, *envFrom[0].ConfigMapRef.Name, "shard %d's init container reads its own", i)
	}
	assert.False(t, resources.AppendOnly(redisCluster(nil)))
	assert.False(t, resources.AppendOnly(redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
		rc.Spec.Config = map[string]cachev1.ConfigValue{"appendonly": "no"}
	})))
}

func TestVolumeBackupPodsMountTheClaimAndKeepThePasswordOutOfArgv(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls"}
	})
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Name: "weekly", Namespace: rc.Namespace, UID: "b-uid"},
		Spec: cachev1.RedisBackupSpec{Cluster: rc.Name, Destination: cachev1.BackupDestination{
			PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups"}}}}
	pod := resources.BackupPod(b, rc, resources.BackupPodOptions{Image: "example.com/redis-operator:v1",
		Node: "10.0.0.7:6379", Key: "team-a/sessions/weekly.rdb", ServerName: "sessions.team-a.svc"})

	assert.Equal(t, "weekly-backup", pod.Name)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	require.Len(t, pod.OwnerReferences, 1)
	assert.Equal(t, "RedisBackup", pod.OwnerReferences[0].Kind)
	assert.True(t, *pod.OwnerReferences[0].Controller)
	assert.NotContains(t, pod.Labels, resources.LabelInstance, "not one of the cluster's Redis nodes")
	c := pod.Spec.Containers[0]
	assert.Equal(t, []string{"/manager", "backup", "--node=10.0.0.7:6379", "--dir=/backup", "--claim=backups",
		"--key=team-a/sessions/weekly.rdb", "--result-file=/dev/termination-log", "--tls-dir=/etc/redis-tls",
		"--server-name=sessions.team-a.svc"}, c.Command)
	require.Len(t, c.Env, 1)
	assert.Equal(t, "sessions-operator", c.Env[0].ValueFrom.SecretKeyRef.Name, "the password comes from its Secret")
	assert.Equal(t, "/dev/termination-log", c.TerminationMessagePath)
	var claims []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	assert.Equal(t, []string{"backups"}, claims)
	assert.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
}

func TestARestoreFromAVolumeFillsTheClaimTheStatefulSetWillUse(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "weekly"}
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("2Gi"), StorageClassName: ptr.To("fast")}
	})
	restore := &cachev1.RestoreStatus{Backup: "weekly", Location: "pvc://backups/team-a/src/weekly.rdb", Checksum: "sha256:ab",
		Destination: cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups"}}}
	sts := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 3, OperatorImage: "img", Restore: restore})
	assert.Empty(t, sts.Spec.Template.Spec.InitContainers, "the nodes never mount the backup's claim")

	// The claim the restore fills is the one the StatefulSet's template names for the first pod
	claim := resources.FirstDataClaim(rc, 0)
	template := sts.Spec.VolumeClaimTemplates[0]
	assert.Equal(t, *template.Name+"-"+*sts.Name+"-0", claim.Name)
	assert.Equal(t, template.Spec.AccessModes, claim.Spec.AccessModes)
	assert.Equal(t, *template.Spec.StorageClassName, *claim.Spec.StorageClassName)
	assert.True(t, (*template.Spec.Resources.Requests)[corev1.ResourceStorage].Equal(claim.Spec.Resources.Requests[corev1.ResourceStorage]))

	pod := resources.RestorePod(rc, restore, 0, "img")
	assert.Equal(t, []string{"/manager", "restore", "--data-dir=/data", "--aof=true", "--source-dir=/backup", "--for-node=sessions-0"},
		pod.Spec.Containers[0].Command)
	mounts := map[string]bool{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly
	}
	assert.Equal(t, map[string]bool{"/data": false, "/backup": true}, mounts, "the backup's claim is only read")
	assert.Equal(t, resources.RestoreComponent, pod.Labels[resources.LabelComponent])
	assert.Equal(t, rc.Name, pod.Labels[resources.LabelBackupCluster])
}

func TestInClusterModeEachShardsFirstNodeIsRestoredFromItsOwnSnapshotOnTheVolume(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3}
		rc.Spec.Restore = &cachev1.RestoreSpec{FromBackup: "weekly"}
		rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("2Gi")}
	})
	restore := &cachev1.RestoreStatus{Backup: "weekly", Location: "pvc://backups/team-a/src/weekly/",
		Destination: cachev1.BackupDestination{PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups"}}}
	for i := range 3 {
		restore.Shards = append(restore.Shards, cachev1.ShardBackup{Name: fmt.Sprintf("src-shard%d", i),
			Location: fmt.Sprintf("pvc://backups/team-a/src/weekly/src-shard%d.rdb", i), Checksum: fmt.Sprintf("sha256:%d", i)})
	}
	assert.Equal(t, []string{"sessions-shard0-restore", "sessions-shard1-restore", "sessions-shard2-restore"}, resources.RestoreNames(rc))
	for i := range 3 {
		sts := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 2, Shard: i, OperatorImage: "img", Restore: restore})
		claim := resources.FirstDataClaim(rc, i)
		assert.Equal(t, *sts.Spec.VolumeClaimTemplates[0].Name+"-"+*sts.Name+"-0", claim.Name, "shard %d's first node uses the claim the restore fills", i)
		pod := resources.RestorePod(rc, restore, i, "img")
		assert.Equal(t, fmt.Sprintf("sessions-shard%d-restore", i), pod.Name)
		assert.Contains(t, pod.Spec.Containers[0].Command, fmt.Sprintf("--for-node=sessions-shard%d-0", i))
		assert.Equal(t, []corev1.EnvVar{
			{Name: resources.EnvRestoreLocation, Value: restore.Shards[i].Location},
			{Name: resources.EnvRestoreChecksum, Value: restore.Shards[i].Checksum},
		}, pod.Spec.Containers[0].Env, "shard %d restores its own snapshot", i)
		assert.Equal(t, claim.Name, pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	}
	// A shard added while the restore runs has no snapshot: it starts empty
	location, _ := resources.RestoredSnapshot(rc, restore, 3)
	assert.Empty(t, location)
}

func TestAShardsBackupPodCarriesWhatTheOperatorDecidedForItsShard(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) { rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3} })
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Name: "weekly", Namespace: rc.Namespace},
		Spec: cachev1.RedisBackupSpec{Cluster: rc.Name, Destination: cachev1.BackupDestination{
			PersistentVolumeClaim: &cachev1.VolumeDestination{ClaimName: "backups"}}}}
	shard := cachev1.ShardBackup{Name: "sessions-shard1", Slots: []string{"5461-10922"}, Node: "sessions-shard1-1",
		Location: "pvc://backups/team-a/sessions/weekly/sessions-shard1.rdb"}
	pod := resources.BackupPod(b, rc, resources.BackupPodOptions{Image: "img", Node: "10.0.0.7:6379",
		Key: "team-a/sessions/weekly/sessions-shard1.rdb", Shard: &shard, ShardIndex: 1})
	assert.Equal(t, "weekly-backup-1", pod.Name)
	assert.JSONEq(t, `{"name":"sessions-shard1","slots":["5461-10922"],"node":"sessions-shard1-1","location":"pvc://backups/team-a/sessions/weekly/sessions-shard1.rdb"}`,
		pod.Annotations[resources.ShardBackupAnnotation])

	del := resources.DeleteBackupPod(b, "img", []string{"a/s0.rdb", "a/s1.rdb"})
	assert.Equal(t, []string{"/manager", "delete-backup", "--dir=/backup", "--claim=backups", "--key=a/s0.rdb", "--key=a/s1.rdb"},
		del.Spec.Containers[0].Command, "one pod deletes every shard's snapshot")
}

func TestClusterModeRunsAStatefulSetPerShardWithClusterEnabled(t *testing.T) {
	rc := redisCluster(func(rc *cachev1.RedisCluster) {
		rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: 3, NodeTimeout: &metav1.Duration{Duration: 2 * time.Second}}
	})
	sts := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 2, Shard: 1})
	assert.Equal(t, "sessions-shard1", *sts.Name)
	assert.Equal(t, "1", sts.Spec.Selector.MatchLabels[resources.LabelShard], "a shard's pods are its own")
	assert.Equal(t, "1", sts.Spec.Template.Labels[resources.LabelShard])
	assert.Equal(t, "sessions", sts.Spec.Template.Labels[resources.LabelInstance], "and the cluster's")
	c := sts.Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"--cluster-announce-ip", "$(POD_IP)"}, c.Args)
	assert.Equal(t, []string{"/bin/sh", "-c", `case "$(cat /data/nodes.conf 2>/dev/null)" in *myself,master*) sleep 6;; esac; exec redis-server /etc/redis/redis.conf "$@"`, "redis-server"}, c.Command,
		"without a volume, a primary restarted in its pod waits out its replica's promotion (node timeout 2s: 2 x 2s + 2s)")
	assert.Equal(t, int32(18), *c.StartupProbe.FailureThreshold, "the startup probe waits as long, and 30s more")
	rc.Spec.Expose = &cachev1.ExposeSpec{Type: cachev1.ExposeNodePort}
	c = resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 2, Shard: 1}).Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"/bin/sh", "-c", `case "$(cat /data/nodes.conf 2>/dev/null)" in *myself,master*|"") sleep 6;; esac; exec redis-server /etc/redis/redis.conf "$@"`, "redis-server"}, c.Command,
		"exposed, a new pod keeps its Service's address: it waits too, lest a replica sync from it empty")
	rc.Spec.Expose = nil
	rc.Spec.Storage = &cachev1.StorageSpec{Size: resource.MustParse("1Gi")}
	c = resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: 2, Shard: 1}).Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"redis-server", "/etc/redis/redis.conf"}, c.Command, "on a volume it keeps its node ID with its data")
	rc.Spec.Storage = nil

	conf := resources.RedisConf(rc)
	for _, line := range []string{"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000", "cluster-allow-replica-migration no"} {
		assert.Contains(t, conf, line+"\n")
	}
	assert.NotContains(t, conf, "replicaof", "Redis refuses replicaof in cluster mode; the cluster says who replicates whom")
	assert.Contains(t, resources.RedisConf(redisCluster(nil)), "replicaof ", "the other mode keeps its fence")
	assert.NotContains(t, conf, "tls-cluster")

	rc.Spec.TLS = &cachev1.TLSSpec{SecretName: "sessions-tls"}
	conf = resources.RedisConf(rc)
	assert.Contains(t, conf, "port 0\ntls-port 6379\n")
	assert.Contains(t, conf, "tls-cluster yes\n", "with TLS, the cluster bus and MIGRATE are TLS too")

	svc := resources.DesiredClientService(rc)
	assert.Equal(t, resources.SelectorLabels(rc), svc.Spec.Selector, "any node answers a cluster client")
}

// The operator's own rules are of the grammar the API enforces on spec.users, and split the
// same way.
func TestOperatorRulesAreOfTheUsersGrammar(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		u := resources.OperatorUser("pw", cluster)
		args, err := cachev1.SplitUserRules(strings.Join(u.Rules, " "))
		require.NoError(t, err)
		assert.Equal(t, u.Rules, args)
	}
}

// Redis gets a share of the container's memory limit as its maxmemory when spec.config gives
// none: set live (the limit changes, no pod rolls), and back to no limit when the limit goes.
func TestMaxMemoryIsAShareOfTheMemoryLimitUnlessTheConfigSetsIt(t *testing.T) {
	limited := func(limit string, config map[string]cachev1.ConfigValue) *cachev1.RedisCluster {
		return redisCluster(func(rc *cachev1.RedisCluster) {
			rc.Spec.Config = config
			if limit != "" {
				rc.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}}
			}
		})
	}
	tests := []struct {
		name, limit string
		config      map[string]cachev1.ConfigValue
		want        string
		live        bool
	}{
		{"no limit: no maxmemory of its own (Redis's default)", "", nil, "0", true},
		{"a limit of 100Mi", "100Mi", nil, fmt.Sprint(100 * 1024 * 1024 / 100 * resources.MaxMemoryPercent), true},
		{"a limit of 48Mi", "48Mi", nil, fmt.Sprint(48 * 1024 * 1024 / 100 * resources.MaxMemoryPercent), true},
		{"the user's maxmemory stands", "100Mi", map[string]cachev1.ConfigValue{"maxmemory": "50mb"}, "50mb", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := limited(tt.limit, tt.config)
			conf := resources.RedisConf(rc)
			assert.Equal(t, 1, strings.Count(conf, "\nmaxmemory "), conf)
			assert.Contains(t, conf, "\nmaxmemory "+tt.want+"\n")
			assert.Equal(t, tt.live, slices.Contains(resources.LiveSettings(rc), resources.LiveSetting{Directive: "maxmemory", Value: tt.want}))
		})
	}
	assert.Equal(t, resources.ConfigHash(limited("", nil)), resources.ConfigHash(limited("100Mi", nil)),
		"a new limit changes maxmemory live: no pod rolls for it (the StatefulSet's resources roll them)")
}

// TestConfigLineGivesRedisTheValueTheAPIChecked: values of the grammar are written as they are
// (so that objects stored earlier render the same line, and no pod restarts); anything Redis's
// reader would split or unquote is written quoted, so Redis refuses it instead of reading
// another value into it.
func TestConfigLineGivesRedisTheValueTheAPIChecked(t *testing.T) {
	for _, tc := range []struct{ directive, value, want string }{
		{"maxmemory", "256mb", "maxmemory 256mb"},
		{"save", "3600 1 300 100", "save 3600 1 300 100"},
		{"save", `""`, `save ""`},
		{"notify-keyspace-events", `""`, `notify-keyspace-events ""`},
		{"client-output-buffer-limit", "pubsub 32mb 8mb 60", "client-output-buffer-limit pubsub 32mb 8mb 60"},
		{"timeout", " 300", `timeout "\x20\x33\x30\x30"`},
		{"timeout", `"300"`, `timeout "\x22\x33\x30\x30\x22"`},
		{"maxmemory", "", `maxmemory ""`},
		{"save", "3600  1", `save 3600 "" 1`},
		{"loglevel", "notice requirepass x", `loglevel "\x6e\x6f\x74\x69\x63\x65\x20\x72\x65\x71\x75\x69\x72\x65\x70\x61\x73\x73\x20\x78"`},
	} {
		assert.Equal(t, tc.want, resources.ConfigLine(tc.directive, tc.value), "%s %q", tc.directive, tc.value)
	}
}

// TestEveryDerivedNameIsValidAtTheLongestName: the API's bounds on metadata.name (52, 44 in
// cluster mode, 243 for a RedisBackup) leave every name the operator derives valid, at the
// largest shard and ordinal: Services are DNS labels, the other objects DNS subdomains, and
// the labels Kubernetes adds (a pod's name, a StatefulSet's revision hash) label values.
func TestEveryDerivedNameIsValidAtTheLongestName(t *testing.T) {
	label := func(what, v string) {
		for _, e := range validation.IsValidLabelValue(v) {
			t.Errorf("%s %q as a label value: %s", what, v, e)
		}
	}
	dnsLabel := func(what, v string) {
		for _, e := range validation.IsDNS1123Label(v) {
			t.Errorf("%s %q: %s", what, v, e)
		}
	}
	subdomain := func(what, v string) {
		for _, e := range validation.IsDNS1123Subdomain(v) {
			t.Errorf("%s %q: %s", what, v, e)
		}
	}
	const lastOrdinal = 99 // spec.replicas is at most 100
	for _, tc := range []struct {
		name   string
		shards int32
	}{{strings.Repeat("r", 52), 0}, {strings.Repeat("c", 44), 32}} {
		rc := &cachev1.RedisCluster{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "ns"}, Spec: cachev1.RedisClusterSpec{Replicas: 100}}
		lastShard := 0
		if tc.shards > 0 {
			rc.Spec.Cluster = &cachev1.ClusterSpec{Shards: tc.shards}
			lastShard = int(tc.shards) - 1
		}
		for _, svc := range append([]string{resources.HeadlessServiceName(rc), resources.ClientServiceName(rc), resources.ReplicasServiceName(rc)}, resources.ExternalServiceNames(rc)...) {
			dnsLabel("Service", svc)
		}
		for _, s := range []string{resources.ConfigMapName(rc), resources.PasswordSecretName(rc), resources.AuthConfSecretName(rc),
			resources.PreviousPasswordSecretName(rc), resources.OperatorSecretName(rc), resources.RestoreNameOf(rc, lastShard),
			resources.FirstDataClaimName(rc, lastShard)} {
			subdomain("object", s)
		}
		sts := resources.StatefulSetNameOf(rc, lastShard)
		dnsLabel("StatefulSet", sts)
		label("StatefulSet revision", sts+"-"+strings.Repeat("h", 10))
		pod := fmt.Sprintf("%s-%d", sts, lastOrdinal)
		dnsLabel("pod (its hostname)", pod)
		label("pod name", pod)
		dnsLabel("node Service", resources.NodeServiceName(pod))
		subdomain("data claim", "data-"+pod)
		scheduled := resources.ScheduledBackupName(rc, time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC))
		subdomain("scheduled RedisBackup", scheduled)
		if len(scheduled) > 243 {
			t.Errorf("scheduled RedisBackup %q is longer than a RedisBackup may be", scheduled)
		}
	}
	b := &cachev1.RedisBackup{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("b", 243), Namespace: "ns"}}
	for _, p := range []string{resources.BackupPodName(b), resources.ShardBackupPodName(b, 31), resources.DeleteBackupPodName(b)} {
		subdomain("backup pod", p)
	}
}

func TestAnExternalServicesOutsideAddressIsItsLoadBalancersOrAnyNodes(t *testing.T) {
	named := metav1.ObjectMeta{Name: "sessions-ext"}
	lb := corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want resources.OutsideAddress
	}{
		{"a NodePort: any node's address", &corev1.Service{ObjectMeta: named, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}},
			resources.OutsideAddress{Service: "sessions-ext", AnyNode: true}},
		{"a LoadBalancer's address", &corev1.Service{ObjectMeta: named, Spec: lb, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
			Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10", Hostname: "lb.example.com"}}}}},
			resources.OutsideAddress{Service: "sessions-ext", Host: "192.0.2.10"}},
		{"a LoadBalancer's name when it gives only one", &corev1.Service{ObjectMeta: named, Spec: lb, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
			Ingress: []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}}}},
			resources.OutsideAddress{Service: "sessions-ext", Host: "lb.example.com"}},
		{"a LoadBalancer without an address yet: pending", &corev1.Service{ObjectMeta: named, Spec: lb}, resources.OutsideAddress{Service: "sessions-ext"}},
		{"a Service not there yet: pending", &corev1.Service{ObjectMeta: named}, resources.OutsideAddress{Service: "sessions-ext"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, resources.ExternalOutside(tc.svc))
		})
	}
}
