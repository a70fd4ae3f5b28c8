package partitionq_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// A handler's decision is visible to its caller's tests through errors.As,
// however the handler wrapped it, and the cause stays reachable.
func TestHandlerErrorsAssertWithErrorsAs(t *testing.T) {
	cause := errors.New("bad payload")

	err := fmt.Errorf("order 7: %w", partitionq.DeadLetterNow(cause))
	var dl *partitionq.DeadLetterError
	if !errors.As(err, &dl) {
		t.Fatalf("errors.As(%q, *DeadLetterError) = false", err)
	}
	if !errors.Is(err, cause) || errors.Unwrap(dl) != cause {
		t.Fatalf("the dead letter %q does not unwrap to its cause", err)
	}
	var ra *partitionq.RetryAfterError
	if errors.As(err, &ra) {
		t.Fatalf("errors.As(%q, *RetryAfterError) = true", err)
	}

	err = fmt.Errorf("order 8: %w", partitionq.RetryAfter(2*time.Minute, cause))
	if !errors.As(err, &ra) {
		t.Fatalf("errors.As(%q, *RetryAfterError) = false", err)
	}
	if ra.Delay() != 2*time.Minute {
		t.Fatalf("Delay() = %s, want 2m0s", ra.Delay())
	}
	if !errors.Is(err, cause) || errors.Unwrap(ra) != cause {
		t.Fatalf("the retry %q does not unwrap to its cause", err)
	}
	if errors.As(err, &dl) {
		t.Fatalf("errors.As(%q, *DeadLetterError) = true", err)
	}
}

// A test of a handler asks what it decided with errors.As.
func ExampleRetryAfterError() {
	handle := func() error {
		return fmt.Errorf("payment provider: %w", partitionq.RetryAfter(30*time.Second, errors.New("rate limited")))
	}
	var ra *partitionq.RetryAfterError
	if err := handle(); errors.As(err, &ra) {
		fmt.Println("retried in", ra.Delay())
	}
	// Output: retried in 30s
}
