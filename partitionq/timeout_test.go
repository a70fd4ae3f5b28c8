package partitionq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// HandlerTimeout bounds a handler call: a call that waits on its context
// sees it end with DeadlineExceeded at about the timeout, the call counts
// as a failure, and the event runs again (pause policy) with the key held
// until then; a call that does not look at its context has the deadline too.
func TestHandlerTimeoutEndsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	const timeout = 100 * time.Millisecond
	var sawErr atomic.Value
	var waited, leftIn atomic.Int64
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		if left := time.Until(d); left > timeout || left <= 0 {
			leftIn.Store(int64(left))
			return errors.New("deadline not within the timeout")
		}
		if string(ev.Payload) == "0" && ev.Attempt == 1 {
			start := time.Now()
			<-ctx.Done()
			waited.Store(int64(time.Since(start)))
			sawErr.Store(ctx.Err())
			return ctx.Err()
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond}, Limits: partitionq.LimitsConfig{HandlerTimeout: timeout}})
	b.send(t, "k", 0, 1)
	pgtest.WaitFor(t, 30*time.Second, "both events handled", func() (bool, error) { return len(l.okSeq("k")) >= 2, nil })
	if n := leftIn.Load(); n != 0 {
		t.Fatalf("a call's deadline was %s away, want within %s", time.Duration(n), timeout)
	}
	if err, _ := sawErr.Load().(error); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the waiting call's context ended with %v, want DeadlineExceeded", err)
	}
	if w := time.Duration(waited.Load()); w < timeout/2 {
		t.Fatalf("the waiting call's context ended after %s, before its timeout %s", w, timeout)
	}
	if got := l.okSeq("k"); got[0] != "0" || got[1] != "1" {
		t.Fatalf("k handled as %v, want [0 1]", got)
	}
	if a := l.attempts("k", "0"); len(a) < 2 || a[0] != 1 || a[1] != 2 {
		t.Fatalf("attempts of event 0 = %v, want 1 (timed out) then 2", a)
	}
}
