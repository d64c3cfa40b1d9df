package v1

// Condition types on a RedisCluster.
const (
	// ConditionReady is True when every Redis node is ready and the children match the spec.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the children are changing towards the spec.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the operator cannot bring the children to the spec.
	ConditionDegraded = "Degraded"
	// ConditionFailingOver is True while the primary moves to another node.
	ConditionFailingOver = "FailingOver"
	// ConditionPersistent is True when every node keeps its data on a PersistentVolumeClaim.
	ConditionPersistent = "Persistent"
	// ConditionRestored is True once the first node serves the data of spec.restore's backup.
	ConditionRestored = "Restored"
	// ConditionDataLost is True once the operator made primary a node holding no data while
	// the primary before it held some: every node that answered had restarted without its data.
	// It stays True, its lastTransitionTime saying when, the message what was lost and why.
	ConditionDataLost = "DataLost"
	// ConditionOutOfMemory is True while a node's Redis was last ended by the kernel out of
	// memory (ReasonOOMKilled), or while a node's data fills its maxmemory and it refuses writes
	// (ReasonMaxMemoryReached); False (AsExpected) otherwise.
	ConditionOutOfMemory = "OutOfMemory"
	// ConditionResilient is True when losing any one node (machine) keeps the RedisCluster
	// serving with its data: every shard has a node on another machine, and in cluster mode no
	// machine holds half the primaries or more. False names the machine and the pods on it
	// (ReasonNodesShared). Ready stays about serving now.
	ConditionResilient = "Resilient"
	// ConditionExposed is there only with spec.expose: True when every address clients outside
	// the Kubernetes cluster dial is known (each external Service's load-balancer address; in
	// cluster mode each node's announced one) and, with spec.tls, tls.crt is valid for each;
	// False while an address is pending (ReasonAddressPending) or when tls.crt misses one
	// (ReasonCertificateMissesAddress). Redis serves inside either way: Ready does not wait on it.
	ConditionExposed = "Exposed"
)

// Condition types on a RedisBackup.
const (
	// ConditionCompleted is True when the snapshot is stored whole with its checksum; False
	// while it runs, or with the reason it failed.
	ConditionCompleted = "Completed"
)

