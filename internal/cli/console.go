package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/tui"
)

// consoleOptions are the flags of console, handed to package tui.
type consoleOptions struct {
	refresh        time.Duration
	refreshTimeout time.Duration
	readOnly       bool
	actor          string
	logFile        string
}

func (a *app) consoleCmd() *cobra.Command {
	var (
		t    target
		opts consoleOptions
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Open the operations console: slots, blocked keys, dead letters, actions",
		Long: `Open the terminal console of a group: its slots, blocked keys, dead
letters and audit trail, with skip, retry now, quarantine and replay a few
keystrokes away (none of them with --read-only). It owns the terminal
until you quit with q; its logs go to --log-file only. It needs a terminal
(standard input and output). A queue or group that does not exist yet is
shown as such, with the setup command, until it does. Without --queue and
--group it opens on the list of every group of every queue: enter opens
one, 0 goes back to the list. See docs/console.md.`,
		Example: "  partitionq console --queue files --group indexer --read-only\n  partitionq console",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			switch {
			case t.queue == "" && t.group == "": // every group
			case t.queue == "" || t.group == "":
				return usagef("give both --queue and --group (one group), or neither (the list of every group)")
			default:
				if err := t.need(); err != nil {
					return err
				}
			}
			if opts.refreshTimeout < tui.RefreshMin {
				return usagef("invalid --refresh-timeout %s: give at least %s, such as %s", opts.refreshTimeout, tui.RefreshMin, tui.RefreshTimeoutDefault)
			}
			if opts.refresh < tui.RefreshMin {
				return usagef("invalid --refresh %s: give at least %s, or leave it out for %s", opts.refresh, tui.RefreshMin, tui.RefreshDefault)
			}
			if !a.hasTerminal() {
				return errors.New("the console needs a terminal: standard input and output are not one (run it in a terminal or tmux; for scripts, use partitionq status, blocked and dlq list, with --json)")
			}
			a.logsOff = true // the console owns the terminal
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			// A missing queue or group is not an error: the console says how
			// to create it and keeps looking.
			opts.actor = a.actorOr(opts.actor)
			return runConsole(cmd.Context(), s, t, opts)
		}),
	}
	f := cmd.Flags()
	t.bindOptional(f, "the list of every group")
	f.DurationVar(&opts.refresh, "refresh", tui.RefreshDefault, "how often the console reads the group's state")
	f.DurationVar(&opts.refreshTimeout, "refresh-timeout", tui.RefreshTimeoutDefault, "the longest a refresh may take: one that has not answered by then counts as failed (DB DOWN)")
	f.BoolVar(&opts.readOnly, "read-only", false, "only watch: hide every action")
	f.StringVar(&opts.actor, "actor", "", "who is acting, recorded in the audit trail (default $USER, else the OS user)")
	f.StringVar(&opts.logFile, "log-file", "", "append the console's logs to this file (default: no log)")
	return cmd
}

// runConsole hands the terminal to the console until the user quits or ctx ends.
func runConsole(ctx context.Context, s *session, t target, opts consoleOptions) error {
	return tui.Run(ctx, s.client, tui.Options{Queue: t.queue, Group: t.group, Refresh: opts.refresh,
		RefreshTimeout: opts.refreshTimeout, ReadOnly: opts.readOnly, Actor: opts.actor, LogFile: opts.logFile})
}
