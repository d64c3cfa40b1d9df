package backup

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinScheduleInterval is the shortest interval a schedule may name: cron's own granularity, so
// that @every cannot take a backup every second.
const MinScheduleInterval = time.Minute

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses spec.backup.schedule with the scheduler the operator runs. The API
// refuses most bad schedules already (its CEL rule is the grammar of each field and the
// minimum of @every); what only this parser finds (a range whose start is after its end) is
// refused here, and so is a schedule stored before the API refused it.
func ParseSchedule(spec string) (cron.Schedule, error) {
	if strings.Contains(spec, "=") {
		// CRON_TZ= and TZ= would move the schedule out of UTC, which the API documents.
		return nil, fmt.Errorf("a time zone is not taken: schedules are in UTC")
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, err
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok && every.Delay < MinScheduleInterval {
		return nil, fmt.Errorf("@every %s is more often than once every %s", every.Delay, MinScheduleInterval)
	}
	return sched, nil
}
