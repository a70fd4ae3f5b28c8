package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// deadLetterJSON is one dead letter in the --json output of dlq list and
// dlq show (docs/cli.md).
type deadLetterJSON struct {
	ID            int64      `json:"id"`
	EventID       int64      `json:"event_id"`
	Slot          int        `json:"slot"`
	Key           string     `json:"key"`
	Type          string     `json:"type"`
	Payload       string     `json:"payload"`
	SentAt        time.Time  `json:"sent_at"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	Reason        string     `json:"reason"`
	Actor         string     `json:"actor"`
	DBRole        string     `json:"db_role"`
	DeadAt        time.Time  `json:"dead_at"`
	ReplayedAt    *time.Time `json:"replayed_at"`
	ReplayEventID *int64     `json:"replay_event_id"`
}

func toDeadLetterJSON(d partitionq.DeadLetter) deadLetterJSON {
	j := deadLetterJSON{ID: d.ID, EventID: d.EventID, Slot: d.Slot, Key: d.Key, Type: d.Type, Payload: string(d.Payload),
		SentAt: utc(d.EventTime), Attempts: d.Attempts, LastError: d.LastError, Reason: d.Reason, Actor: d.Actor,
		DBRole: d.DBRole, DeadAt: utc(d.DeadAt), ReplayEventID: d.ReplayID}
	if d.ReplayedAt != nil {
		j.ReplayedAt = optTime(*d.ReplayedAt)
	}
	return j
}

// dlqListJSON is the --json output of dlq list.
type dlqListJSON struct {
	Queue       string           `json:"queue"`
	Group       string           `json:"group"`
	DeadLetters []deadLetterJSON `json:"dead_letters"`
}

func (a *app) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Dead letters: list, show, replay, purge",
		Long: `Dead letters are events that will not be handled again unless replayed:
those that ran out of attempts, that a handler refused, or that an operator
skipped or quarantined.`,
		RunE: runE(func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("dlq needs a subcommand: list, show, replay or purge")
			}
			return usagef("unknown dlq subcommand %s: use list, show, replay or purge", termsafe.Echo(args[0]))
		}),
	}
	cmd.AddCommand(a.dlqListCmd(), a.dlqShowCmd(), a.dlqReplayCmd(), a.dlqPurgeCmd())
	return cmd
}

func (a *app) dlqListCmd() *cobra.Command {
	var (
		t      target
		q      partitionq.DeadLetterQuery
		sel    dlqFilterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the dead letters of a group, oldest first, filtered by key, type, error, reason, time",
		Long: `List the dead letters of a group, oldest first. The filters narrow the list
and combine (all must hold): --key, --type, --error (text in the last
error, ignoring case), --dead-reason (max_attempts, handler, skip,
quarantine: how it died), --since and --before (when it died), --pending
(not replayed), --id; or --filter with the same fields in one expression,
as the console's filter prompt takes them:

  --filter 'type=FileDeleted error="disk full" since=24h'

dlq replay and dlq purge take the same filters.`,
		Example: `  partitionq dlq list --queue files --group indexer --pending
  partitionq dlq list --queue files --group indexer --key tenant-42 --error timeout --since 24h`,
		Args: noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if q.Limit < 1 {
				return usagef("invalid --limit %d: give 1 or more", q.Limit)
			}
			if err := sel.apply(&q, time.Now()); err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			q.Queue, q.Group = t.queue, t.group
			dls, err := s.client.DeadLetters(cmd.Context(), q)
			if err != nil {
				return err
			}
			if asJSON {
				out := dlqListJSON{Queue: t.queue, Group: t.group, DeadLetters: make([]deadLetterJSON, 0, len(dls))}
				for _, d := range dls {
					out.DeadLetters = append(out.DeadLetters, toDeadLetterJSON(d))
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printDeadLetters(cmd.OutOrStdout(), dls)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	sel.bind(f, "only these dead letters (repeatable, or comma-separated)")
	f.Int64Var(&q.AfterID, "after", 0, "only ids above this one (to page on)")
	f.IntVar(&q.Limit, "limit", 100, "show at most this many")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printDeadLetters(w io.Writer, dls []partitionq.DeadLetter) error {
	if len(dls) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tb := newTable(w, "ID", "EVENT", "KEY", "TYPE", "SLOT", "ATTEMPTS", "REASON", "DEAD AT", "REPLAYED AS", "LAST ERROR").
		widths(map[string]int{"KEY": 40, "TYPE": 24, "REASON": 40, "LAST ERROR": 60})
	for _, d := range dls {
		replayed := "-"
		if d.ReplayID != nil {
			replayed = i64(*d.ReplayID)
		}
		tb.row(i64(d.ID), i64(d.EventID), d.Key, dash(d.Type), strconv.Itoa(d.Slot), strconv.Itoa(d.Attempts), d.Reason,
			fmtTime(d.DeadAt), replayed, dash(d.LastError))
	}
	return tb.flush()
}

// parseID reads a dead letter id argument.
func parseID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("invalid dead letter id %s: give the ID shown by partitionq dlq list", termsafe.Echo(arg))
	}
	return id, nil
}

func (a *app) dlqShowCmd() *cobra.Command {
	var (
		t      target
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "show ID",
		Short:   "Show one dead letter in full, payload and last error included",
		Example: "  partitionq dlq show 17 --queue files --group indexer",
		Args:    exactArgs(1, "ID"),
		RunE: a.runFor(&t, func(cmd *cobra.Command, args []string) error {
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
			d, err := s.client.DeadLetterByID(cmd.Context(), t.queue, t.group, id)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toDeadLetterJSON(d))
			}
			return printDeadLetter(cmd.OutOrStdout(), d)
		}),
	}
	t.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printDeadLetter(w io.Writer, d partitionq.DeadLetter) error {
	replayed := "no"
	if d.ReplayedAt != nil && d.ReplayID != nil {
		replayed = fmt.Sprintf("%s as event %d", fmtTime(*d.ReplayedAt), *d.ReplayID)
	}
	tb := newFields(w)
	for _, kv := range [][2]string{
		{"id", i64(d.ID)}, {"event", i64(d.EventID)}, {"key", d.Key}, {"type", dash(d.Type)}, {"slot", strconv.Itoa(d.Slot)},
		{"sent", fmtTime(d.EventTime)}, {"attempts", strconv.Itoa(d.Attempts)}, {"reason", d.Reason},
		{"actor", dash(d.Actor)}, {"role", d.DBRole}, {"dead at", fmtTime(d.DeadAt)}, {"replayed", replayed},
	} {
		tb.row(kv[0]+":", kv[1])
	}
	if err := tb.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "last error:\n%s\n", indent(dash(d.LastError)))
	_, err := fmt.Fprintf(w, "payload:\n%s\n", indent(string(d.Payload)))
	return err
}
