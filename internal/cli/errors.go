package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// usageError is a wrong command line: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// opError is an operation that failed: exit status 1.
type opError struct{ err error }

func (e *opError) Error() string { return e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// inputError is bad data read from standard input. It is an operation
// failure even when it wraps a library *ValidationError: the command line
// was right, the input was not.
type inputError struct {
	Line int // from 1
	Err  error
}

func (e *inputError) Error() string {
	return fmt.Sprintf("standard input, line %d: %v: nothing was sent", e.Line, e.Err)
}
func (e *inputError) Unwrap() error { return e.Err }

// explained is an error of the library told in the command line's words
// (a flag, a command to run): it prints msg and still matches err.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

func explain(err error, format string, args ...any) error {
	return &explained{msg: fmt.Sprintf(format, args...), err: err}
}

// runE adapts a command body to cobra and classifies its error. Errors that
// cobra makes itself (unknown command or flag, bad flag value, wrong
// arguments) never pass through here, so they stay usage errors.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil {
			return nil
		}
		var u *usageError
		var in *inputError
		switch {
		case errors.As(err, &u), errors.As(err, &in):
			return err
		case errors.Is(err, partitionq.ErrInvalid):
			// A flag value the library refused (a queue name, a key...).
			return &usageError{err: inFlagWords(err)}
		case (errors.Is(err, partitionq.ErrNoSuchQueue) || errors.Is(err, partitionq.ErrNoSuchGroup)) && !errors.As(err, new(*explained)):
			// A command without runFor: the library's text without its Go name.
			return &opError{err: explain(err, "%s", strings.Replace(err.Error(), " (Client.Setup)", "", 1))}
		case errors.Is(err, partitionq.ErrAmbiguousEngine):
			return &opError{err: explain(err, "both pgq and pgque are installed in this database: pass --engine pgq or --engine pgque (the one whose queues partitionq uses)")}
		}
		return &opError{err: err}
	}
}

// runFor is runE for a command on the group t names: a missing queue or
// group is told with the groups there are (the nearest name first, when
// one is near: a typo) and the command that creates it.
func (a *app) runFor(t *target, fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		setup := fmt.Sprintf("partitionq setup --queue %s --group %s --slots N", t.queue, t.group)
		switch {
		case errors.Is(err, partitionq.ErrNoSuchQueue):
			return explain(err, "no such queue %q: create it and the group with %s", t.queue, setup)
		case errors.Is(err, partitionq.ErrNoSuchGroup):
			groups, ok := a.groupNames(context.WithoutCancel(cmd.Context()), t.queue)
			if !ok {
				// A role that may not read the groups (a worker cannot count
				// their dead letters), or a slow database.
				return explain(err, "no such consumer group %q on queue %q: check the name (partitionq groups lists the groups, as a role that may read them); to create %q, run %s", t.group, t.queue, t.group, setup)
			}
			if len(groups) == 0 {
				return explain(err, "no such consumer group %q on queue %q, which has no groups yet: create it with %s", t.group, t.queue, setup)
			}
			hint := ""
			if near := nearest(t.group, groups); near != "" {
				hint = fmt.Sprintf("did you mean %q? ", near)
			}
			return explain(err, "no such consumer group %q on queue %q: %sthe groups of queue %q are %s (partitionq groups lists every group); to create %q, run %s",
				t.group, t.queue, hint, t.queue, strings.Join(groups, ", "), t.group, setup)
		}
		return err
	})
}

// groupNames lists the consumer groups of queue, sorted (not the dropped
// ones that only left dead letters: they have no consumers), and reports
// false when they cannot be read within a couple of seconds (an error
// message is being written: it must not hang on it).
func (a *app) groupNames(ctx context.Context, queue string) ([]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := a.open(ctx)
	if err != nil {
		return nil, false
	}
	defer s.close()
	gs, err := s.client.Groups(ctx, partitionq.GroupsQuery{Queue: queue})
	if err != nil {
		return nil, false
	}
	var names []string
	for _, g := range gs {
		if !g.Dropped {
			names = append(names, g.Group)
		}
	}
	sort.Strings(names)
	return names, true
}

