package v1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultVersion is the Redis version a RedisCluster runs when spec.version is not given.
const DefaultVersion = "7.2"

// RedisClusterSpec is what the user wants: how many Redis nodes, of which version.
// +kubebuilder:validation:XValidation:rule="!has(self.failover) || !has(self.failover.minReplicasToWrite) || self.failover.minReplicasToWrite < self.replicas",message="spec.failover.minReplicasToWrite must be less than spec.replicas: the primary would never take a write",fieldPath=".failover.minReplicasToWrite"
// +kubebuilder:validation:XValidation:rule="!has(self.config) || has(self.cluster) || !self.config.exists(k, k.startsWith('cluster-'))",messageExpression="'spec.config.' + self.config.filter(k, k.startsWith('cluster-'))[0] + ' is a cluster-mode setting: it needs spec.cluster'",fieldPath=".config"
// +kubebuilder:validation:XValidation:rule="!has(self.config) || !('maxmemory' in self.config) || !has(self.resources) || !has(self.resources.limits) || !('memory' in self.resources.limits) || !self.config['maxmemory'].matches('^[0-9]*([kKmMgG][bB]?|[bB])?$') || (self.config['maxmemory'].matches('^0*([kKmMgG][bB]?|[bB])?$') ? false : quantity(self.config['maxmemory'].lowerAscii().replace('kb', 'Ki').replace('mb', 'Mi').replace('gb', 'Gi').replace('m', 'M').replace('g', 'G').split('b')[0]).isLessThan(quantity(string(self.resources.limits['memory']))))",message="spec.config.maxmemory must be below spec.resources.limits.memory (0 is no limit at all): Redis's data alone would fill the container, and the kernel would kill Redis; leave maxmemory out and the operator sets it to a share of the limit",fieldPath=".config"
// +kubebuilder:validation:XValidation:rule="!has(self.config) || !('activedefrag' in self.config) || self.config['activedefrag'].lowerAscii() != 'yes' || has(self.image)",message="spec.config.activedefrag yes needs a Redis built with its own jemalloc, and the operator's images (Debian's redis-server) are not: set spec.image to one that is (the official redis images are)",fieldPath=".config"
// +kubebuilder:validation:XValidation:rule="!has(self.cluster) || !has(self.failover) || !has(self.failover.unreachableTimeout)",message="spec.failover.unreachableTimeout is not read in cluster mode (spec.cluster): Redis Cluster replaces a primary after spec.cluster.nodeTimeout",fieldPath=".failover.unreachableTimeout"
// +redis-operator:admissionrules:begin:spec
// +kubebuilder:validation:XValidation:rule=`!has(self.config) || !has(self.version) || ![r'set-max-listpack-entries', r'set-max-listpack-value'].exists(k, k in self.config) || !self.version.matches('^[0-9]{1,8}[.][0-9]{1,8}') || int(self.version.split('.')[0]) > 7 || (int(self.version.split('.')[0]) == 7 && int(self.version.split('.')[1]) >= 2)`,messageExpression=`'spec.config.' + [r'set-max-listpack-entries', r'set-max-listpack-value'].filter(k, k in self.config)[0] + ' needs Redis 7.2 or newer; spec.version is ' + self.version`,fieldPath=".config"
// +kubebuilder:validation:XValidation:rule=`has(self.storage) || !has(self.config) || ![r'appendfsync', r'no-appendfsync-on-rewrite', r'auto-aof-rewrite-percentage', r'auto-aof-rewrite-min-size', r'aof-load-truncated', r'aof-use-rdb-preamble', r'aof-timestamp-enabled', r'aof-rewrite-incremental-fsync'].exists(k, k in self.config)`,messageExpression=`'spec.config.' + [r'appendfsync', r'no-appendfsync-on-rewrite', r'auto-aof-rewrite-percentage', r'auto-aof-rewrite-min-size', r'aof-load-truncated', r'aof-use-rdb-preamble', r'aof-timestamp-enabled', r'aof-rewrite-incremental-fsync'].filter(k, k in self.config)[0] + ' tunes the append-only file, which a RedisCluster keeps only with spec.storage: set spec.storage, or leave it out'`,fieldPath=".config"
// +kubebuilder:validation:XValidation:rule=`!has(self.cluster) || !has(self.config) || ![r'databases'].exists(k, k in self.config)`,messageExpression=`'spec.config.' + [r'databases'].filter(k, k in self.config)[0] + ' is not read in cluster mode (spec.cluster): a Redis Cluster has one database'`,fieldPath=".config"
// +redis-operator:admissionrules:end:spec
// +kubebuilder:validation:XValidation:rule="has(self.restore) == has(oldSelf.restore) && (!has(self.restore) || self.restore == oldSelf.restore)",message="spec.restore is set only when a RedisCluster is created: a restore never replaces a running cluster's data",fieldPath=".restore"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls)",message="spec.tls cannot be added to or removed from a RedisCluster: nodes with and without TLS cannot replicate from each other; create a new RedisCluster",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="has(self.cluster) == has(oldSelf.cluster)",message="a RedisCluster cannot switch between one primary and cluster mode (spec.cluster): the data would have to be resharded; create a new RedisCluster and move the data",fieldPath=".cluster"
type RedisClusterSpec struct {
	// Replicas is the number of Redis nodes: one primary and replicas-1 read replicas. In cluster
	// mode (spec.cluster), the number of nodes of each shard: its primary and replicas-1
	// replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"}
	Replicas int32 `json:"replicas"`

	// Version is the Redis version, major.minor or major.minor.patch (7.0 or newer: the
	// operator's own user and checks need Redis 7.0).
	// Unless image is set, it selects the operator's image of that version (its
	// RELATED_IMAGE_REDIS_<major>_<minor>[_<patch>] variable), else redis:<version>.
	// +kubebuilder:default="7.2"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^([7-9]|[1-9][0-9]+)[.]')",message="spec.version: Redis 7.0 or newer is required (the operator's own ACL user and its checks use Redis 7.0 commands)"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Redis Version",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Version string `json:"version,omitempty"`

	// Image overrides the Redis container image (for a mirror registry); it must run the Redis of
	// spec.version. A reference as the kubelet reads it: [registry/]path[:tag][@digest], the
	// path in lowercase, a digest in full (sha256:<64 hex digits>), the name at most 255
	// characters (ImageReferencePattern).
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$`
	// +redis-operator:admissionrules:begin:image
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^((localhost(:[0-9]+)?|([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))+(:[0-9]+)?|([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]):[0-9]+|([a-zA-Z0-9-]*[A-Z][a-zA-Z0-9-]*)(:[0-9]+)?|\[[a-fA-F0-9:]+\](:[0-9]+)?)/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?$') && !self.matches('^[a-f0-9]{64}$') && [self.split('@')[0]].all(s, [s.lastIndexOf(':') > s.lastIndexOf('/') ? s.substring(0, s.lastIndexOf(':')) : s].all(n, !n.contains('/') ? n.size() + 8 <= 255 : [n.split('/')[0]].all(d, !(d == 'localhost' || d.contains('.') || d.contains(':') || d.lowerAscii() != d) ? n.size() <= 255 : [n.substring(d.size() + 1)].all(p, (d in ['docker.io', 'index.docker.io'] && !p.contains('/') ? p.size() + 8 : p.size()) <= 255))))`,message="spec.image is an image reference: [registry/]path[:tag][@digest], the path in lowercase letters, digits and separators (., _, __, -), a tag of letters, digits, _, . and - (at most 128), a digest in full (sha256: and 64 lowercase hex digits), the path at most 255 characters (library/ counted on a one-component Docker Hub name)"
	// +redis-operator:admissionrules:end:image
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Image",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text","urn:alm:descriptor:com.tectonic.ui:advanced"}
	Image string `json:"image,omitempty"`

	// Config holds redis.conf settings, by directive: {"maxmemory": "256mb"}. It takes the
	// tunables of ConfigDirectives (memory and eviction, the snapshot schedule and fsync,
	// timeouts, lazy freeing, I/O threads, keyspace notifications, slowlog and latency,
	// encodings, active defrag, client buffers, replication buffers, and in cluster mode the
	// cluster-* ones), each value checked against its grammar. Anything else is refused: the
	// operator sets addresses, replication, auth, TLS and paths itself, and the settings of
	// spec.failover, spec.cluster and spec.storage come from those fields.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Redis Configuration",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Config RedisConfig `json:"config,omitempty"`

	// Resources of the Redis container: requests and limits of cpu, memory and
	// ephemeral-storage, none negative, memory and ephemeral-storage in whole bytes, and no
	// request above its limit.
	// +kubebuilder:validation:XValidation:rule="!has(self.claims)",message="spec.resources.claims is not supported: Redis pods claim no dynamic resources"
	// The rules iterate over the three names, never over the maps, which have no size bound.
	// +kubebuilder:validation:XValidation:rule="(!has(self.limits) || self.limits.size() == ['cpu', 'memory', 'ephemeral-storage'].filter(k, k in self.limits).size()) && (!has(self.requests) || self.requests.size() == ['cpu', 'memory', 'ephemeral-storage'].filter(k, k in self.requests).size())",message="spec.resources takes cpu, memory and ephemeral-storage"
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(k, (!has(self.limits) || !(k in self.limits) || !quantity(string(self.limits[k])).isLessThan(quantity('0'))) && (!has(self.requests) || !(k in self.requests) || !quantity(string(self.requests[k])).isLessThan(quantity('0'))))",message="spec.resources: quantities must not be negative"
	// +kubebuilder:validation:XValidation:rule="['memory', 'ephemeral-storage'].all(k, (!has(self.limits) || !(k in self.limits) || quantity(string(self.limits[k])).isInteger()) && (!has(self.requests) || !(k in self.requests) || quantity(string(self.requests[k])).isInteger()))",message="spec.resources: memory and ephemeral-storage are whole bytes (512Mi, 1Gi, not 0.5)"
	// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !has(self.requests) || ['cpu', 'memory', 'ephemeral-storage'].all(k, !(k in self.limits) || !(k in self.requests) || !quantity(string(self.requests[k])).isGreaterThan(quantity(string(self.limits[k]))))",message="spec.resources: a request must not be above its limit"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Resources",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:resourceRequirements"}
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Storage keeps each node's data on a PersistentVolumeClaim. Without it data lives in an
	// emptyDir and is lost when a pod is deleted or moves (the Persistent condition says so).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage"
	Storage *StorageSpec `json:"storage,omitempty"`

	// Auth says where the password is. Without it the operator creates a Secret
	// <name>-auth with a random password.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Authentication"
	Auth *AuthSpec `json:"auth,omitempty"`

	// Users are Redis ACL users for applications, each with its password in a Secret and its
	// rules; applied live on every node and kept in the nodes' configuration. A user removed
	// from the list is deleted from the nodes. The password of spec.auth is the default user's.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Users",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Users []UserSpec `json:"users,omitempty"`

	// TLS makes every connection to and between the nodes TLS: clients, replication, the
	// cluster bus in cluster mode, and the operator's own. Set it when the RedisCluster is created; the certificate in its Secret may
	// change at any time and the nodes take it without a restart.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="TLS"
	TLS *TLSSpec `json:"tls,omitempty"`

	// Failover tunes when a replica replaces an unanswering primary.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Failover"
	Failover *FailoverSpec `json:"failover,omitempty"`

	// Backup takes a RedisBackup on a schedule and deletes old ones (retention).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup Schedule"
	Backup *BackupScheduleSpec `json:"backup,omitempty"`

	// Restore creates the RedisCluster with a backup's data. Set at creation only.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Restore"
	Restore *RestoreSpec `json:"restore,omitempty"`

	// NodeSelector constrains the nodes the pods run on. Its label keys and values are
	// checked when the operator applies the StatefulSet (see Affinity).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Node Selector",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Node","urn:alm:descriptor:com.tectonic.ui:advanced"}
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity of the pods. Default: the pods of a shard (in replication mode, all of them)
	// prefer different nodes (pod anti-affinity by kubernetes.io/hostname, weight 100), so
	// that losing one machine loses one copy of the data where the nodes allow it; an affinity
	// given here replaces that default. The API server checks it when the operator applies the
	// StatefulSet; a refusal shows at once as Degraded (ApplyFailed) with its message, which
	// names the field. (A CEL rule over these Kubernetes types, whose strings have no length
	// bound, costs more than the API server allows a CRD.)
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Affinity",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the pods, as a pod's; checked when the operator applies the StatefulSet
	// (see Affinity).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Tolerations",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// TopologySpreadConstraints of the pods. Default: spread across nodes and across zones
	// (topology.kubernetes.io/zone) where possible (maxSkew 1, ScheduleAnyway); constraints
	// given here replace both. As
	// a pod's: maxSkew 1 or more, a topologyKey, whenUnsatisfiable DoNotSchedule or
	// ScheduleAnyway, minDomains (1 or more) only with DoNotSchedule; the grammar of the
	// topologyKey, labelSelector and matchLabelKeys are checked when the operator applies the
	// StatefulSet (see Affinity).
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.maxSkew >= 1)",message="spec.topologySpreadConstraints[].maxSkew is 1 or more"
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.topologyKey.size() > 0)",message="spec.topologySpreadConstraints[].topologyKey is a label key: it is required"
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.whenUnsatisfiable in ['DoNotSchedule', 'ScheduleAnyway'])",message="spec.topologySpreadConstraints[].whenUnsatisfiable is DoNotSchedule or ScheduleAnyway"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.minDomains) || (c.minDomains >= 1 && c.whenUnsatisfiable == 'DoNotSchedule'))",message="spec.topologySpreadConstraints[].minDomains is 1 or more, and only with DoNotSchedule"
	// +kubebuilder:validation:XValidation:rule="self.all(c, (!has(c.nodeAffinityPolicy) || c.nodeAffinityPolicy in ['Honor', 'Ignore']) && (!has(c.nodeTaintsPolicy) || c.nodeTaintsPolicy in ['Honor', 'Ignore']))",message="spec.topologySpreadConstraints[].nodeAffinityPolicy and nodeTaintsPolicy are Honor or Ignore"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Topology Spread Constraints",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// Cluster runs Redis Cluster: the data sharded over 16384 hash slots across several
	// primaries, each with spec.replicas-1 replicas, for data larger than one node and writes
	// that scale. Clients must speak the cluster protocol (MOVED, ASK). Set when the
	// RedisCluster is created; without it, one primary and its replicas.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Cluster Mode",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Cluster *ClusterSpec `json:"cluster,omitempty"`

	// Expose publishes Redis to clients outside the Kubernetes cluster (an application on a
	// VM, another cluster, a laptop): Services of type NodePort or LoadBalancer beside the
	// in-cluster ones, which stay as they are. In replication mode, <name>-ext follows the
	// primary through failovers as <name> does, and <name>-ext-ro serves the replicas as
	// <name>-replicas does. In cluster mode, each node gets a Service of its own,
	// <pod>-ext, and announces its address (MOVED, ASK, CLUSTER SHARDS and SLOTS name it), which
	// the nodes use among themselves too. Removing it deletes those Services (in cluster mode
	// once every node announces its pod's address again).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Expose",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	Expose *ExposeSpec `json:"expose,omitempty"`
}

