// Package cli is the partitionq command: the library driven from a shell.
// Each subcommand is a cobra.Command built here; Main runs one command line
// to an exit status, so tests drive the commands in process exactly as the
// binary does.
//
// Exit statuses: 0 done, 1 the operation failed, 2 the command line is
// wrong (unknown command or flag, missing or bad value). Errors are printed
// to standard error as "partitionq: <error>".
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
)

// Exit statuses of Main.
const (
	ExitOK     = 0 // done
	ExitFailed = 1 // the operation failed
	ExitUsage  = 2 // the command line is wrong
)

// Env is the outside world of one run. Zero fields take the process's own.
type Env struct {
	// Stdin feeds send (JSON lines). Defaults to os.Stdin.
	Stdin io.Reader
	// Stdout receives results: tables, JSON, and the output of work's
	// handlers. Defaults to os.Stdout.
	Stdout io.Writer
	// Stderr receives errors, logs, and work's handler errors and stats.
	// Defaults to os.Stderr.
	Stderr io.Writer
	// Getenv reads DATABASE_URL and USER. Defaults to os.Getenv.
	Getenv func(string) string
}

// osUser is the login name of the OS user running the command (the actor
// of operator actions when neither --actor nor $USER says), or "".
func osUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

func (e Env) withDefaults() Env {
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	// Workers write from many goroutines (logs, handler output, stats).
	e.Stdout, e.Stderr = newLockedWriter(e.Stdout), newLockedWriter(e.Stderr)
	return e
}

// Main runs one command line (args without the program name) and returns
// its exit status. ctx governs the whole run: cancelling it (main does on
// SIGINT and SIGTERM) stops work and tick gracefully and interrupts the
// other commands.
func Main(ctx context.Context, args []string, env Env) int {
	env = env.withDefaults()
	root := newRoot(env)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	// The library's own errors may start with its name too: said once.
	fmt.Fprintf(env.Stderr, "partitionq: %s\n", strings.TrimPrefix(errorText(err), "partitionq: "))
	code := exitCode(err)
	if code == ExitUsage {
		path := root.Name()
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(env.Stderr, "run '%s --help' for usage\n", strings.TrimSpace(path))
	}
	return code
}
