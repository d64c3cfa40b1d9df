package v1

// Condition types on a RedisCluster.
const (
	// ConditionReady is True when every Redis node is ready and the children match the spec.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the children are changing towards the spec.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the operator cannot bring the children to the spec.
	ConditionDegraded = "Degraded"
)

// Condition reasons. They are API: users grep for them and alerts match them.
const (
	// ReasonAllReplicasReady (Ready=True): every Redis node is ready.
	ReasonAllReplicasReady = "AllReplicasReady"
	// ReasonReplicasNotReady (Ready=False): fewer nodes are ready than spec.replicas.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonRolloutInProgress (Progressing=True): the StatefulSet is rolling out a change.
	ReasonRolloutInProgress = "RolloutInProgress"
	// ReasonRolloutComplete (Progressing=False): the StatefulSet runs the current spec.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonApplyFailed (Degraded=True, Ready=False): a child could not be created or changed; the message says why.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonAsExpected (Degraded=False): nothing is wrong.
	ReasonAsExpected = "AsExpected"
)

// Event reasons recorded on a RedisCluster.
const (
	// EventChildCreated (Normal): a child object was created.
	EventChildCreated = "Created"
	// EventChildUpdated (Normal): a child object was changed to match the spec, or put back after a manual edit.
	EventChildUpdated = "Updated"
	// EventApplyFailed (Warning): the API server refused a child; the note carries its error.
	EventApplyFailed = "ApplyFailed"
)