// ExposeType is the kind of external Service: how clients outside reach it.
// +kubebuilder:validation:Enum=NodePort;LoadBalancer
type ExposeType string

const (
	// ExposeNodePort: a port on every Kubernetes node's address (30000-32767 by default),
	// chosen by Kubernetes; status shows none, the Services do.
	ExposeNodePort ExposeType = "NodePort"
	// ExposeLoadBalancer: an address of the cluster's load balancer (a cloud's, or MetalLB's on
	// bare metal), port 6379.
	ExposeLoadBalancer ExposeType = "LoadBalancer"
)

// ExposeSpec says how clients outside the Kubernetes cluster reach Redis.
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerSourceRanges) || self.type == 'LoadBalancer'",message="spec.expose.loadBalancerSourceRanges needs spec.expose.type LoadBalancer: a NodePort accepts every client that reaches the node",fieldPath=".loadBalancerSourceRanges"
type ExposeSpec struct {
	// Type of the external Services: NodePort or LoadBalancer.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Type",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:NodePort","urn:alm:descriptor:com.tectonic.ui:select:LoadBalancer"}
	Type ExposeType `json:"type"`

	// Annotations put on the external Services, for the load balancer's settings (an
	// address pool, an internal load balancer). The API server checks their keys when the
	// operator applies the Services; a refusal shows as Degraded (ApplyFailed) naming the key.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// LoadBalancerSourceRanges are the only client networks a LoadBalancer accepts, as
	// CIDRs ("203.0.113.0/24", "2001:db8::/32"); by default every client. Type LoadBalancer
	// only, and honoured where the load balancer implements it.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(r, isCIDR(r))",messageExpression="'spec.expose.loadBalancerSourceRanges[] are CIDRs (203.0.113.0/24, 2001:db8::/32): ' + self.filter(r, !isCIDR(r))[0] + ' is not one'"
	// +optional
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`
}

// ClusterSpec is the shape of a Redis Cluster.
type ClusterSpec struct {
	// Shards is the number of primaries the slots are spread over, 3 or more: Redis Cluster's
	// own failover needs a majority of primaries. Each shard is a StatefulSet,
	// <name>-shard<i>, of spec.replicas nodes. It may change: on a scale-out the new shards'
	// nodes join and slots move to them, one shard at a time, until each shard serves within
	// one slot of an even share; on a scale-in the last shards' slots move to the others, then
	// their StatefulSets are deleted. Keys move with their slots while clients keep working
	// (they follow ASK and MOVED).
	// +kubebuilder:validation:Minimum=3
	// +kubebuilder:validation:Maximum=32
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Shards",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number"}
	Shards int32 `json:"shards"`

	// NodeTimeout is how long a primary may not answer before its replica replaces it
	// (cluster-node-timeout), 1s to 10m. Default 5s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="spec.cluster.nodeTimeout must be between 1s and 10m"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Node Timeout",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	NodeTimeout *metav1.Duration `json:"nodeTimeout,omitempty"`
}

// ConfigValue is the value of one redis.conf directive, on one line, of printable characters
// (RedisConfig refuses the others: a pattern changed here would be refused by OLM v1).
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:Pattern=`^[^\r\n]*$`
type ConfigValue string

// PVCRetention is what happens to a node's PersistentVolumeClaim.
// +kubebuilder:validation:Enum=Retain;Delete
type PVCRetention string

const (
	PVCRetain PVCRetention = "Retain"
	PVCDelete PVCRetention = "Delete"
)

// StorageSpec is each node's persistent volume.
// +kubebuilder:validation:XValidation:rule="quantity(string(self.size)).isGreaterThan(quantity('0')) && quantity(string(self.size)).isInteger()",message="spec.storage.size must be larger than 0 and whole bytes (10Gi)",fieldPath=".size"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || self.storageClassName.size() == 0 || self.storageClassName.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.storage.storageClassName must be a StorageClass's name: lowercase letters, digits, '-' and '.'",fieldPath=".storageClassName"
type StorageSpec struct {
	// Size of each node's volume.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volume Size",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Size resource.Quantity `json:"size"`

	// StorageClassName of the volumes; the cluster's default class when unset.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Storage Class",xDescriptors={"urn:alm:descriptor:io.kubernetes:StorageClass"}
	StorageClassName *string `json:"storageClassName,omitempty"`

	// WhenDeleted: keep (Retain, default) or delete the volumes when the RedisCluster is deleted.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volumes When Deleted",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	WhenDeleted PVCRetention `json:"whenDeleted,omitempty"`

	// WhenScaled: keep (Retain, default) or delete a node's volume when replicas scales it away.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volumes When Scaled In",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	WhenScaled PVCRetention `json:"whenScaled,omitempty"`
}

// DefaultPreviousPasswordValidFor is spec.auth.previousPasswordValidFor when it is not set.
const DefaultPreviousPasswordValidFor = 5 * time.Minute

// AuthSpec names the password Secret.
type AuthSpec struct {
	// SecretRef is the Secret and key holding the password.
	// +required
	SecretRef SecretKeyRef `json:"secretRef"`

	// PreviousPasswordValidFor is how long the password keeps working after the Secret
	// changes, beside the new one, so that clients can move to the new one without an error.
	// Then it is removed from every node. Default 5m; 0s removes it as soon as every node
	// takes the new one. At most 168h (a week).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="spec.auth.previousPasswordValidFor must be between 0s and 168h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Previous Password Valid For",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text","urn:alm:descriptor:com.tectonic.ui:advanced"}
	PreviousPasswordValidFor *metav1.Duration `json:"previousPasswordValidFor,omitempty"`
}

// PreviousPasswordValidFor is how long a changed password keeps working (the default without
// spec.auth, whose generated Secret a user may still change).
func (rc *RedisCluster) PreviousPasswordValidFor() time.Duration {
	if rc.Spec.Auth != nil && rc.Spec.Auth.PreviousPasswordValidFor != nil {
		return rc.Spec.Auth.PreviousPasswordValidFor.Duration
	}
	return DefaultPreviousPasswordValidFor
}

// SecretKeyRef is a key of a Secret in the RedisCluster's namespace.
type SecretKeyRef struct {
	// Name of the Secret: a DNS subdomain, as every Secret's name is.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	Name string `json:"name"`

	// Key in the Secret: letters, digits, '-', '_' and '.', not . or .. nor starting with .., as
	// a Secret's keys are.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:XValidation:rule="self != '.' && !self.startsWith('..')",message="a Secret key is not . nor .., and does not start with ..: Kubernetes refuses such keys"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Key",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Key string `json:"key,omitempty"`
}

// UserSpec is one Redis ACL user.
type UserSpec struct {
	// Name of the user.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_][a-zA-Z0-9._-]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'default'",message="the default user's password is spec.auth's; give this user another name"
	// +kubebuilder:validation:XValidation:rule="self != 'redis-operator'",message="redis-operator is the operator's own user; give this user another name"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="User Name",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Name string `json:"name"`

	// PasswordSecretRef is the Secret and key holding the user's password.
	// +required
	PasswordSecretRef SecretKeyRef `json:"passwordSecretRef"`

	// Rules are the user's ACL rules, separated by spaces: key patterns (~app:*, %R~cache:*),
	// channel patterns (&events:*), allkeys, allchannels, resetkeys, resetchannels, and
	// commands and categories allowed or denied (+@read, +set, -@dangerous, +config|get). The
	// user starts with no rights and is on; its password comes from its Secret, never from the
	// rules. Rules Redis refuses (an unknown command) leave the RedisCluster Degraded
	// (UserRejected) and the user off the nodes.
	// Selectors (Redis 7) group such rules in parentheses: (~temp:* +get). Tokens are printable
	// ASCII without quotes, separated by single spaces (UserRulesPattern).
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="User Rules",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Rules ACLRules `json:"rules"`
}

// TLSSpec says where the nodes' certificate is and whether clients must present one.
type TLSSpec struct {
	// SecretName is a Secret in the RedisCluster's namespace with tls.crt, tls.key and ca.crt,
	// as cert-manager writes them. Every node serves tls.crt, so it must be valid for the name
	// clients use: the operator checks it against <name>.<namespace>.svc, the primary
	// Service's, with ca.crt. A changed Secret is loaded by the running nodes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="TLS Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	SecretName string `json:"secretName"`

	// ClientAuth makes the nodes refuse clients without a certificate signed by ca.crt
	// (tls-auth-clients yes). The nodes and the operator present tls.crt.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Require Client Certificates",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:booleanSwitch"}
	ClientAuth bool `json:"clientAuth,omitempty"`
}

// FailoverSpec tunes automatic failover.
type FailoverSpec struct {
	// UnreachableTimeout is how long the primary may not answer before a replica replaces it.
	// A primary whose Redis has exited (its port refuses connections and every replica lost
	// its link) is replaced at once. Default 5s; more than 0s and at most 10m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10m')",message="spec.failover.unreachableTimeout must be positive and at most 10m"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Unreachable Timeout",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	UnreachableTimeout *metav1.Duration `json:"unreachableTimeout,omitempty"`

	// MinReplicasToWrite makes the primary refuse writes (NOREPLICAS) while fewer than this
	// many replicas are connected and have acknowledged its stream within MaxReplicaLag: a
	// primary cut off from its replicas stops taking writes that a failover would discard.
	// Writes also stop while that many replicas are down or being replaced. Redis's
	// min-replicas-to-write. Unset or 0: writes are never refused for want of replicas.
	// +kubebuilder:validation:Minimum=0
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Min Replicas To Write",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:number","urn:alm:descriptor:com.tectonic.ui:advanced"}
	MinReplicasToWrite *int32 `json:"minReplicasToWrite,omitempty"`

	// MaxReplicaLag is how long a replica may go without acknowledging the primary's stream and
	// still count toward MinReplicasToWrite (rounded up to whole seconds). Redis's
	// min-replicas-max-lag. Default 10s; 1s to 1h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="spec.failover.maxReplicaLag must be between 1s and 1h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Max Replica Lag",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text","urn:alm:descriptor:com.tectonic.ui:advanced"}
	MaxReplicaLag *metav1.Duration `json:"maxReplicaLag,omitempty"`
}

// RedisClusterStatus is what the operator observed.
type RedisClusterStatus struct {
	// ReadyReplicas is the number of Redis pods that pass their readiness probe.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Ready Replicas",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:podCount"}
	ReadyReplicas int32 `json:"readyReplicas"`

	// ObservedGeneration is the generation of the spec that the status describes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Observed Generation",xDescriptors={"urn:alm:descriptor:text"}
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Primary is the pod that is the primary, the one the <name> Service sends clients to.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Primary",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"}
	Primary string `json:"primary,omitempty"`

	// Nodes are the Redis nodes and what each is doing.
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Nodes"
	Nodes []NodeStatus `json:"nodes,omitempty"`

	// Backup is what the schedule of spec.backup did.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Backup"
	Backup *BackupStatus `json:"backup,omitempty"`

	// Restore is the backup of spec.restore, as read when the cluster was created.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Restore"
	Restore *RestoreStatus `json:"restore,omitempty"`

	// Shards are, in cluster mode, each shard's primary, replicas and hash slots.
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Shards"
	Shards []ShardStatus `json:"shards,omitempty"`

	// Conditions: Ready, Progressing, Degraded, FailingOver, Persistent and, with spec.restore,
	// Restored.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"}
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeRole is a node's part in replication.
type NodeRole string

const (
	RolePrimary NodeRole = "Primary"
	RoleReplica NodeRole = "Replica"
	RoleUnknown NodeRole = "Unknown"
)

// NodeState is whether a node serves.
type NodeState string

const (
	// NodeServing: a primary that answers, or a replica whose link to the primary is up.
	NodeServing NodeState = "Serving"
	// NodeSyncing: a replica that has not (yet) caught up with the primary.
	NodeSyncing NodeState = "Syncing"
	// NodeUnreachable: Redis does not answer.
	NodeUnreachable NodeState = "Unreachable"
)

// NodeStatus is one Redis node.
type NodeStatus struct {
	// Name of the pod.
	Name string `json:"name"`
	// Role: Primary, Replica or Unknown.
	Role NodeRole `json:"role"`
	// State: Serving, Syncing or Unreachable.
	State NodeState `json:"state"`
}

// ShardStatus is one shard of a RedisCluster in cluster mode.
type ShardStatus struct {
	// Name of the shard's StatefulSet.
	Name string `json:"name"`
	// Primary is the pod that serves the shard's slots.
	// +optional
	Primary string `json:"primary,omitempty"`
	// Replicas are the pods that replicate it.
	// +optional
	Replicas []string `json:"replicas,omitempty"`
	// Slots are the hash slots the shard serves, as ranges: "0-5460".
	// +optional
	Slots []string `json:"slots,omitempty"`
}

// RedisCluster is a highly available Redis kept to its spec by the operator: one primary and
// its replicas, or (with spec.cluster) a Redis Cluster of shards, each a primary and its replicas.
// +operator-sdk:csv:customresourcedefinitions:displayName="Redis Cluster",resources={{ConfigMap,v1},{Pod,v1},{PodDisruptionBudget,v1},{Secret,v1},{Service,v1},{StatefulSet,v1}}
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=redis;rdc,categories=all;redis
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: it names the StatefulSet and its Services"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.cluster) || self.metadata.name.size() <= 44",message="metadata.name must be at most 44 characters in cluster mode: it names the StatefulSets <name>-shard<i>"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names Services"
// +redis-operator:admissionrules:begin:cluster
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.auth) || !(self.spec.auth.secretRef.name in [self.metadata.name + '-auth-conf', self.metadata.name + '-auth-previous', self.metadata.name + '-operator', has(self.spec.auth) ? self.metadata.name + '-auth-conf' : self.metadata.name + '-auth'])`,message="spec.auth.secretRef.name is one of the Secrets the operator owns for this RedisCluster (<name>-auth-conf, <name>-auth-previous, <name>-operator, and <name>-auth without spec.auth): the operator would overwrite or delete it, or hand its password on",fieldPath=".spec.auth.secretRef.name"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.users) || self.spec.users.all(u, !(u.passwordSecretRef.name in [self.metadata.name + '-auth-conf', self.metadata.name + '-auth-previous', self.metadata.name + '-operator', has(self.spec.auth) ? self.metadata.name + '-auth-conf' : self.metadata.name + '-auth']))`,message="spec.users[].passwordSecretRef.name is one of the Secrets the operator owns for this RedisCluster (<name>-auth-conf, <name>-auth-previous, <name>-operator, and <name>-auth without spec.auth): the operator would overwrite or delete it, or hand its password on",fieldPath=".spec.users"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.users) || !has(self.spec.auth) || self.spec.users.all(u, !(u.passwordSecretRef.name == self.spec.auth.secretRef.name && (has(u.passwordSecretRef.key) ? u.passwordSecretRef.key : 'password') == (has(self.spec.auth.secretRef.key) ? self.spec.auth.secretRef.key : 'password')))`,message="spec.users[].passwordSecretRef is spec.auth.secretRef, the password of the default user: give each user a password of its own",fieldPath=".spec.users"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.tls) || !(self.spec.tls.secretName in [self.metadata.name + '-auth-conf', self.metadata.name + '-auth-previous', self.metadata.name + '-operator', has(self.spec.auth) ? self.metadata.name + '-auth-conf' : self.metadata.name + '-auth'])`,message="spec.tls.secretName is one of the Secrets the operator owns for this RedisCluster (<name>-auth-conf, <name>-auth-previous, <name>-operator, and <name>-auth without spec.auth): the operator would overwrite or delete it, or hand its password on",fieldPath=".spec.tls.secretName"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.backup) || !has(self.spec.backup.destination.s3) || (!(self.spec.backup.destination.s3.credentialsSecret in [self.metadata.name + '-auth-conf', self.metadata.name + '-auth-previous', self.metadata.name + '-operator', has(self.spec.auth) ? self.metadata.name + '-auth-conf' : self.metadata.name + '-auth']) && (!has(self.spec.backup.destination.s3.caBundle) || !(self.spec.backup.destination.s3.caBundle.name in [self.metadata.name + '-auth-conf', self.metadata.name + '-auth-previous', self.metadata.name + '-operator', has(self.spec.auth) ? self.metadata.name + '-auth-conf' : self.metadata.name + '-auth'])))`,message="spec.backup.destination.s3 names one of the Secrets the operator owns for this RedisCluster (<name>-auth-conf, <name>-auth-previous, <name>-operator, and <name>-auth without spec.auth): the operator would overwrite or delete it, or hand its password on",fieldPath=".spec.backup.destination.s3"
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.backup) || !has(self.spec.backup.destination.persistentVolumeClaim) || !self.spec.backup.destination.persistentVolumeClaim.claimName.matches('^data-' + self.metadata.name + '(-shard[0-9]+)?-[0-9]+$')`,message="spec.backup.destination.persistentVolumeClaim.claimName is one of the data claims of this RedisCluster (data-<statefulset>-<ordinal>): a backup would be written beside the data it saves, and lost with it",fieldPath=".spec.backup.destination.persistentVolumeClaim.claimName"
// +redis-operator:admissionrules:end:cluster
type RedisCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   RedisClusterSpec   `json:"spec"`
	Status RedisClusterStatus `json:"status,omitempty"`
}

// RedisClusterList is a list of RedisClusters.
// +kubebuilder:object:root=true
type RedisClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedisCluster `json:"items"`
}
