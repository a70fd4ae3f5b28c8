package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// setupJSON is the --json output of setup (docs/cli.md).
type setupJSON struct {
	Queue        string   `json:"queue"`
	Group        string   `json:"group"`
	Slots        int      `json:"slots"`
	Consumers    []string `json:"consumers"`
	QueueCreated bool     `json:"queue_created"`
	Registered   int      `json:"registered"`
	// DedupWindowSeconds is the queue's dedup window after the setup.
	DedupWindowSeconds float64 `json:"dedup_window_seconds"`
}

func (a *app) setupCmd() *cobra.Command {
	var (
		t          target
		slots      int
		tickMaxLag time.Duration
		dedup      time.Duration
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create the queue and a consumer group of N slots (idempotent)",
		Long: `Create the queue when missing and register a consumer group of --slots
slots on it. Running it again changes nothing. Setup does not change a
group's number of slots: with another number it fails, names both, and
points at partitionq resize, which changes it online.
--dedup-window sets the queue's dedup window: how long a dedup id sent to
it (send --dedup-id) is remembered.`,
		Example: "  partitionq setup --queue files --group indexer --slots 8\n  partitionq setup --queue files --group indexer --slots 8 --dedup-window 2h",
		Args:    noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if !cmd.Flags().Changed("slots") {
				return usagef("missing --slots: give the group's number of slots, e.g. --slots 8 (docs/tuning.md; partitionq resize changes it later)")
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			if cmd.Flags().Changed("dedup-window") && dedup == 0 {
				return usagef("invalid --dedup-window 0: give 1ms to 168h (7 days), or leave it out to keep the queue's window")
			}
			res, err := s.client.Setup(cmd.Context(), partitionq.GroupSpec{Queue: t.queue, Group: t.group, Slots: slots, TickMaxLag: tickMaxLag,
				DedupWindow: dedup})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, setupJSON{Queue: res.Queue, Group: res.Group.Group, Slots: res.Slots, Consumers: res.Consumers,
					QueueCreated: res.QueueCreated, Registered: res.Registered, DedupWindowSeconds: res.DedupWindow.Seconds()})
			}
			if res.QueueCreated {
				fmt.Fprintf(out, "created queue %q\n", res.Queue)
			}
			if res.Registered > 0 {
				fmt.Fprintf(out, "set up group %q on queue %q with %s (%s registered)\n", res.Group.Group, res.Queue, plural(int64(res.Slots), "slot"), plural(int64(res.Registered), "slot consumer"))
			} else {
				fmt.Fprintf(out, "group %q on queue %q is already set up with %s: nothing to do\n", res.Group.Group, res.Queue, plural(int64(res.Slots), "slot"))
			}
			if res.TickMaxLag > 0 {
				fmt.Fprintf(out, "queue %q: ticker_max_lag set to %s\n", res.Queue, res.TickMaxLag)
			}
			if dedup > 0 {
				fmt.Fprintf(out, "queue %q: dedup window set to %s\n", res.Queue, dedup)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.IntVar(&slots, "slots", 0, fmt.Sprintf("number of slots N of the group, 1 to %d (required; partitionq resize changes it online)", partitionq.MaxSlots))
	f.DurationVar(&tickMaxLag, "tick-max-lag", 0, "set the queue's ticker_max_lag: the longest a sent event waits for a tick while the ticker runs (default: 1ms on a queue setup creates, then a tick comes whenever the ticker runs and events wait; an existing queue keeps its setting)")
	f.DurationVar(&dedup, "dedup-window", 0, "set the queue's dedup window: how long a dedup id sent to it is remembered, 1ms to 168h (default: leave the queue as it is; 1h until set)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
