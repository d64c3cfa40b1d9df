package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupDestination is where a backup's RDB snapshot is stored: an S3-compatible bucket, or a
// PersistentVolumeClaim.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.persistentVolumeClaim)",message="a backup destination is one of s3 or persistentVolumeClaim"
type BackupDestination struct {
	// S3 is an S3-compatible object store: AWS S3, SeaweedFS, Ceph RGW, ...
	// +optional
	S3 *S3Destination `json:"s3,omitempty"`

	// PersistentVolumeClaim is a volume in the cluster's namespace. The operator holds no
	// volume: a pod of its own image mounts the claim to write, read or delete a snapshot.
	// +optional
	PersistentVolumeClaim *VolumeDestination `json:"persistentVolumeClaim,omitempty"`
}

// VolumeDestination is a PersistentVolumeClaim that holds backups as files.
type VolumeDestination struct {
	// ClaimName is a PersistentVolumeClaim in the same namespace. A backup's pod mounts it while
	// it writes; a ReadWriteOnce claim is fine, as one pod at a time uses it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="PersistentVolumeClaim",xDescriptors={"urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"}
	ClaimName string `json:"claimName"`

	// Prefix is the directory on the volume: <prefix>/<namespace>/<cluster>/<backup>.rdb.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..')",message="the prefix must stay on the volume: no .. element"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Volume Prefix",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Prefix string `json:"prefix,omitempty"`
}

// S3Destination is a bucket of an S3-compatible object store.
type S3Destination struct {
	// Endpoint is the store's URL, https://host[:port] (http:// for a store without TLS): a
	// scheme and a host (a DNS name, an IPv4 address or an [IPv6] address), an optional port,
	// nothing else. Never credentials in the URL: it is copied into the status and a
	// ConfigMap, which anyone who reads the RedisCluster sees; they go in credentialsSecret.
	// Without it, AWS S3 in Region. With it, requests use path-style addressing
	// (endpoint/bucket/key), which every S3-compatible store takes.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(:[0-9]{1,5})?/?$`
	// +kubebuilder:validation:XValidation:rule="!self.matches(':[0-9]+/?$') || [int(self.find(':[0-9]+/?$').replace(':', '').replace('/', ''))].all(p, p >= 1 && p <= 65535)",message="spec.destination.s3.endpoint: a port is 1 to 65535"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^https?://[0-9.]+(:[0-9]+)?/?$') || self.split('://')[1].split('/')[0].split(':')[0].matches('^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$')",message="spec.destination.s3.endpoint: a host of digits and dots is an IPv4 address, four numbers from 0 to 255 without leading zeros"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="S3 Endpoint",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Endpoint string `json:"endpoint,omitempty"`

	// Bucket holds the backups; it must exist. S3's naming rules: 3 to 63 lowercase letters,
	// digits, '.' and '-', starting and ending with a letter or digit, no '..', and not shaped
	// like an IP address (AWS refuses such names, and other stores would take them for hosts).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('.-') && !self.contains('-.')",message="an S3 bucket name has no '..', '.-' or '-.'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$')",message="an S3 bucket name is not shaped like an IP address"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('xn--') && !self.startsWith('sthree-') && !self.endsWith('-s3alias') && !self.endsWith('--ol-s3')",message="an S3 bucket name does not start with xn-- or sthree- nor end with -s3alias or --ol-s3 (reserved by S3)"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Bucket",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Bucket string `json:"bucket"`

	// Prefix goes before each object's key: <prefix>/<namespace>/<cluster>/<backup>.rdb.
	// Path elements separated by '/', none empty, none '.' or '..'.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9!_.*'()-]+(/[a-zA-Z0-9!_.*'()-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..' || p == '.')",message="an S3 prefix has no '.' or '..' element: keys are read as paths by some stores and tools"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Prefix",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket: lowercase letters, digits and '-'. Default us-east-1.
	// +kubebuilder:default=us-east-1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Region",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Region string `json:"region,omitempty"`

	// CredentialsSecret is a Secret in the same namespace with the keys AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Credentials Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	CredentialsSecret string `json:"credentialsSecret"`

	// CABundle is a Secret key holding the PEM certificates that sign the endpoint's
	// certificate, when the system's do not.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="CA Bundle",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:advanced"}
	CABundle *SecretKeyRef `json:"caBundle,omitempty"`
}

