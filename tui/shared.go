package tui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// shared is the context every component is given: the client and the
// group, the styles, the logger, and the clock. It is built once by
// newModel and never global. Only commands read the clock: views render
// times relative to the snapshot they show, so the same data always
// renders the same screen.
type shared struct {
	ctx          context.Context // cancels in-flight calls when the console stops
	client       Client
	queue, group string
	actor        string
	readOnly     bool
	refresh      time.Duration
	refreshLimit time.Duration // Options.RefreshTimeout
	styles       styles
	log          *slog.Logger
	baseLog      *slog.Logger // log without the group's attributes
	now          func() time.Time
	// after returns a command that delivers msg after d: tea.Tick in the
	// console, something that does not sleep in model tests.
	after func(d time.Duration, msg tea.Msg) tea.Cmd
}

func tick(d time.Duration, msg tea.Msg) tea.Cmd {
	return tea.Tick(d, func(time.Time) tea.Msg { return msg })
}

// bounded runs fn with a context that ends after d, and returns by then
// whatever fn does: a call stuck past its deadline (a frozen connection)
// is left to end by itself, and its result to nobody, so fn must write to
// nothing outside the value it returns. Its error then says the deadline
// passed.
func bounded[T any](ctx context.Context, d time.Duration, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("no answer within %s (the refresh deadline, --refresh-timeout): %w", d, context.DeadlineExceeded))
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			r.err = fmt.Errorf("%w: %w", context.Cause(ctx), r.err)
		}
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// call runs fn with a context bounded by CallTimeout.
func (sh *shared) call(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(sh.ctx, CallTimeout)
	defer cancel()
	return fn(ctx)
}
