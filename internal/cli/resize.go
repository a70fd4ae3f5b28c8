package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// resizeJSON is the --json output of resize (docs/cli.md).
type resizeJSON struct {
	Queue      string `json:"queue"`
	Group      string `json:"group"`
	From       int    `json:"from"`
	To         int    `json:"to"`
	Generation int    `json:"generation"`
	// Done is set with --wait once the resize completed; Aborted with --abort.
	Done    bool `json:"done"`
	Aborted bool `json:"aborted"`
}

func (a *app) resizeCmd() *cobra.Command {
	var (
		t       target
		slots   int
		wait    bool
		abort   bool
		timeout time.Duration
		actor   actorFlags
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "resize",
		Short: "Change a group's number of slots online (grow or shrink)",
		Long: `Change the number of slots of a group to --slots while producers send and
workers run. The group gets a new generation of slots; the cutover is the
first tick of the queue after the resize: events committed before it are
handled by the old slots, after it by the new ones. Each old slot drains
its events up to the cutover, then hands its blocked keys (failed heads,
waiting events, attempts and errors) to their new slots; each new slot
starts once the old slots it takes keys from are handed off (one, when the
new number is a multiple of the old). Every key keeps its order; no key
runs twice at once. Running workers (work, or the library's) follow within
about a second and drive the resize to its end, so resize returns at once;
--wait waits for the end. One resize at a time: a second is refused.
--abort aborts a resize whose cutover has not begun (no old slot handed off
yet). A worker started with a list of --slots stops when its slots are
handed off, and says so. Needs the right to run partitionq.resize (the
schema's owner; docs/security.md). Recorded in the audit trail.`,
		Example: `  partitionq resize --queue files --group indexer --slots 16 --wait
  partitionq resize --queue files --group indexer --abort --reason 'wrong number'`,
		Args: noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			given := cmd.Flags().Changed("slots")
			switch {
			case abort && given:
				return usagef("--abort takes no --slots: it aborts the resize in flight")
			case !abort && !given:
				return usagef("missing --slots: give the group's new number of slots, 1 to %d, e.g. --slots 16", partitionq.MaxSlots)
			case abort && wait:
				return usagef("--abort and --wait do not go together: --abort returns once the resize is aborted")
			case timeout < 0:
				return usagef("invalid --timeout %s: give a positive duration, or 0 to wait as long as it takes", timeout)
			}
			s, err := a.openFor(cmd.Context(), t)
			if err != nil {
				return err
			}
			defer s.close()
			out := cmd.OutOrStdout()
			ctx := cmd.Context()
			if abort {
				g, err := s.client.Group(ctx, t.queue, t.group)
				if err != nil {
					return err
				}
				if err := s.client.AbortResize(ctx, partitionq.AbortResizeRequest{Queue: t.queue, Group: t.group,
					Reason: actor.reason, Actor: a.actorOr(actor.actor)}); err != nil {
					return err
				}
				res := resizeJSON{Queue: t.queue, Group: t.group, Generation: g.Generation - 1, Aborted: true}
				if g.Resize != nil {
					res.From, res.To = g.Resize.To, g.Resize.From
				}
				if asJSON {
					return writeJSON(out, res)
				}
				_, err = fmt.Fprintf(out, "aborted the resize of group %q of queue %q: it keeps %s\n", t.group, t.queue, plural(int64(res.To), "slot"))
				return err
			}
			res, err := s.client.Resize(ctx, partitionq.ResizeRequest{Queue: t.queue, Group: t.group, Slots: slots,
				Reason: actor.reason, Actor: a.actorOr(actor.actor)})
			if err != nil {
				return err
			}
			j := resizeJSON{Queue: t.queue, Group: t.group, From: res.From, To: res.To, Generation: res.Generation}
			if !asJSON {
				fmt.Fprintf(out, "resizing group %q of queue %q from %d to %s (generation %d): the workers take it from here\n",
					t.group, t.queue, res.From, plural(int64(res.To), "slot"), res.Generation)
			}
			if wait {
				wctx := ctx
				if timeout > 0 {
					var cancel func()
					wctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				if _, err := s.client.WaitResize(wctx, t.queue, t.group, 200*time.Millisecond); err != nil {
					return err
				}
				j.Done = true
				if !asJSON {
					fmt.Fprintf(out, "resize of group %q done: %s\n", t.group, plural(int64(res.To), "slot"))
				}
			} else if !asJSON {
				fmt.Fprintf(out, "follow it with: partitionq status --queue %s --group %s (or resize --wait)\n", t.queue, t.group)
			}
			if asJSON {
				return writeJSON(out, j)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.IntVar(&slots, "slots", 0, fmt.Sprintf("the group's new number of slots, 1 to %d (required, but with --abort)", partitionq.MaxSlots))
	f.BoolVar(&wait, "wait", false, "wait until the resize is complete (every old slot handed off)")
	f.DurationVar(&timeout, "timeout", 0, "with --wait, give up waiting after this long (the resize goes on); 0: no limit")
	f.BoolVar(&abort, "abort", false, "abort the resize in flight, while its cutover has not begun")
	actor.bind(f, "why, recorded in the audit trail")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
