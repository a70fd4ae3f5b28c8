package chaos

import (
	"context"
	"errors"
	"testing"
	"time"
)

// poll treats a condition's error as "not yet" until its timeout, except
// an endPoll, which ends it at once with the error it wraps.
func TestPollEnds(t *testing.T) {
	ctx := context.Background()
	stalled := errors.New("stalled")
	calls := 0
	err := poll(ctx, time.Hour, "never", func(context.Context) (bool, error) {
		calls++
		if calls == 3 {
			return false, endPoll{stalled}
		}
		return false, errors.New("server restarting")
	})
	if err != stalled || calls != 3 {
		t.Fatalf("poll returned %v after %d calls, want the wrapped error after 3", err, calls)
	}
	calls = 0
	err = poll(ctx, 120*time.Millisecond, "a flaky read", func(context.Context) (bool, error) {
		calls++
		return false, errors.New("server restarting")
	})
	if err == nil || calls < 2 {
		t.Fatalf("poll returned %v after %d calls, want a timeout after several tries", err, calls)
	}
}
