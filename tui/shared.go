package tui

import (
	"context"
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
	styles       styles
	log          *slog.Logger
	now          func() time.Time
	// after returns a command that delivers msg after d: tea.Tick in the
	// console, something that does not sleep in model tests.
	after func(d time.Duration, msg tea.Msg) tea.Cmd
}

func tick(d time.Duration, msg tea.Msg) tea.Cmd {
	return tea.Tick(d, func(time.Time) tea.Msg { return msg })
}

// call runs fn with a context bounded by CallTimeout.
func (sh *shared) call(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(sh.ctx, CallTimeout)
	defer cancel()
	return fn(ctx)
}
