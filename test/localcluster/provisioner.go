package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The default StorageClass's volumes come from Rancher's local-path-provisioner v0.0.30 (make
// node builds it from hack/tools/local-path-provisioner), the provisioner kind, k3s and many
// bare-metal clusters run: a claim of the class (WaitForFirstConsumer) waits for the scheduler to
// choose its pod's node; the provisioner then has a helper pod on that node make a directory
// under the node's path, and makes a PersistentVolume of it with a node affinity to that node,
// which the controller manager binds. A pod using the claim runs on that node or nowhere, as
// with a machine's local disk.
//
// It runs as the controller manager does here, a process in the control plane's namespace with
// the control plane's kubeconfig (its Deployment would run the same binary with the same flags
// in a pod; a pod could be lost with its node, the control plane is not). Its helper pods run
// the Redis image (Debian's /bin/sh, mkdir and rm: all the scripts below need) where its
// manifests name busybox, which is not built here; as root, as busybox runs (the Redis image's
// user may not make directories in the node's path).

// StorageClass is the local cluster's default StorageClass.
const StorageClass = "standard"

// provisionerName is the name local-path-provisioner's manifests give it.
const provisionerName = "rancher.io/local-path"

// Its namespace (which holds its ConfigMap and its helper pods), ServiceAccount and ConfigMap,
// named as in its manifests.
const (
	provisionerNamespace      = "local-path-storage"
	provisionerServiceAccount = "local-path-provisioner-service-account"
	provisionerConfigMap      = "local-path-config"
)

// provisionerProcess is its name among the control plane's processes (and its log's).
const provisionerProcess = "local-path-provisioner"

// createStorageClass makes the default StorageClass: volumes bound where the first pod using
// them was scheduled. Its volumes are `local` volumes (the provisioner's defaultVolumeType
// annotation), which the kubelet mounts with a pod's fsGroup, where a hostPath volume (the
// provisioner's default) keeps the helper's mode 0777.
func (c *Cluster) createStorageClass(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
			"defaultVolumeType":                           "local",
		}},
		Provisioner:       provisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if err := c.Client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the default StorageClass: %w", err)
	}
	return nil
}

// Its scripts as its manifests have them (deploy/local-path-storage.yaml).
const (
	provisionerSetup    = "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n"
	provisionerTeardown = "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n"
	provisionerHelper   = `apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
    - key: node.kubernetes.io/disk-pressure
      operator: Exists
      effect: NoSchedule
  containers:
  - name: helper-pod
    image: %s
    imagePullPolicy: IfNotPresent
    securityContext:
      runAsUser: 0
`
)

// startProvisioner starts local-path-provisioner with each node's volumes under dir/volumes/<node>
// (the nodes share this machine's disk: each its own directory, as each machine its own disk).
func (c *Cluster) startProvisioner(ctx context.Context, root, dir string, nodes []string) error {
	type nodePaths struct {
		Node  string   `json:"node"`
		Paths []string `json:"paths"`
	}
	var config struct {
		NodePathMap []nodePaths `json:"nodePathMap"`
	}
	for _, n := range nodes {
		config.NodePathMap = append(config.NodePathMap, nodePaths{Node: n, Paths: []string{filepath.Join(dir, "volumes", n)}})
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	helperImage := "docker.io/library/redis:" + RedisVersions[0]
	helper := fmt.Sprintf(provisionerHelper, helperImage)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: provisionerNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: provisionerServiceAccount, Namespace: provisionerNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: provisionerConfigMap, Namespace: provisionerNamespace}, Data: map[string]string{
			"config.json": string(configJSON), "setup": provisionerSetup, "teardown": provisionerTeardown, "helperPod.yaml": helper,
		}},
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating local-path-provisioner's %T: %w", obj, err)
		}
	}
	// Its config from files, not from its ConfigMap: the provisioner reads a file again when it
	// changes, and its ConfigMap only through a mounted volume.
	configFile, helperFile := filepath.Join(dir, "local-path-config.json"), filepath.Join(dir, "local-path-helper-pod.yaml")
	if err := os.WriteFile(configFile, configJSON, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(helperFile, []byte(helper), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(root, "bin", "local-path-provisioner")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (make node builds it)", err)
	}
	return c.run(provisionerProcess, bin, "start",
		"--kubeconfig", c.NodeKubeconfig, "--namespace", provisionerNamespace,
		"--provisioner-name", provisionerName, "--config", configFile, "--helper-pod-file", helperFile,
		"--configmap-name", provisionerConfigMap, "--service-account-name", provisionerServiceAccount,
		"--helper-image", helperImage)
}
