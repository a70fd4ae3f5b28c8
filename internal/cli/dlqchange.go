package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

func (a *app) dlqReplayCmd() *cobra.Command {
	var (
		t      target
		who    actorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Send a dead letter again, at the tail of its key (idempotent)",
		Long: `Send a dead letter again with its key, type and payload, after every event
of the key sent before. A dead letter is replayed once: replaying it again
prints "already replayed" and the first replay's event id.`,
		Example: "  partitionq dlq replay 17 --queue files --group indexer --reason 'file fixed'",
		Args:    exactArgs(1, "ID"),
		RunE: runFor(&t, func(cmd *cobra.Command, args []string) error {
			if err := t.need(); err != nil {
				return err
			}
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			res, err := s.client.Replay(cmd.Context(), t.queue, t.group, id, who.reason, a.actorOr(who.actor))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, replayJSON{ID: id, Outcome: string(res.Outcome), NewEventID: res.NewEventID})
			}
			if res.Outcome == partitionq.OutcomeAlreadyReplayed {
				_, err = fmt.Fprintf(out, "already replayed: dead letter %d was sent again before as event %d; nothing changed\n", id, res.NewEventID)
			} else {
				_, err = fmt.Fprintf(out, "replayed: dead letter %d sent again as event %d\n", id, res.NewEventID)
			}
			return err
		}),
	}
	t.bind(cmd.Flags())
	who.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// replayJSON is the --json output of dlq replay.
type replayJSON struct {
	ID         int64  `json:"id"`
	Outcome    string `json:"outcome"`
	NewEventID int64  `json:"new_event_id"`
}

// purgeJSON is the --json output of dlq purge.
type purgeJSON struct {
	Purged int64 `json:"purged"`
}

func (a *app) dlqPurgeCmd() *cobra.Command {
	var (
		t      target
		ids    []int64
		all    bool
		before string
		who    actorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "purge (--id ID... | --all) [--before TIME]",
		Short: "Delete dead letters for good",
		Long: `Delete dead letters of a group for good: those given by --id (repeat it, or
give a comma-separated list), or --all of them; --before keeps only those
that died before a time (2024-05-01T12:00:00Z, 2024-05-01, or an age such as
72h).`,
		Example: `  partitionq dlq purge --queue files --group indexer --id 17,18
  partitionq dlq purge --queue files --group indexer --all --before 720h`,
		Args: cobra.NoArgs,
		RunE: runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			switch {
			case len(ids) == 0 && !all:
				return usagef("say which dead letters to purge: --id ID (repeatable) or --all (narrowed by --before TIME)")
			case len(ids) > 0 && all:
				return usagef("give --id or --all, not both")
			}
			b, err := parseBefore(before, time.Now())
			if err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			req := partitionq.PurgeRequest{Queue: t.queue, Group: t.group, Before: b, Reason: who.reason, Actor: a.actorOr(who.actor)}
			if !all {
				req.IDs = ids
			}
			n, err := s.client.Purge(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), purgeJSON{Purged: n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead letters\n", n)
			return err
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.Int64SliceVar(&ids, "id", nil, "a dead letter to purge (repeatable, or comma-separated)")
	f.BoolVar(&all, "all", false, "purge every dead letter of the group (narrowed by --before)")
	f.StringVar(&before, "before", "", "only those that died before this time or age")
	who.bind(f)
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
