package cli

import (
	"errors"
	"fmt"

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
			return &usageError{err: err}
		}
		return &opError{err: err}
	}
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
