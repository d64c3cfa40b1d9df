package resources

import (
	"regexp"
	"strconv"
	"strings"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// Label keys and values the operator puts on every child.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"

	// LabelRole on a pod says what the operator made it: primary or replica. The Services
	// select on it; a pod that is neither serving primary nor caught-up replica has none.
	LabelRole   = "cache.example.com/role"
	RolePrimary = "primary"
	RoleReplica = "replica"

	// LabelShard on a pod and its StatefulSet, in cluster mode, is the shard's index.
	LabelShard = "cache.example.com/shard"

	// LabelPodName is the label a StatefulSet puts on each of its pods, with the pod's name:
	// a Service of one node selects on it.
	LabelPodName = "statefulset.kubernetes.io/pod-name"
	// NodeServiceComponent is the component of the Services of one node each (spec.expose in
	// cluster mode).
	NodeServiceComponent = "node-external"

	// ManagedByValue marks objects this operator manages; the manager's cache only holds those.
	ManagedByValue = "redis-operator"
	nameValue      = "redis"
)

// RedisPort is the port every Redis node listens on.
const RedisPort = 6379

// BusPort is a cluster node's bus port: Redis's own, RedisPort + 10000.
const BusPort = RedisPort + 10000

// ConfigHashAnnotation on the pod template carries a hash of redis.conf, so a change rolls the pods.
const ConfigHashAnnotation = "cache.example.com/config-hash"

// StatefulSetName is the name of the StatefulSet that runs the Redis nodes.
func StatefulSetName(rc *cachev1.RedisCluster) string { return rc.Name }

// ShardStatefulSetName names, in cluster mode, the StatefulSet of shard i.
func ShardStatefulSetName(rc *cachev1.RedisCluster, i int) string {
	return rc.Name + "-shard" + strconv.Itoa(i)
}

// StatefulSetNameOf names the StatefulSet of shard in cluster mode, and the one StatefulSet in
// replication mode (shard ignored).
func StatefulSetNameOf(rc *cachev1.RedisCluster, shard int) string {
	if rc.Spec.Cluster == nil {
		return StatefulSetName(rc)
	}
	return ShardStatefulSetName(rc, shard)
}

// FirstNodeName is the pod of the first node of shard (of the cluster, in replication mode): the
// one a restore seeds, and a new cluster's first primary.
func FirstNodeName(rc *cachev1.RedisCluster, shard int) string {
	return StatefulSetNameOf(rc, shard) + "-0"
}

// ShardOf is the shard of a pod in cluster mode, from its label.
func ShardOf(labels map[string]string) (int, bool) {
	i, err := strconv.Atoi(labels[LabelShard])
	return i, err == nil && i >= 0
}

// HeadlessServiceName names the headless Service that gives each pod a stable DNS name.
func HeadlessServiceName(rc *cachev1.RedisCluster) string { return rc.Name + "-headless" }

// ClientServiceName names the Service clients connect to.
func ClientServiceName(rc *cachev1.RedisCluster) string { return rc.Name }

// ClientServiceHost is the name clients reach the primary by, in the cluster's DNS, which every
// node's certificate must be valid for: any node may become the primary.
func ClientServiceHost(rc *cachev1.RedisCluster) string {
	return ClientServiceName(rc) + "." + rc.Namespace + ".svc"
}

// ReplicasServiceName names the Service for reads from replicas.
func ReplicasServiceName(rc *cachev1.RedisCluster) string { return rc.Name + "-replicas" }

// ExternalServiceName names the Service clients outside the Kubernetes cluster reach the
// primary by (spec.expose). Four characters of suffix: with the longest name the API allows, a
// Service name must still fit a DNS label (63).
func ExternalServiceName(rc *cachev1.RedisCluster) string { return rc.Name + "-ext" }

// ExternalReplicasServiceName names the Service clients outside reach the replicas by.
func ExternalReplicasServiceName(rc *cachev1.RedisCluster) string { return rc.Name + "-ext-ro" }