// Condition reasons. They are API: users grep for them and alerts match them.
const (
	// ReasonAllReplicasReady (Ready=True): every Redis node is ready.
	ReasonAllReplicasReady = "AllReplicasReady"
	// ReasonReplicasNotReady (Ready=False): fewer nodes are ready than spec.replicas.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonNodeNotReady (Ready=False): fewer nodes are ready than wanted, and some of their pods
	// are on Kubernetes nodes that are not ready (a machine lost, powered off or cut off); the
	// message names each pod and its node, and what lets a pod deleted there start elsewhere, or
	// the claim whose volume on such a node a pod not yet started waits for.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonNodeCordoned (Ready=False): fewer nodes are ready than wanted, and a pod not yet
	// started waits for its volume on a cordoned node (drained, a local volume); the message
	// names the pod, its claim and the node, and what lets it start.
	ReasonNodeCordoned = "NodeCordoned"
	// ReasonRolloutInProgress (Progressing=True): the StatefulSet is rolling out a change.
	ReasonRolloutInProgress = "RolloutInProgress"
	// ReasonRolloutComplete (Progressing=False): the StatefulSet runs the current spec.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonApplyFailed (Degraded=True, Ready=False): a child could not be created or changed; the message says why.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonAsExpected (Degraded=False): nothing is wrong.
	ReasonAsExpected = "AsExpected"
	// ReasonSecretNotFound (Degraded=True): the password Secret or its key is missing.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonTLSSecretInvalid (Degraded=True): the TLS Secret is missing, lacks tls.crt, tls.key
	// or ca.crt, or holds no usable certificate and key; the message says which.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonTLSFailed (Degraded=True): a node could not be made to serve the Secret's
	// certificate, or its certificate is not valid for the primary Service's name.
	ReasonTLSFailed = "TLSFailed"
	// ReasonUserRejected (Degraded=True): a user of spec.users could not be applied: Redis
	// refused its rules, or its password Secret or key is missing. The message names the user;
	// the other users are applied.
	ReasonUserRejected = "UserRejected"
	// ReasonTopologyFailed (Degraded=True, Ready=False): a change of roles over the Redis
	// protocol (promote, repoint, switchover) failed; the message names the node and the step.
	// The next reconcile observes the nodes and decides again.
	ReasonTopologyFailed = "TopologyFailed"
	// ReasonShardsForming (Ready=False), in cluster mode: the nodes are meeting, the slots are
	// being assigned or the replicas attached; the message says what the cluster waits for.
	ReasonShardsForming = "ShardsForming"
	// ReasonSlotsMoving (Ready=False, Progressing=True), in cluster mode: hash slots move
	// between shards after spec.cluster.shards changed, or a drained shard's pods are being
	// removed; the message says which shard and how many slots are left.
	ReasonSlotsMoving = "SlotsMoving"
	// ReasonClusterFailed (Degraded=True, Ready=False), in cluster mode: a cluster command
	// (CLUSTER MEET, ADDSLOTSRANGE, REPLICATE, FORGET, SETSLOT, MIGRATE) failed; the message
	// names the node, and for a slot move the slot.
	ReasonClusterFailed = "ClusterFailed"
	// ReasonClusterDown (Degraded=True, Ready=False), in cluster mode: a node says the cluster
	// cannot serve every slot (cluster_state:fail), or a shard has no primary.
	ReasonClusterDown = "ClusterDown"
	// ReasonAuthenticationFailed (Degraded=True): Redis refused the password.
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonRedisFailedToStart (Degraded=True, Ready=False): a node's redis-server exits as it
	// starts and its container is restarted with back-off; the message is what Redis said, such
	// as a directive of spec.config it refuses.
	ReasonRedisFailedToStart = "RedisFailedToStart"
	// ReasonRedisKilled (Degraded=True, Ready=False): a node's redis-server was killed (by a
	// signal, or out of memory) and its container waits out the kubelet's restart back-off; the
	// message gives the container's termination reason, exit code, restarts and back-off.
	ReasonRedisKilled = "RedisKilled"
	// ReasonNodesRestartedWithoutData (DataLost=True): every node that answered had restarted
	// without data (no spec.storage, or volumes that held none), and one of them was made
	// primary: what the primary before it held is gone.
	ReasonNodesRestartedWithoutData = "NodesRestartedWithoutData"
	// ReasonOOMKilled (OutOfMemory=True): the kernel killed a node's Redis out of memory (its
	// container's last termination says OOMKilled); the message names the pod, when, and the
	// container's memory limit.
	ReasonOOMKilled = "OOMKilled"
	// ReasonMaxMemoryReached (OutOfMemory=True): a node's data fills its maxmemory and its
	// maxmemory-policy (noeviction) refuses writes; the message names the nodes, their
	// maxmemory and policy.
	ReasonMaxMemoryReached = "MaxMemoryReached"
	// ReasonSettingsFailed (Degraded=True): a node refused a setting the operator keeps live on
	// running nodes (CONFIG SET of repl-ping-replica-period, or of the maxmemory derived from
	// the memory limit); the message names the node.
	ReasonSettingsFailed = "SettingsFailed"
	// ReasonNoPrimary (Degraded=True, Ready=False): no node can be primary yet.
	ReasonNoPrimary = "NoPrimary"
	// ReasonPrimaryUnreachable (Degraded=True): the primary does not answer; a replica replaces
	// it when spec.failover.unreachableTimeout passes.
	ReasonPrimaryUnreachable = "PrimaryUnreachable"
	// ReasonReplicationNotReady (Ready=False): a node is not (yet) a caught-up replica.
	ReasonReplicationNotReady = "ReplicationNotReady"
	// ReasonFailover (FailingOver=True): the primary is gone and a replica is being promoted.
	ReasonFailover = "Failover"
	// ReasonSwitchover (FailingOver=True): the primary role moves on purpose (scale-in, upgrade).
	ReasonSwitchover = "Switchover"
	// ReasonFailoverComplete (FailingOver=False): the last change of primary is done.
	ReasonFailoverComplete = "FailoverComplete"
	// ReasonStable (FailingOver=False): the primary has not changed.
	ReasonStable = "Stable"
	// ReasonPersistentVolumeClaims (Persistent=True): each node's data is on its own volume.
	ReasonPersistentVolumeClaims = "PersistentVolumeClaims"
	// ReasonEmptyDir (Persistent=False): data lives in emptyDir and is lost with the pod.
	ReasonEmptyDir = "EmptyDir"
	// ReasonSpreadOverNodes (Resilient=True): any one node can be lost.
	ReasonSpreadOverNodes = "SpreadOverNodes"
	// ReasonNodesShared (Resilient=False): losing one node would lose a shard's every copy of
	// its data, or too many primaries for Redis Cluster to elect replacements.
	ReasonNodesShared = "NodesShared"
	// ReasonAddressesAssigned (Exposed=True): every outside address is known, and with spec.tls
	// covered by tls.crt; the message lists them.
	ReasonAddressesAssigned = "AddressesAssigned"
	// ReasonAddressPending (Exposed=False): an external Service has no outside address yet (the
	// load balancer has not given one; in cluster mode also a node port or a pod not yet placed
	// on a Kubernetes node, or a load balancer that gives only a name).
	ReasonAddressPending = "AddressPending"
	// ReasonCertificateMissesAddress (Exposed=False): tls.crt is not valid for an address clients
	// outside dial (an IP it has no IP SAN for, a name it has no DNS SAN for): a client that
	// verifies what it dials refuses it.
	ReasonCertificateMissesAddress = "CertificateMissesAddress"

	// ReasonBackupNotReady (Restored=False, Progressing=True): spec.restore's RedisBackup does
	// not exist or has not completed; no pod starts until it has.
	ReasonBackupNotReady = "BackupNotReady"
	// ReasonRestoring (Restored=False, Progressing=True): the first node's data is being fetched
	// and checked.
	ReasonRestoring = "Restoring"
	// ReasonBackupsNotServed (Degraded=True, and Restored=False with spec.restore): spec.backup or
	// spec.restore while the operator does not serve RedisBackups (their CRD is not installed,
	// or came after the operator started).
	ReasonBackupsNotServed = "BackupsNotServed"
	// ReasonRestoreFailed (Restored=False, Degraded=True): the snapshot could not be restored:
	// missing, corrupt (checksum mismatch), unreachable storage, or a data directory that
	// already holds data. The message is the restore's own; Redis did not start on that data.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoreComplete (Restored=True): the first node serves the restored data.
	ReasonRestoreComplete = "RestoreComplete"
	// ReasonBackupScheduleInvalid (Degraded=True): spec.backup.schedule does not parse.
	ReasonBackupScheduleInvalid = "BackupScheduleInvalid"

	// RedisBackup reasons (condition Completed).

	// ReasonBackupPending (Completed=False): the cluster does not exist yet or has no node
	// that answers.
	ReasonBackupPending = "Pending"
	// ReasonBackupRunning (Completed=False): the snapshot is streaming to the destination.
	ReasonBackupRunning = "Running"
	// ReasonBackupStored (Completed=True): the snapshot is stored whole, with its checksum.
	ReasonBackupStored = "Stored"
	// ReasonStorageFailed (Completed=False): the destination refused or did not answer:
	// wrong credentials, a missing bucket, the store down mid-upload. Nothing partial is kept.
	ReasonStorageFailed = "StorageFailed"
	// ReasonSnapshotFailed (Completed=False): the node could not produce the snapshot.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonCredentialsNotFound (Completed=False): the credentials Secret or a key is missing.
	ReasonCredentialsNotFound = "CredentialsNotFound"
	// ReasonClaimNotFound (Completed=False): the destination's PersistentVolumeClaim does not
	// exist; the backup waits for it.
	ReasonClaimNotFound = "ClaimNotFound"
)

