package resources

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// The user's scheduling settings pass through to the pod template unchanged. Their typed and
// apply-configuration forms share one JSON shape, so a round trip through JSON converts them.
func convert[In, Out any](in In) *Out {
	raw, err := json.Marshal(in)
	if err != nil {
		panic(err) // a Kubernetes API type always encodes
	}
	out := new(Out)
	if err := json.Unmarshal(raw, out); err != nil {
		panic(err)
	}
	return out
}

func affinity(a *corev1.Affinity) *corev1ac.AffinityApplyConfiguration {
	return convert[*corev1.Affinity, corev1ac.AffinityApplyConfiguration](a)
}

func toleration(t corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	return convert[corev1.Toleration, corev1ac.TolerationApplyConfiguration](t)
}

func spreadConstraint(c corev1.TopologySpreadConstraint) *corev1ac.TopologySpreadConstraintApplyConfiguration {
	return convert[corev1.TopologySpreadConstraint, corev1ac.TopologySpreadConstraintApplyConfiguration](c)
}

// resourceRequirements is spec.resources, or an empty one (no requests, no limits).
func resourceRequirements(r *corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	if r == nil {
		return corev1ac.ResourceRequirements()
	}
	return convert[*corev1.ResourceRequirements, corev1ac.ResourceRequirementsApplyConfiguration](r)
}