// The keys of a backup destination's credentials Secret.
const (
	S3AccessKeyIDKey     = "AWS_ACCESS_KEY_ID"
	S3SecretAccessKeyKey = "AWS_SECRET_ACCESS_KEY"
)

// BackupDeletionPolicy says what deleting a RedisBackup does to its stored snapshot.
// +kubebuilder:validation:Enum=Retain;Delete
type BackupDeletionPolicy string

const (
	// BackupRetain keeps the stored snapshot when the RedisBackup is deleted.
	BackupRetain BackupDeletionPolicy = "Retain"
	// BackupDelete deletes the stored snapshot with the RedisBackup.
	BackupDelete BackupDeletionPolicy = "Delete"
)

// RedisBackupSpec says which RedisCluster to back up, and where to.
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster && self.destination == oldSelf.destination",message="a RedisBackup's cluster and destination cannot change: create another RedisBackup"
// +redis-operator:admissionrules:begin:backup
// +kubebuilder:validation:XValidation:rule=`!has(self.destination.s3) || (!(self.destination.s3.credentialsSecret in [self.cluster + '-auth-conf', self.cluster + '-auth-previous', self.cluster + '-operator', self.cluster + '-auth']) && (!has(self.destination.s3.caBundle) || !(self.destination.s3.caBundle.name in [self.cluster + '-auth-conf', self.cluster + '-auth-previous', self.cluster + '-operator', self.cluster + '-auth'])))`,message="spec.destination.s3 names one of the Secrets the operator owns for spec.cluster (<cluster>-auth-conf, -auth-previous, -operator, -auth)",fieldPath=".destination.s3"
// +kubebuilder:validation:XValidation:rule=`!has(self.destination.persistentVolumeClaim) || !self.destination.persistentVolumeClaim.claimName.matches('^data-' + self.cluster + '(-shard[0-9]+)?-[0-9]+$')`,message="spec.destination.persistentVolumeClaim.claimName is one of the data claims of spec.cluster (data-<statefulset>-<ordinal>): a backup would be written beside the data it saves, and lost with it",fieldPath=".destination.persistentVolumeClaim.claimName"
// +redis-operator:admissionrules:end:backup
type RedisBackupSpec struct {
	// Cluster is the name of the RedisCluster to back up, in the same namespace (a
	// RedisCluster's name: a lowercase letter, then lowercase letters, digits and '-').
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Cluster",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Cluster string `json:"cluster"`

	// Destination is where the snapshot is stored.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Destination"
	Destination BackupDestination `json:"destination"`

	// DeletionPolicy: keep (Retain, default) or delete (Delete) the stored snapshot when the
	// RedisBackup is deleted. Scheduled backups are Delete, so that retention frees the storage.
	// +kubebuilder:default=Retain
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Deletion Policy",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:select:Retain","urn:alm:descriptor:com.tectonic.ui:select:Delete"}
	DeletionPolicy BackupDeletionPolicy `json:"deletionPolicy,omitempty"`
}

// BackupPhase is where a backup is in its life.
type BackupPhase string

const (
	// BackupPending: not started yet (the cluster has no node to take it from).
	BackupPending BackupPhase = "Pending"
	// BackupRunning: the snapshot is being streamed to the destination (by the operator to
	// S3; by a pod of the operator's image to a PersistentVolumeClaim).
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: the snapshot is stored whole and its checksum recorded; it can be restored.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: the backup did not complete; nothing stored counts as a backup. The
	// Completed condition says why.
	BackupFailed BackupPhase = "Failed"
)

