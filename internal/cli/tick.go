package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

func (a *app) tickCmd() *cobra.Command {
	var (
		cfg  partitionq.TickerConfig
		once bool
	)
	cmd := &cobra.Command{
		Use:   "tick",
		Short: "Run the engine's ticker and maintenance (in place of pgqd) until stopped",
		Long: `Make the engine's ticks and run its maintenance (retry events back into
their queues, table rotation) for every queue of the database, in place of
the pgqd daemon, and remove expired dedup records (send --dedup-id) in
bounded batches, until SIGTERM or SIGINT. Several may run at once: each
round is done by one of them. With --once, run one ticker round and one
maintenance round and exit. (Workers can tick themselves: work --ticker.)`,
		Example: "  partitionq tick --interval 50ms",
		Args:    noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if cfg.Interval <= 0 || cfg.MaintInterval <= 0 {
				return usagef("invalid --interval %s or --maint-interval %s: give positive durations", cfg.Interval, cfg.MaintInterval)
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			if once {
				if err := s.client.TickOnce(cmd.Context()); err != nil {
					return err
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "ran one ticker round and one maintenance round")
				return err
			}
			if err := s.client.CheckTickerRights(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "partitionq: ticking every %s; stop with SIGTERM or Ctrl-C\n", cfg.Interval)
			if err := s.client.RunTicker(cmd.Context(), cfg); err != nil {
				return err
			}
			fmt.Fprintln(a.env.Stderr, "partitionq: ticker stopped")
			return nil
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Interval, "interval", partitionq.TickIntervalDefault, "how often the engine's ticker runs (whether a queue gets a tick is the engine's decision, see setup --tick-max-lag)")
	// 30s is TickerConfig.MaintInterval's default.
	f.DurationVar(&cfg.MaintInterval, "maint-interval", 30*time.Second, "how often retries are moved back and maintenance runs")
	f.BoolVar(&once, "once", false, "run one round of each and exit")
	return cmd
}
