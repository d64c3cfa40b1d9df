package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// provisioner stands in for a cluster's dynamic volume provisioner, the one part of the local
// cluster still emulated: a claim of the default StorageClass (WaitForFirstConsumer) gets,
// once the scheduler has chosen its pod's node, a `local` PersistentVolume of that node, a
// directory of its own under dir/<node>, which the controller manager's volume binder then binds
// and the kubelet mounts with the pod's fsGroup (as a local static provisioner's volumes are).
// The volume is the node's: a pod using it runs there or nowhere.
type provisioner struct {
	client client.Client
	dir    string
}

// StorageClass is the local cluster's default StorageClass, whose volumes the provisioner makes.
const StorageClass = "standard"

// provisionerName is the StorageClass's provisioner: the stand-in's.
const provisionerName = "local.redis-operator.test/stand-in"

// selectedNode is the annotation the scheduler puts on a claim of a WaitForFirstConsumer class
// once it has chosen the node of the claim's pod.
const selectedNode = "volume.kubernetes.io/selected-node"

// createStorageClass makes the default StorageClass: volumes bound where the first pod using
// them was scheduled.
func (c *Cluster) createStorageClass(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       provisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if err := c.Client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the default StorageClass: %w", err)
	}
	return nil
}

// run provisions until ctx ends.
func (p provisioner) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = p.provisionPending(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// provisionPending gives every pending, unbound claim a volume.
func (p provisioner) provisionPending(ctx context.Context) error {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := p.client.List(ctx, claims); err != nil {
		return err
	}
	for _, pvc := range claims.Items {
		node := pvc.Annotations[selectedNode]
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || node == "" {
			continue
		}
		dir := filepath.Join(p.dir, "volumes", node, string(pvc.UID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "local-" + string(pvc.UID)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
				AccessModes:                   pvc.Spec.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				// The scheduler's volume binding finds it by the claim's class.
				StorageClassName:       ptr.Deref(pvc.Spec.StorageClassName, ""),
				ClaimRef:               &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}}},
			},
		}
		if err := p.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}