// nearest returns the name of names closest to name by edit distance, when
// it is close enough to be a typo (at most a third of its length, and 2
// at least), else "".
func nearest(name string, names []string) string {
	best, bestD := "", max(2, len(name)/3)+1
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// flagOf names the flag of each library field a command sets from one,
// with the fix in the command line's words ("": the library's own). The library's errors name Go
// fields (WorkerConfig.Retry.MaxAttempts); the command's name its flags.
var flagOf = map[string]struct{ flag, fix string }{
	"WorkerConfig.Retry.Policy":              {"--policy", `use "pause" or "retry-later"`},
	"WorkerConfig.Retry.MaxAttempts":         {"--max-attempts", "give 1 or more, 0 for the policy's default (unlimited under pause, 10 under retry-later), or -1 for unlimited"},
	"WorkerConfig.Retry.BackoffMin":          {"--backoff-min", "give a positive duration"},
	"WorkerConfig.Retry.BackoffMax":          {"--backoff-max", "give a positive duration, at least --backoff-min"},
	"WorkerConfig.Limits.Concurrency":        {"--concurrency", "give 1 to 4096 (default 16)"},
	"WorkerConfig.Limits.DrainConcurrency":   {"--drain-concurrency", "give 1 to 256, or leave it out for the default (8 at first, up to 24)"},
	"WorkerConfig.Limits.HandlerTimeout":     {"--handler-timeout", "give a positive duration, or 0 for no timeout"},
	"WorkerConfig.Limits.ShutdownTimeout":    {"--shutdown-timeout", "give a positive duration"},
	"WorkerConfig.Limits.PollInterval":       {"--poll-interval", "give a positive duration"},
	"WorkerConfig.Limits.LivenessTimeout":    {"--liveness-timeout", "give at least twice --lease-duration, or leave it out for 1m (at least twice --lease-duration)"},
	"WorkerConfig.Ownership.LeaseDuration":   {"--lease-duration", "give at least 500ms, or leave it out for 5s"},
	"WorkerConfig.Ownership.DeadHostTimeout": {"--dead-host-timeout", "give at least 2s, a negative value (-1s) to leave the server's TCP settings, or leave it out for the lease duration + 10s"},
	"WorkerConfig.Ticker.Interval":           {"--tick-interval", "give a positive duration"},
	"WorkerConfig.Pins":                      {"--slots", `give "all" or slots of the group`},
	"WorkerConfig.Identity":                  {"--identity", ""}, // the library's fix: what is wrong with the text
	"GroupSpec.TickMaxLag":                   {"--tick-max-lag", "give a positive duration, or leave it out to keep the queue's setting"},
	"GroupSpec.DedupWindow":                  {"--dedup-window", "give 1ms to 168h (7 days), or leave it out to keep the queue's window"},
	"dedup id":                               {"--dedup-id", ""}, // the library's fix: what is wrong with the text
	"dedup window":                           {"--dedup-window", "give 1ms to 168h (7 days) with a --dedup-id, or leave it out for the queue's window"},
	"number of slots":                        {"--slots", "give 1 to 256: a small N such as 4 or 8 (docs/tuning.md)"},
	"Options.Refresh":                        {"--refresh", "give at least 100ms, or leave it out for 1s"},
	"Config.EngineSchema":                    {"--engine", `use "pgq" or "pgque", or leave it out to detect the engine`},
}

// inFlagWords tells a library *ValidationError about a field a flag sets
// in the words of the command line.
func inFlagWords(err error) error {
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	f, ok := flagOf[ve.Field]
	if !ok {
		return err
	}
	fix := f.fix
	if fix == "" {
		fix = ve.Fix
	}
	return explain(err, "invalid %s %s: %s: %s", f.flag, ve.Value, ve.Problem, fix)
}

// exitCode maps an error returned by the root command to an exit status.
func exitCode(err error) int {
	var op *opError
	var in *inputError
	var u *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		return ExitUsage
	case errors.As(err, &op), errors.As(err, &in):
		return ExitFailed
	}
	return ExitUsage // made by cobra: unknown command or flag, bad value
}
