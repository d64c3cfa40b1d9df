package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cachev1 "github.com/org/redis-operator/api/v1"
)

// Sample reads config/samples/cache_v1_rediscluster.yaml, the RedisCluster users start from,
// and places it in namespace.
func Sample(namespace string) (*cachev1.RedisCluster, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "samples", "cache_v1_rediscluster.yaml"))
	if err != nil {
		return nil, fmt.Errorf("reading the sample: %w", err)
	}
	rc := &cachev1.RedisCluster{}
	if err := yaml.UnmarshalStrict(raw, rc); err != nil {
		return nil, fmt.Errorf("decoding the sample: %w", err)
	}
	rc.Namespace = namespace
	return rc, nil
}

// Ready is what every suite waits for: the RedisCluster's status is Ready for its current
// generation.
func Ready(rc *cachev1.RedisCluster) bool {
	return rc.Status.ObservedGeneration == rc.Generation && meta.IsStatusConditionTrue(rc.Status.Conditions, cachev1.ConditionReady)
}

// RedisCluster builds a RedisCluster of the given size in namespace.
func RedisCluster(namespace, name string, replicas int32) *cachev1.RedisCluster {
	return &cachev1.RedisCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       cachev1.RedisClusterSpec{Replicas: replicas, Version: cachev1.DefaultVersion},
	}
}

// CreateNamespace creates a namespace with a generated name and returns the name.
func CreateNamespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating namespace: %w", err)
	}
	return ns.Name, nil
}
