package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// provisioner stands in for a cluster's dynamic volume provisioner, the one part of the local
// cluster still emulated: every pending claim gets a `local` PersistentVolume of node, a
// directory of its own under dir, which the controller manager's volume binder then binds and
// the kubelet mounts with the pod's fsGroup (as a local static provisioner's volumes are).
type provisioner struct {
	client client.Client
	dir    string
	node   string
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
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
			continue
		}
		dir := filepath.Join(p.dir, "volumes", string(pvc.UID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "local-" + string(pvc.UID)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
				AccessModes:                   pvc.Spec.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
				ClaimRef:                      &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
				}}}},
			},
		}
		if err := p.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}
