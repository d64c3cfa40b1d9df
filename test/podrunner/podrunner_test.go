package podrunner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestContainerConfMapsPathsFromTheMountsToTheirDirectories(t *testing.T) {
	dir := t.TempDir()
	etc, auth, data := filepath.Join(dir, "etc"), filepath.Join(dir, "auth"), filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(etc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(etc, "redis.conf"),
		[]byte("port 6379\ndir /data\ninclude /etc/redis-auth/auth.conf\nreplicaof 127.0.0.1 1\n"), 0o600))
	container := corev1.Container{
		Command: []string{"redis-server", "/etc/redis.conf"},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "config", MountPath: "/etc"},
			{Name: "auth", MountPath: "/etc/redis-auth"}, // longer: wins over /etc
			{Name: "data", MountPath: "/data"},
		},
	}

	conf, dataDir, err := containerConf(container, map[string]string{"config": etc, "auth": auth, "data": data}, "unused")

	require.NoError(t, err)
	assert.Equal(t, data, dataDir)
	assert.Equal(t, "port 6379\ndir "+data+"\ninclude "+auth+"/auth.conf\nreplicaof 127.0.0.1 1\n", conf)
}

func TestStartRefusesWhatItCannotRun(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Command: []string{"nginx"}}}}}
	_, err := Start(t.Context(), staticSources{}, t.TempDir(), pod)
	assert.ErrorContains(t, err, "only pods of one redis-server container")
}
