// Package tui is the operations console of partitionq: a terminal view of a
// consumer group's slots, its blocked keys, dead letters and audit trail,
// with the operator actions (skip, retry now, quarantine, replay) a few
// keystrokes away. It uses only the public API of package partitionq.
//
// Run is the entry point; `partitionq console` calls it. The console owns
// the terminal while it runs (alternate screen); it logs to Options.LogFile
// only, never to stdout. See docs/console.md.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/term"

	"github.com/partitionq/partitionq/partitionq"
)

// Defaults and limits of Options.
const (
	// RefreshDefault is how often the console reads the group's state.
	RefreshDefault = time.Second
	// RefreshMin is the shortest refresh interval accepted.
	RefreshMin = 100 * time.Millisecond
	// BackoffMax caps the wait between two refreshes while the database
	// does not answer.
	BackoffMax = 15 * time.Second
	// RefreshTimeoutDefault bounds each refresh: one that has not answered
	// by then counts as failed (DB DOWN) at once, and the next goes ahead.
	RefreshTimeoutDefault = 2 * time.Second
	// CallTimeout bounds each operator action. An action on a head a
	// worker is handling waits up to 5 s for it (then partitionq.ErrHeadBusy),
	// which is shorter.
	CallTimeout = 10 * time.Second
)

// Options configures the console. The zero value of each optional field
// means its default.
type Options struct {
	// Queue and Group name the consumer group to watch. Both empty, the
	// console opens on the list of every group (and the operator picks
	// one); one without the other is an error.
	Queue, Group string

	// Refresh is how often the console reads the group's state; while the
	// database does not answer it backs off, up to BackoffMax. At least
	// RefreshMin. Defaults to RefreshDefault (1s).
	Refresh time.Duration

	// RefreshTimeout bounds each refresh. A refresh that has not answered
	// by then (a refused or frozen connection, a slow TLS fallback) counts
	// as failed at once: the console shows the database as unreachable, and
	// the next refresh does not wait for the one that hangs. At least
	// RefreshMin. Defaults to RefreshTimeoutDefault (2s).
	RefreshTimeout time.Duration

	// ReadOnly hides every action (skip, retry now, quarantine, replay): the
	// console only watches. Defaults to false.
	ReadOnly bool

	// Actor names who acts, in the audit trail and the dead letters of the
	// actions taken from the console. Defaults to "", which means the
	// client's Config.Actor.
	Actor string

	// LogFile, when set, is a file the console appends its logs to (refresh
	// failures, actions and their outcomes). The console never logs to
	// stdout or stderr: it owns the terminal. Defaults to no log.
	LogFile string
}

func (o Options) withDefaults() Options {
	if o.Refresh == 0 {
		o.Refresh = RefreshDefault
	}
	if o.RefreshTimeout == 0 {
		o.RefreshTimeout = RefreshTimeoutDefault
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Queue == "" && o.Group == "": // the list of every group
	case o.Queue == "" || o.Group == "":
		return &partitionq.ValidationError{Field: "Options.Queue", Value: o.Queue + "/" + o.Group, Problem: "only one of the queue and the group is given",
			Fix: "give both (one group), or neither (the list of every group)"}
	default:
		if err := partitionq.ValidateQueueName(o.Queue); err != nil {
			return fmt.Errorf("console: %w", err)
		}
		if err := partitionq.ValidateGroupName(o.Group); err != nil {
			return fmt.Errorf("console: %w", err)
		}
	}
	if o.Refresh < RefreshMin {
		return &partitionq.ValidationError{Field: "Options.Refresh", Value: o.Refresh.String(),
			Problem: fmt.Sprintf("it is shorter than %s", RefreshMin), Fix: "use 0 for the default (1s), or a longer interval"}
	}
	if o.RefreshTimeout < RefreshMin {
		return &partitionq.ValidationError{Field: "Options.RefreshTimeout", Value: o.RefreshTimeout.String(),
			Problem: fmt.Sprintf("it is shorter than %s", RefreshMin), Fix: "use 0 for the default (2s), or a longer deadline"}
	}
	return nil
}

// ErrNoTerminal: Run was called while standard input or output is not a
// terminal.
var ErrNoTerminal = errors.New("console: standard input and output must be a terminal")

// Run runs the console on the terminal of the process (stdin and stdout)
// until the user quits (q or ctrl+c) or ctx is cancelled; both return nil.
// ctx also governs every query and action the console makes. It returns an
// error when opts is invalid, standard input or output is not a terminal
// (ErrNoTerminal), the log file cannot be opened, or the terminal fails. A
// database that does not answer is not an error: the console shows it and
// retries; nor is a queue or group that does not exist yet.
func Run(ctx context.Context, c *partitionq.Client, opts Options) error {
	if c == nil {
		return errors.New("console: client is nil: pass a *partitionq.Client")
	}
	if !term.IsTerminal(os.Stdin.Fd()) || !term.IsTerminal(os.Stdout.Fd()) {
		return fmt.Errorf("%w: run it in a terminal (or tmux)", ErrNoTerminal)
	}
	return run(ctx, c, opts, os.Stdin, os.Stdout)
}

func run(ctx context.Context, c Client, opts Options, in io.Reader, out io.Writer) error {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	logger, closeLog, err := openLog(opts.LogFile)
	if err != nil {
		return err
	}
	defer closeLog()
	// Calls still in flight when the user quits end with the console.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := newModel(ctx, c, opts, logger)
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithAltScreen(), tea.WithInput(in), tea.WithOutput(out))
	logger.Info("console started", slog.String("queue", opts.Queue), slog.String("group", opts.Group),
		slog.Bool("read_only", opts.ReadOnly), slog.Duration("refresh", opts.Refresh), slog.Duration("refresh_timeout", opts.RefreshTimeout))
	_, err = p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		err = nil
	}
	logger.Info("console stopped", slog.Any("err", err))
	return err
}

// openLog opens the log file for appending, or returns a logger that
// discards everything when path is empty.
func openLog(path string) (*slog.Logger, func(), error) {
	if path == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil)), func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("console: open log file: %w: check Options.LogFile (--log-file)", err)
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})), func() { _ = f.Close() }, nil
}
