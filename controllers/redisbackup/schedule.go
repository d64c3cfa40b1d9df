package redisbackup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/controllers/outcome"
	"github.com/org/redis-operator/controllers/scope"
	"github.com/org/redis-operator/internal/backup"
	"github.com/org/redis-operator/internal/resources"
)

// The schedule of spec.backup: the RedisCluster's reconciler (this phase) creates a RedisBackup at each time
// the schedule names (the RedisBackup reconciler takes it), and deletes the scheduled backups
// that retention no longer keeps. A schedule is a field of the RedisCluster, not a kind of its
// own: it is one more thing the cluster's owner wants of it, it goes with the cluster, and the
// periodic health check already wakes the reconciler often enough for a minute's precision.

// Labels on a scheduled RedisBackup: which cluster's schedule made it.
const (
	LabelBackupCluster  = resources.LabelBackupCluster
	LabelBackupSchedule = "cache.example.com/scheduled"
)

// +kubebuilder:rbac:groups=cache.example.com,resources=redisbackups,verbs=create;delete

// Schedule is the BackupSchedule phase: it creates the RedisBackup that is due, at most one per
// reconcile (missed times are not made up: one backup stands for them), then applies retention.
// It returns the time of the backup it created (status.backup.lastScheduleTime); nil when none
// was due.
func Schedule(ctx context.Context, c *scope.Cluster) (*metav1.Time, error) {
	rc := c.RC
	spec := rc.Spec.Backup
	if spec == nil {
		return nil, nil
	}
	if !c.BackupsServed {
		return nil, errBackupsNotServed
	}
	sched, err := backup.ParseSchedule(spec.Schedule)
	if err != nil {
		return nil, outcome.Fail(cachev1.ReasonBackupScheduleInvalid, fmt.Errorf("spec.backup.schedule %q: %w", spec.Schedule, err))
	}
	last := rc.CreationTimestamp.Time
	if s := rc.Status.Backup; s != nil && s.LastScheduleTime != nil {
		last = s.LastScheduleTime.Time
	}
	now := time.Now()
	var scheduled *metav1.Time
	if due := latestDue(sched, last, now); !due.IsZero() {
		b := scheduledBackup(rc, due)
		if err := c.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating RedisBackup %s: %w", b.Name, err)
		}
		c.Recorder.Eventf(rc, b, corev1.EventTypeNormal, cachev1.EventBackupScheduled, "Backup",
			"Created RedisBackup %s for the schedule %q", b.Name, spec.Schedule)
		scheduled = &metav1.Time{Time: due}
	}
	return scheduled, prune(ctx, c, now)
}

// latestDue is the latest time the schedule names after last and no later than now; zero when
// none is.
func latestDue(sched cron.Schedule, last, now time.Time) time.Time {
	var due time.Time
	for t := sched.Next(last); !t.After(now); t = sched.Next(t) {
		due = t
	}
	return due
}

// scheduledBackup is the RedisBackup the schedule creates for time t: named after it, so that
// an operator that crashed after creating it creates no second one.
func scheduledBackup(rc *cachev1.RedisCluster, t time.Time) *cachev1.RedisBackup {
	b := &cachev1.RedisBackup{}
	b.Name = resources.ScheduledBackupName(rc, t)
	b.Namespace = rc.Namespace
	b.Labels = map[string]string{LabelBackupCluster: rc.Name, LabelBackupSchedule: "true", resources.LabelManagedBy: resources.ManagedByValue}
	b.Spec = cachev1.RedisBackupSpec{Cluster: rc.Name, Destination: rc.Spec.Backup.Destination, DeletionPolicy: cachev1.BackupDelete}
	return b
}

// prune deletes the finished scheduled backups that retention does not keep: beyond the
// newest Count, or older than MaxAge. The newest completed one is always kept, so that a
// schedule whose backups keep failing never leaves the cluster with none.
func prune(ctx context.Context, c *scope.Cluster, now time.Time) error {
	rc := c.RC
	keep := rc.Spec.Backup.Retention
	if keep == nil || (keep.Count == nil && keep.MaxAge == nil) {
		return nil
	}
	list := &cachev1.RedisBackupList{}
	if err := c.Client.List(ctx, list, client.InNamespace(rc.Namespace), client.MatchingLabels{LabelBackupCluster: rc.Name, LabelBackupSchedule: "true"}); err != nil {
		return fmt.Errorf("listing RedisBackups: %w", err)
	}
	for _, b := range pruned(list.Items, keep, now) {
		if err := c.Client.Delete(ctx, &b); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting RedisBackup %s: %w", b.Name, err)
		}
		c.Recorder.Eventf(rc, &b, corev1.EventTypeNormal, cachev1.EventBackupPruned, "Backup",
			"Deleted RedisBackup %s: retention keeps %s", b.Name, retentionText(keep))
	}
	return nil
}

// pruned are the backups retention deletes, of one schedule's.
func pruned(backups []cachev1.RedisBackup, keep *cachev1.BackupRetention, now time.Time) []cachev1.RedisBackup {
	var finished []cachev1.RedisBackup
	for _, b := range backups {
		if b.DeletionTimestamp.IsZero() && (b.Status.Phase == cachev1.BackupCompleted || b.Status.Phase == cachev1.BackupFailed) {
			finished = append(finished, b)
		}
	}
	// Newest first; the name (its scheduled time) breaks ties.
	slices.SortFunc(finished, func(a, b cachev1.RedisBackup) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	newestCompleted := slices.IndexFunc(finished, func(b cachev1.RedisBackup) bool { return b.Status.Phase == cachev1.BackupCompleted })
	var out []cachev1.RedisBackup
	for i, b := range finished {
		tooMany := keep.Count != nil && i >= int(*keep.Count)
		tooOld := keep.MaxAge != nil && now.Sub(b.CreationTimestamp.Time) > keep.MaxAge.Duration
		if (tooMany || tooOld) && i != newestCompleted {
			out = append(out, b)
		}
	}
	return out
}

func retentionText(keep *cachev1.BackupRetention) string {
	var parts []string
	if keep.Count != nil {
		parts = append(parts, fmt.Sprintf("the newest %d", *keep.Count))
	}
	if keep.MaxAge != nil {
		parts = append(parts, "none older than "+keep.MaxAge.Duration.String())
	}
	return strings.Join(parts, " and ")
}
