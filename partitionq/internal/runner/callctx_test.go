package runner

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The lazy call context behaves as context.WithTimeout whose cancel runs
// when the call ends.
func TestCallCtx(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")

	t.Run("a quick call", func(t *testing.T) {
		c := newCallCtx(parent, time.Now().Add(time.Hour))
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the end: %v", err)
		}
		if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
			t.Fatalf("Deadline = %v, %v; want about an hour from now", d, ok)
		}
		c.end()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err after the end = %v, want Canceled", err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done after the end is not closed")
		}
		if v := c.Value(key{}); v != "v" {
			t.Fatalf("Value = %v, want the parent's", v)
		}
	})

	t.Run("the timeout closes Done", func(t *testing.T) {
		c := newCallCtx(parent, time.Now().Add(20*time.Millisecond))
		defer c.end()
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after the timeout")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", err)
		}
		if err := context.Cause(c); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Cause = %v, want DeadlineExceeded", err)
		}
	})

	t.Run("Err sees the timeout without Done", func(t *testing.T) {
		c := newCallCtx(parent, time.Now().Add(time.Millisecond))
		for time.Now().Before(c.deadline) { // nothing waits on the deadline: let it pass
			time.Sleep(time.Millisecond)
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", err)
		}
		c.end()
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err after the end = %v, want DeadlineExceeded (the deadline came first)", err)
		}
	})

	t.Run("the parent's cancel and cause pass through", func(t *testing.T) {
		p, cancel := context.WithCancelCause(parent)
		c := newCallCtx(p, time.Now().Add(time.Hour))
		defer c.end()
		done := c.Done()
		lost := errors.New("slot lost")
		cancel(lost)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after the parent's cancel")
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err = %v, want Canceled", err)
		}
		if err := context.Cause(c); !errors.Is(err, lost) {
			t.Fatalf("Cause = %v, want the parent's cause", err)
		}
	})

	t.Run("Err sees the parent's cancel without Done", func(t *testing.T) {
		p, cancel := context.WithCancel(parent)
		c := newCallCtx(p, time.Now().Add(time.Hour))
		cancel()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err = %v, want Canceled", err)
		}
		c.end()
	})

	t.Run("children end with the call", func(t *testing.T) {
		c := newCallCtx(parent, time.Now().Add(time.Hour))
		child, cancel := context.WithCancel(c)
		defer cancel()
		c.end()
		select {
		case <-child.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a child of the call's context outlived the call")
		}
	})
}
