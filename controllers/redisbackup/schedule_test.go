package redisbackup

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1 "github.com/org/redis-operator/api/v1"
	"github.com/org/redis-operator/internal/backup"
)

func TestLatestDueCollapsesMissedTimesIntoOne(t *testing.T) {
	hourly, err := backup.ParseSchedule("0 * * * *")
	require.NoError(t, err)
	last := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

	assert.True(t, latestDue(hourly, last, last.Add(59*time.Minute)).IsZero(), "not due within the hour")
	assert.Equal(t, last.Add(time.Hour), latestDue(hourly, last, last.Add(time.Hour)))
	// An operator away for three hours takes one backup, for the latest time, not three.
	assert.Equal(t, last.Add(3*time.Hour), latestDue(hourly, last, last.Add(3*time.Hour+10*time.Minute)))

	_, err = backup.ParseSchedule("every day")
	assert.Error(t, err)
}

func TestRetentionKeepsTheNewestAndNeverTheLastCompleted(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	backup := func(hoursAgo int, phase cachev1.BackupPhase) cachev1.RedisBackup {
		b := cachev1.RedisBackup{}
		b.Name = fmt.Sprintf("b-%02d", 24-hoursAgo)
		b.CreationTimestamp = metav1.NewTime(now.Add(-time.Duration(hoursAgo) * time.Hour))
		b.Status.Phase = phase
		return b
	}
	names := func(bs []cachev1.RedisBackup) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Name)
		}
		return out
	}
	all := []cachev1.RedisBackup{
		backup(1, cachev1.BackupRunning), backup(2, cachev1.BackupFailed), backup(3, cachev1.BackupCompleted),
		backup(4, cachev1.BackupCompleted), backup(5, cachev1.BackupCompleted),
	}
	tests := []struct {
		name string
		keep cachev1.BackupRetention
		want []string
	}{
		{"count: the newest two finished stay; a running one is not counted", cachev1.BackupRetention{Count: ptr.To[int32](2)}, []string{"b-20", "b-19"}},
		{"max age", cachev1.BackupRetention{MaxAge: &metav1.Duration{Duration: 210 * time.Minute}}, []string{"b-20", "b-19"}},
		{"the newest completed one stays whatever the age", cachev1.BackupRetention{MaxAge: &metav1.Duration{Duration: time.Minute}}, []string{"b-22", "b-20", "b-19"}},
		{"count 1 with a failed newest: the completed one stays too", cachev1.BackupRetention{Count: ptr.To[int32](1)}, []string{"b-20", "b-19"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, names(pruned(all, &tt.keep, now)))
		})
	}
}