// ExternalServiceNames are the names DesiredExternalServices may use: the ones to delete when
// spec.expose goes.
func ExternalServiceNames(rc *cachev1.RedisCluster) []string {
	return []string{ExternalServiceName(rc), ExternalReplicasServiceName(rc)}
}

// NodeServiceName names, in cluster mode with spec.expose, the Service of the node of pod.
func NodeServiceName(pod string) string { return pod + "-ext" }

// ConfigMapName names the ConfigMap that holds redis.conf.
func ConfigMapName(rc *cachev1.RedisCluster) string { return rc.Name + "-config" }

// SelectorLabels select the pods of one RedisCluster. They never change for its lifetime.
func SelectorLabels(rc *cachev1.RedisCluster) map[string]string {
	return map[string]string{
		LabelName:     nameValue,
		LabelInstance: rc.Name,
	}
}

// Labels are put on every child of a RedisCluster.
func Labels(rc *cachev1.RedisCluster) map[string]string {
	l := SelectorLabels(rc)
	l[LabelManagedBy] = ManagedByValue
	return l
}

func labelsWithComponent(rc *cachev1.RedisCluster, component string) map[string]string {
	l := Labels(rc)
	l[LabelComponent] = component
	return l
}

// PodOrdinal is the ordinal a StatefulSet gives a pod in its name (<statefulset>-<ordinal>).
func PodOrdinal(name string) (int, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	return n, err == nil && n >= 0
}

// Image is the Redis container image of a RedisCluster: spec.image; else the operator's image
// for spec.version (images); else redis:<version>.
func Image(rc *cachev1.RedisCluster, images RedisImages) string {
	if rc.Spec.Image != "" {
		return rc.Spec.Image
	}
	if image := images[Version(rc)]; image != "" {
		return image
	}
	return "redis:" + Version(rc)
}

// RedisImages are the Redis images the operator runs by default, by version ("7.2"): the
// RELATED_IMAGE_REDIS_<version> variables of its environment (RedisImagesFromEnv). A release
// sets them to images pinned by digest, which is what a disconnected cluster mirrors (the
// bundle's relatedImages list them); OLM users add versions with their Subscription's
// spec.config.env.
type RedisImages map[string]string

// RelatedImageRedisPrefix starts the name of the variable that names the Redis image of a
// version: RELATED_IMAGE_REDIS_7_2 for 7.2 (operator-sdk's RELATED_IMAGE_ convention).
const RelatedImageRedisPrefix = "RELATED_IMAGE_REDIS_"

// RelatedImageEnv is the variable that names the Redis image of version.
func RelatedImageEnv(version string) string {
	return RelatedImageRedisPrefix + strings.ReplaceAll(version, ".", "_")
}

// RedisImagesFromEnv reads RedisImages from environ (os.Environ()'s KEY=value form). A variable
// whose suffix is not a version (RELATED_IMAGE_REDIS_LATEST) or whose value is empty names none.
func RedisImagesFromEnv(environ []string) RedisImages {
	images := RedisImages{}
	for _, kv := range environ {
		key, value, _ := strings.Cut(kv, "=")
		suffix, ok := strings.CutPrefix(key, RelatedImageRedisPrefix)
		if !ok || value == "" {
			continue
		}
		version := strings.ReplaceAll(suffix, "_", ".")
		if !versionPattern.MatchString(version) {
			continue
		}
		images[version] = value
	}
	return images
}

// versionPattern is spec.version's (api/v1): major.minor or major.minor.patch.
var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// Version is spec.version, or the default when the API server did not default it
// (an object built in memory).
func Version(rc *cachev1.RedisCluster) string {
	if rc.Spec.Version == "" {
		return cachev1.DefaultVersion
	}
	return rc.Spec.Version
}

// RedisContainerName is the name of the container that runs redis-server in every node's pod.
const RedisContainerName = "redis"