// Event reasons recorded on a RedisCluster. A failed reconcile phase records a Warning whose
// reason is its Degraded condition's reason (ApplyFailed, SecretNotFound, AuthenticationFailed,
// TopologyFailed).
const (
	// EventChildCreated (Normal): child objects were created; one Event per reconcile names them all.
	EventChildCreated = "Created"
	// EventChildUpdated (Normal): child objects were changed to match the spec, or put back after a
	// manual edit; one Event per reconcile names them all.
	EventChildUpdated = "Updated"
	// EventChildDeleted (Normal): child objects the spec no longer asks for were deleted (the
	// external Services, when spec.expose is removed); one Event per reconcile names them all.
	EventChildDeleted = "Deleted"
	// EventApplyFailed (Warning): the API server refused a child; the note carries its error.
	EventApplyFailed = "ApplyFailed"
	// EventSecretNotFound (Warning): the password Secret or its key is missing.
	EventSecretNotFound = "SecretNotFound"
	// EventTopologyFailed (Warning): a change of roles over the Redis protocol failed.
	EventTopologyFailed = "TopologyFailed"
	// EventRedisFailedToStart (Warning): a node's redis-server keeps exiting as it starts.
	EventRedisFailedToStart = "RedisFailedToStart"
	// EventRedisKilled (Warning): a node's redis-server was killed and is restarted with back-off.
	EventRedisKilled = "RedisKilled"
	// EventNodesShared (Warning): the RedisCluster became not Resilient; the message names the
	// node and what losing it loses.
	EventNodesShared = "NodesShared"
	// EventCertificateMissesAddress (Warning): the RedisCluster became Exposed=False because
	// tls.crt is not valid for an address clients outside dial; the message names them.
	EventCertificateMissesAddress = "CertificateMissesAddress"
	// EventDataLost (Warning): a node holding no data was made primary while the primary before
	// it held some (ConditionDataLost).
	EventDataLost = "DataLost"
	// EventOOMKilled (Warning): the kernel killed a node's Redis out of memory; the note gives
	// the container's limit and the memory Redis used at the operator's last reading.
	EventOOMKilled = "OOMKilled"
	// EventAuthenticationFailed (Warning): Redis refused the password.
	EventAuthenticationFailed = "AuthenticationFailed"
	// EventPromoted (Normal): a node became the primary.
	EventPromoted = "Promoted"
	// EventRepointed (Normal): a node now replicates from the primary.
	EventRepointed = "Repointed"
	// EventPaused (Normal): writes are held on the primary for a switchover.
	EventPaused = "Paused"
	// EventFailedOver (Warning): a replica replaced a primary that was gone.
	EventFailedOver = "FailedOver"
	// EventSwitchedOver (Normal): the primary role moved on purpose.
	EventSwitchedOver = "SwitchedOver"
	// EventPasswordChanged (Normal): a running node was given the password its Secret now holds.
	EventPasswordChanged = "PasswordChanged"
	// EventCertificateReloaded (Normal): a running node loaded the certificate its TLS Secret
	// now holds.
	EventCertificateReloaded = "CertificateReloaded"
	// EventPreviousPasswordRemoved (Normal): the password before the last change no longer works
	// on any node: its time (spec.auth.previousPasswordValidFor) is up.
	EventPreviousPasswordRemoved = "PreviousPasswordRemoved"
	// EventReplacingPod (Normal): a pod is deleted so that it comes back with the current spec.
	EventReplacingPod = "ReplacingPod"
	// EventBackupScheduled (Normal): spec.backup's schedule created a RedisBackup.
	EventBackupScheduled = "BackupScheduled"
	// EventBackupPruned (Normal): retention deleted a scheduled RedisBackup.
	EventBackupPruned = "BackupPruned"
	// EventRestored (Normal): the first node serves the restored data.
	EventRestored = "Restored"
	// EventClusterChanged (Normal), in cluster mode: the operator sent a cluster command (nodes
	// met, slots assigned, a replica attached, a gone node forgotten, slots moved, a drained
	// shard removed); the message says which.
	EventClusterChanged = "ClusterChanged"
	// EventBackupCompleted (Normal) and EventBackupFailed (Warning), on a RedisBackup.
	EventBackupCompleted = "BackupCompleted"
	EventBackupFailed    = "BackupFailed"
)
