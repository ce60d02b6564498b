package resp

import (
	"testing"
	"time"
)

// TestRetriesLeft: SET's and DEL's retries end at setAttempts tries or
// after setRetryBudget, whichever comes first (a try may itself wait
// seconds for the master).
func TestRetriesLeft(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		start   time.Time
		attempt int
		want    bool
	}{
		{now, 1, true},
		{now, setAttempts - 1, true},
		{now, setAttempts, false},
		{now.Add(-setRetryBudget / 2), 3, true},
		{now.Add(-setRetryBudget - time.Millisecond), 1, false},
		{now.Add(-5 * time.Second), 2, false}, // one removal waited out the master's 5 s
	} {
		if got := retriesLeft(tc.start, tc.attempt); got != tc.want {
			t.Errorf("started %v ago, %d tries: retriesLeft %v, want %v", time.Since(tc.start).Round(time.Millisecond), tc.attempt, got, tc.want)
		}
	}
}
