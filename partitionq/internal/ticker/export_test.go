package ticker

import "time"

// SetMaintLease sets how long a maintenance turn outlives its round, for a
// test that runs alone (not in parallel); it returns the undo.
func SetMaintLease(d time.Duration) func() {
	old := maintLease
	maintLease = d
	return func() { maintLease = old }
}