// RedisBackupStatus is what the backup took and where it is.
type RedisBackupStatus struct {
	// Phase: Pending, Running, Completed or Failed.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Phase",xDescriptors={"urn:alm:descriptor:io.kubernetes.phase"}
	Phase BackupPhase `json:"phase,omitempty"`

	// Node is the pod the snapshot was taken from: a caught-up replica when one serves (in
	// cluster mode, each shard's, separated by commas).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Node",xDescriptors={"urn:alm:descriptor:io.kubernetes:Pod"}
	Node string `json:"node,omitempty"`

	// StartedAt is when the snapshot began.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Started At",xDescriptors={"urn:alm:descriptor:text"}
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// CompletedAt is when the snapshot was stored whole.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Completed At",xDescriptors={"urn:alm:descriptor:text"}
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// ReplicationID and ReplicationOffset are the replication stream's position the snapshot
	// holds: every write the primary had applied up to that offset, and none after.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Replication ID",xDescriptors={"urn:alm:descriptor:text"}
	ReplicationID string `json:"replicationID,omitempty"`
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Replication Offset",xDescriptors={"urn:alm:descriptor:text"}
	ReplicationOffset int64 `json:"replicationOffset,omitempty"`

	// Location is the stored snapshot: s3://<bucket>/<key>, or pvc://<claim>/<path> on a
	// PersistentVolumeClaim.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Location",xDescriptors={"urn:alm:descriptor:text"}
	Location string `json:"location,omitempty"`

	// Size of the snapshot in bytes.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Size",xDescriptors={"urn:alm:descriptor:text"}
	Size int64 `json:"size,omitempty"`

	// Checksum of the snapshot, sha256:<hex>; a restore checks it before Redis loads the data.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Checksum",xDescriptors={"urn:alm:descriptor:text"}
	Checksum string `json:"checksum,omitempty"`

	// Shards are the snapshots of a RedisCluster in cluster mode, one per shard, each taken
	// from a caught-up replica of the shard's primary when one serves, while no slot moved.
	// The backup is Completed once every shard's is stored; Size is then their sum, and
	// Location the prefix they share. Each shard's snapshot holds that shard's data as of its
	// own moment: there is no point in time common to the shards.
	// +listType=map
	// +listMapKey=name
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Shards",xDescriptors={"urn:alm:descriptor:text"}
	Shards []ShardBackup `json:"shards,omitempty"`

	// Conditions: Completed.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=status,displayName="Conditions",xDescriptors={"urn:alm:descriptor:io.kubernetes.conditions"}
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ShardBackup is one shard's snapshot in the backup of a RedisCluster in cluster mode.
type ShardBackup struct {
	// Name of the shard's StatefulSet (<cluster>-shard<i>).
	Name string `json:"name"`
	// Slots are the hash slots the shard served when its snapshot was taken, as ranges:
	// "0-5460". A restore gives the shard these slots.
	// +optional
	Slots []string `json:"slots,omitempty"`
	// Node is the pod the snapshot was taken from.
	// +optional
	Node string `json:"node,omitempty"`
	// Location is the stored snapshot: s3://<bucket>/<key>.
	// +optional
	Location string `json:"location,omitempty"`
	// Size of the snapshot in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// Checksum of the snapshot, sha256:<hex>.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// ReplicationID and ReplicationOffset are the shard's replication stream's position the
	// snapshot holds.
	// +optional
	ReplicationID string `json:"replicationID,omitempty"`
	// +optional
	ReplicationOffset int64 `json:"replicationOffset,omitempty"`
}

// RedisBackup is one RDB snapshot of a RedisCluster, taken from a caught-up replica and stored
// with its checksum in S3-compatible object storage or a volume; a new RedisCluster restores it
// with spec.restore.
// +operator-sdk:csv:customresourcedefinitions:displayName="Redis Backup",resources={{RedisCluster,v1},{Secret,v1}}
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rdbk,categories=all;redis
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 243",message="metadata.name must be at most 243 characters: it names the backup's pods, <name>-backup-<shard>"
type RedisBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   RedisBackupSpec   `json:"spec"`
	Status RedisBackupStatus `json:"status,omitempty"`
}

// RedisBackupList is a list of RedisBackups.
// +kubebuilder:object:root=true
type RedisBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedisBackup `json:"items"`
}

