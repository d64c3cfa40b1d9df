package scope

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
)

// What a run-once pod (a restore from a volume, a backup onto one) said when it ended.

// PodExit is the exit of a run-once pod's container; nil while it has not exited.
func PodExit(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return nil
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Terminated != nil {
			return c.State.Terminated
		}
	}
	// Failed before its container ran (evicted, its node lost).
	return &corev1.ContainerStateTerminated{ExitCode: 1, Message: strings.TrimSpace(pod.Status.Reason + " " + pod.Status.Message)}
}

// taskError is what a volume task's pod said when it failed.
type taskError struct {
	msg   string
	cause error
}

func (e *taskError) Error() string { return e.msg }
func (e *taskError) Unwrap() error { return e.cause }

// VolumeTaskError is the failure a pod's exit reports: the volume's (storage) or the node's
// (snapshot), in the pod's own words.
func VolumeTaskError(t *corev1.ContainerStateTerminated) error {
	msg := strings.Join(strings.Fields(t.Message), " ")
	if msg == "" {
		msg = fmt.Sprintf("the pod exited with code %d", t.ExitCode)
	}
	cause := backup.ErrSnapshot
	if t.ExitCode == resources.ExitStorageFailed {
		cause = backup.ErrStorage
	}
	return &taskError{msg: msg, cause: cause}
}
