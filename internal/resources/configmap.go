package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/topology"
)

// ConfigFileName is the key of redis.conf in the ConfigMap, and the file name in the pod.
const ConfigFileName = "redis.conf"

// RedisConf renders the redis.conf of a RedisCluster's nodes.
func RedisConf(rc *cachev1.RedisCluster) string {
	lines := []string{
		"port " + strconv.Itoa(RedisPort),
		"bind * -::*",
		"protected-mode no",
		"dir /data",
		// Replicas start a full sync at once instead of waiting for others to join one.
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		// Every node starts fenced: a read-only replica of an address where nothing listens,
		// until the operator points it at the primary or promotes it. A restarted node can
		// never take writes, nor feed its replicas an empty dataset.
		"replica-read-only yes",
		"replicaof " + strings.Replace(topology.FenceAddr, ":", " ", 1),
	}
	return strings.Join(lines, "\n") + "\n"
}

// ConfigHash is a short, stable digest of redis.conf; on the pod template it rolls the pods when the file changes.
func ConfigHash(conf string) string {
	sum := sha256.Sum256([]byte(conf))
	return hex.EncodeToString(sum[:8])
}

// DesiredConfigMap is the ConfigMap that holds redis.conf.
func DesiredConfigMap(rc *cachev1.RedisCluster) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName(rc), rc.Namespace).
		WithLabels(Labels(rc)).
		WithOwnerReferences(ownerReference(rc)).
		WithData(map[string]string{ConfigFileName: RedisConf(rc)})
}
