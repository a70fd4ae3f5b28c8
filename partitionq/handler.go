package partitionq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Event is one event handed to a Handler. The handler may keep it.
type Event struct {
	ID      int64     // the engine's event id (ev_id)
	Queue   string    // the queue it was read from
	Group   string    // the consumer group handling it
	Slot    int       // the slot of its key
	Slots   int       // the number of slots of the slot's generation (during a resize, the old or the new one's)
	Key     string    // its partition key; "" for an event another producer sent without one (all on slot 0)
	Type    string    // its type
	Payload []byte    // its body
	Time    time.Time // when it was sent
	Attempt int       // 1 on the first delivery, 2 on the first retry, ...
	// Epoch is the fencing token: the epoch at which this worker owns the
	// event's slot. Another worker that takes the slot over raises it, so a
	// handler that writes to the same database can check, in its own
	// transaction, that its worker still owns the slot (Client.CheckOwner):
	// a write of a worker that lost the slot then fails instead of
	// committing.
	Epoch int64

	batch int64 // the engine batch (0 for an event drained from the retry queue)
}

// Fence returns the event's fence: the slot its worker owns and the epoch
// it owns it at, as one text, "<queue>/<group>/<slots>/<slot>/<epoch>"
// (queue and group names hold no "/"). A handler in any language checks it
// in its own transaction with the SQL function partitionq.fence(text), as
// CheckOwner does in Go: the call raises SQLSTATE PQ001 once the worker no
// longer owns the slot. The HTTP and pipe handlers of partitionq work, and
// its --exec commands (PARTITIONQ_FENCE), pass it on.
func (e *Event) Fence() string {
	return e.Queue + "/" + e.Group + "/" + strconv.Itoa(e.Slots) + "/" + strconv.Itoa(e.Slot) + "/" + strconv.FormatInt(e.Epoch, 10)
}

// Handler handles events. Returning nil means the event is done. Any other
// error is a failure, handled by the worker's Policy: under PolicyPause the
// key waits until the event succeeds on a retry, is skipped by an operator,
// or runs out of attempts; under PolicyRetryLater the event is retried
// later and the key goes on. Two typed errors change that:
//   - DeadLetterNow(err) (a *DeadLetterError): do not retry; the event goes
//     to the dead letters at once and its key goes on.
//   - RetryAfter(d, err) (a *RetryAfterError): a failure whose next attempt
//     is in d, in place of the backoff.
//
// A handler that panics fails with the panic's text. The context is
// cancelled when the worker's shutdown timeout passes or the handler
// timeout expires.
type Handler interface {
	Handle(ctx context.Context, ev *Event) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, ev *Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, ev *Event) error { return f(ctx, ev) }

// DeadLetterError is the error DeadLetterNow returns: the handler's word
// that its event must not be retried. A caller's tests can assert that a
// handler gave an event up, through any wrapping, with errors.As:
//
//	var dl *partitionq.DeadLetterError
//	if errors.As(err, &dl) { ... }
//
// Make one with DeadLetterNow; errors.Unwrap gives the error it wraps.
type DeadLetterError struct{ err error }

// Error says the event is a dead letter, and why.
func (e *DeadLetterError) Error() string { return "dead letter: " + errString(e.err) }

// Unwrap returns the error given to DeadLetterNow.
func (e *DeadLetterError) Unwrap() error { return e.err }

// DeadLetterNow wraps err to say the event must not be retried: it goes to the
// dead letters at once, and its key goes on with its next event.
func DeadLetterNow(err error) error { return &DeadLetterError{err: err} }

// RetryAfterError is the error RetryAfter returns: a failure whose next
// attempt is in Delay() rather than after the configured backoff. A
// caller's tests can assert on it, through any wrapping, with errors.As:
//
//	var ra *partitionq.RetryAfterError
//	if errors.As(err, &ra) && ra.Delay() == time.Minute { ... }
//
// Make one with RetryAfter; errors.Unwrap gives the error it wraps.
type RetryAfterError struct {
	d   time.Duration
	err error
}

// Error says when the event is tried again, and why it failed.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.d, errString(e.err))
}

// Unwrap returns the error given to RetryAfter.
func (e *RetryAfterError) Unwrap() error { return e.err }

// Delay returns the delay given to RetryAfter: how long after the failure
// the event's next attempt is.
func (e *RetryAfterError) Delay() time.Duration { return e.d }

// RetryAfter wraps err to ask for the next attempt in d rather than after
// the configured backoff. The attempt still counts toward MaxAttempts.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{d: d, err: err} }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// classify reads the typed errors out of a handler's error.
func classify(err error) (deadLetter bool, retryAfter time.Duration) {
	var dl *DeadLetterError
	if errors.As(err, &dl) {
		return true, 0
	}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return false, ra.d
	}
	return false, 0
}
