package podrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/resources"
)

// StartRedisCluster runs the nodes of a RedisCluster without an API server, as its pods would
// run: the pod template, redis.conf and password file the operator's builders make, laid out
// by the same code that runs the pods of a cluster. Each process is named like its pod
// (<name>-<ordinal>); its data lives under dir.
func StartRedisCluster(ctx context.Context, dir string, rc *cachev1.RedisCluster, password string) ([]*Process, error) {
	conf := resources.RedisConf(rc)
	src := staticSources{
		configMaps: map[string]map[string]string{resources.ConfigMapName(rc): {resources.ConfigFileName: conf}},
		secrets:    map[string]map[string][]byte{resources.AuthConfSecretName(rc): {resources.AuthConfKey: []byte(resources.AuthConf(password))}},
		claimsDir:  filepath.Join(dir, "claims"),
	}
	sts := resources.DesiredStatefulSet(rc, resources.StatefulSetOptions{Replicas: rc.Spec.Replicas, ConfigHash: resources.ConfigHash(rc)})
	raw, err := json.Marshal(sts.Spec.Template)
	if err != nil {
		return nil, err
	}
	template := corev1.PodTemplateSpec{}
	if err := json.Unmarshal(raw, &template); err != nil {
		return nil, err
	}
	var procs []*Process
	for ordinal := range int(rc.Spec.Replicas) {
		pod := &corev1.Pod{ObjectMeta: template.ObjectMeta, Spec: *template.Spec.DeepCopy()}
		pod.Name = fmt.Sprintf("%s-%d", rc.Name, ordinal)
		pod.Namespace = rc.Namespace
		pod.UID = types.UID(pod.Name)
		for _, claim := range sts.Spec.VolumeClaimTemplates {
			AddClaimVolume(pod, *claim.GetName())
		}
		p, err := Start(ctx, src, dir, pod)
		if err == nil && !p.Alive() {
			err = fmt.Errorf("redis-server %s exited at start: %s", pod.Name, p.TerminationMessage())
		}
		if err != nil {
			for _, started := range procs {
				started.Stop()
			}
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// AddClaimVolume adds the volume of a claim template to the pod, as the StatefulSet
// controller does: the claim <template>-<pod>.
func AddClaimVolume(pod *corev1.Pod, template string) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: template, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: template + "-" + pod.Name},
	}})
}

// staticSources hold volumes in memory; a claim is a directory of its own under claimsDir.
type staticSources struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
	claimsDir  string
}

func (s staticSources) ConfigMap(_ context.Context, _, name string) (map[string]string, error) {
	if data, ok := s.configMaps[name]; ok {
		return data, nil
	}
	return nil, fmt.Errorf("ConfigMap %s not found", name)
}

func (s staticSources) Secret(_ context.Context, _, name string) (map[string][]byte, error) {
	if data, ok := s.secrets[name]; ok {
		return data, nil
	}
	return nil, fmt.Errorf("Secret %s not found", name)
}

func (s staticSources) ClaimDir(_ context.Context, namespace, claim string) (string, error) {
	return filepath.Join(s.claimsDir, namespace, claim), nil
}