// BackupScheduleSpec takes RedisBackups of a RedisCluster on a schedule and deletes the old ones.
type BackupScheduleSpec struct {
	// Schedule in cron format (minute hour day-of-month month day-of-week, in UTC; each field
	// *, ?, a value, a range a-b, a step /n, or a list of those; month and weekday names),
	// or @yearly, @monthly, @weekly, @daily, @hourly, or @every <duration> of 1m or more. The
	// API checks each field's grammar and range; the operator parses the schedule with the
	// scheduler it runs (robfig/cron), and what only that parser refuses (a range whose
	// start is after its end) shows at once as Degraded (BackupScheduleInvalid).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches(r'^([*]|[?]|[0-5]?[0-9]|[0-5]?[0-9]-[0-5]?[0-9])(/[1-9][0-9]{0,2})?(,([*]|[?]|[0-5]?[0-9]|[0-5]?[0-9]-[0-5]?[0-9])(/[1-9][0-9]{0,2})?)* +([*]|[?]|([01]?[0-9]|2[0-3])|([01]?[0-9]|2[0-3])-([01]?[0-9]|2[0-3]))(/[1-9][0-9]{0,2})?(,([*]|[?]|([01]?[0-9]|2[0-3])|([01]?[0-9]|2[0-3])-([01]?[0-9]|2[0-3]))(/[1-9][0-9]{0,2})?)* +([*]|[?]|(0?[1-9]|[12][0-9]|3[01])|(0?[1-9]|[12][0-9]|3[01])-(0?[1-9]|[12][0-9]|3[01]))(/[1-9][0-9]{0,2})?(,([*]|[?]|(0?[1-9]|[12][0-9]|3[01])|(0?[1-9]|[12][0-9]|3[01])-(0?[1-9]|[12][0-9]|3[01]))(/[1-9][0-9]{0,2})?)* +([*]|[?]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))(/[1-9][0-9]{0,2})?(,([*]|[?]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))(/[1-9][0-9]{0,2})?)* +([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))(/[1-9][0-9]{0,2})?(,([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))(/[1-9][0-9]{0,2})?)*$') || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || (self.matches('^@every (([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self.substring(7)) >= duration('1m'))",message="spec.backup.schedule is 5 cron fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat; each *, ?, a value, a range, a /step or a list of those), or @yearly, @monthly, @weekly, @daily, @hourly, or @every <duration> of at least 1m (as 90m or 1h30m)"
	// A list of days of the month fires in some month unless every day is 30 or 31 and every
	// month is February, or every day is 31 and every month has 30 days or fewer (February 29
	// fires in leap years). Ranges, steps and a restricted day of the week always fire.
	// +kubebuilder:validation:XValidation:rule="!self.matches(r'^[^ ]+ +[^ ]+ +3[01](-3[01])?(,3[01](-3[01])?)* +(0?2|(?i:feb))(,(0?2|(?i:feb)))* +[*?]$') && !self.matches(r'^[^ ]+ +[^ ]+ +31(-31)?(,31(-31)?)* +(0?[2469]|11|(?i:feb|apr|jun|sep|nov))(,(0?[2469]|11|(?i:feb|apr|jun|sep|nov)))* +[*?]$')",message="spec.backup.schedule never fires: none of the months it names has the day of the month it names"
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Schedule",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Schedule string `json:"schedule"`

	// Destination of the scheduled backups.
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Backup Destination"
	Destination BackupDestination `json:"destination"`

	// Retention says which scheduled backups to keep; older ones are deleted, their stored
	// snapshots with them. The newest completed backup is always kept.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Retention"
	Retention *BackupRetention `json:"retention,omitempty"`
}

// BackupRetention keeps the newest Count backups, and none older than MaxAge.
type BackupRetention struct {
	// Count of finished scheduled backups to keep.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Count *int32 `json:"count,omitempty"`

	// MaxAge: scheduled backups older than this are deleted. 1m to 87600h (ten years).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('87600h')",message="spec.backup.retention.maxAge must be between 1m and 87600h"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// RestoreSpec fills a new RedisCluster with a backup's data.
type RestoreSpec struct {
	// FromBackup is a Completed RedisBackup in the same namespace. Its snapshot is checked
	// against its checksum and put in the first node's data directory before Redis starts; the
	// cluster reports Ready only with that data. Afterwards the cluster does not depend on the
	// RedisBackup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="From Backup",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	FromBackup string `json:"fromBackup"`
}

// BackupStatus is what the schedule of spec.backup did.
type BackupStatus struct {
	// LastScheduleTime is when the schedule last created a RedisBackup.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
}

// RestoreStatus is the backup a RedisCluster was created from, as it was read at creation.
type RestoreStatus struct {
	// Backup is the RedisBackup's name.
	Backup string `json:"backup"`
	// Location, Checksum and Size of its snapshot; the restore reads them from here, so that
	// the RedisBackup may go once the data is restored.
	Location string `json:"location"`
	Checksum string `json:"checksum"`
	// +optional
	Size int64 `json:"size,omitempty"`
	// Destination the snapshot is read from.
	Destination BackupDestination `json:"destination"`
	// Shards are, for a backup of a RedisCluster in cluster mode, each shard's snapshot (the
	// RedisBackup's status.shards): shard i's first node restores shard i's. Location is then
	// their shared prefix.
	// +listType=map
	// +listMapKey=name
	// +optional
	Shards []ShardBackup `json:"shards,omitempty"`
	// CompletedAt is when the first node (in cluster mode, each shard's) served the restored
	// data; the restore is not done again after it.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}
