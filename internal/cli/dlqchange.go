package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/dlqfilter"
)

// bulkFlags are what dlq replay and dlq purge share beyond the filters.
type bulkFlags struct {
	all, dryRun bool
	max         int
}

func (b *bulkFlags) bind(fs *pflag.FlagSet, verb string) {
	fs.BoolVar(&b.all, "all", false, verb+" every dead letter of the group (narrowed by the filters)")
	fs.BoolVar(&b.dryRun, "dry-run", false, "print what would be done, and change nothing")
	fs.IntVar(&b.max, "max", partitionq.BulkMaxDefault, "refuse, changing nothing, when more than this many dead letters match")
}

// bulkJSON is the --json output of a bulk dlq replay and of dlq purge.
type bulkJSON struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	Queue  string `json:"queue"`
	Group  string `json:"group"`
	// Filter is the selection as a --filter expression ("" for --all).
	Filter string `json:"filter"`
	// Replayed (replay) or Purged (purge): the dead letters acted on, or
	// that would be on a dry run.
	Replayed        *int           `json:"replayed,omitempty"`
	AlreadyReplayed *int           `json:"already_replayed,omitempty"`
	Purged          *int64         `json:"purged,omitempty"`
	AuditID         int64          `json:"audit_id"`
	DeadLetters     []bulkItemJSON `json:"dead_letters"`
	// UnmatchedIDs are the ids given that were not selected.
	UnmatchedIDs []int64 `json:"unmatched_ids"`
}

type bulkItemJSON struct {
	ID         int64  `json:"id"`
	EventID    int64  `json:"event_id"`
	Key        string `json:"key"`
	Type       string `json:"type"`
	Outcome    string `json:"outcome"`
	NewEventID *int64 `json:"new_event_id"` // the replay's event; null for a purge or a dry run
}

func toBulkJSON(action partitionq.AuditAction, q partitionq.DeadLetterQuery, res partitionq.BulkResult) bulkJSON {
	out := bulkJSON{Action: string(action), DryRun: res.DryRun, Queue: q.Queue, Group: q.Group, Filter: filterOf(q), AuditID: res.AuditID,
		DeadLetters: make([]bulkItemJSON, 0, len(res.Items)), UnmatchedIDs: append([]int64{}, res.Unmatched...)}
	if action == partitionq.AuditReplay {
		out.Replayed, out.AlreadyReplayed = &res.Count, &res.AlreadyReplayed
	} else {
		n := int64(res.Count)
		out.Purged = &n
	}
	for _, it := range res.Items {
		j := bulkItemJSON{ID: it.ID, EventID: it.EventID, Key: it.Key, Type: it.Type, Outcome: string(it.Outcome)}
		if it.NewEventID != 0 {
			j.NewEventID = &it.NewEventID
		}
		out.DeadLetters = append(out.DeadLetters, j)
	}
	return out
}

func (a *app) dlqReplayCmd() *cobra.Command {
	var (
		t      target
		who    actorFlags
		sel    dlqFilterFlags
		bulk   bulkFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "replay [ID...] [filters] [--dry-run]",
		Short: "Send dead letters again, at the tail of their keys (idempotent)",
		Long: `Send dead letters again with their key, type and payload, after every event
of the key sent before. A dead letter is replayed once: replaying it again
prints "already replayed" and the first replay's event id.

One ID replays that dead letter. Several IDs, or the filters of dlq list
(--key, --type, --error, --dead-reason, --since, --before, --pending, --id,
--filter), or --all, replay every dead letter selected in one transaction,
in the order of their original events, so that several of one key replay
in their original order; the audit trail records it as one action with its
count. --dry-run prints what would be replayed and changes nothing. More
than --max matches are refused, and nothing changes.`,
		Example: `  partitionq dlq replay 17 --queue files --group indexer --reason 'file fixed'
  partitionq dlq replay --queue files --group indexer --key tenant-42 --dry-run
  partitionq dlq replay --queue files --group indexer --filter 'type=FileDeleted error=timeout' --reason 'disk back'
  partitionq dlq replay 17 18 21 --queue files --group indexer`,
		RunE: a.runFor(&t, func(cmd *cobra.Command, args []string) error {
			if err := t.need(); err != nil {
				return err
			}
			var ids []int64
			for _, arg := range args {
				id, err := parseID(arg)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if len(ids) == 0 && !sel.set() && !bulk.all {
				return usagef("say which dead letters to replay: an ID (or several), filters such as --key K or --filter EXPR, or --all")
			}
			if bulk.max < 1 {
				return usagef("invalid --max %d: give 1 or more", bulk.max)
			}
			single := len(ids) == 1 && !sel.set() && !bulk.all && !bulk.dryRun
			q := partitionq.DeadLetterQuery{Queue: t.queue, Group: t.group, IDs: ids}
			if err := sel.apply(&q, time.Now()); err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			out := cmd.OutOrStdout()
			if single {
				return replayOne(cmd, s, t, ids[0], who, a.actorOr(who.actor), asJSON)
			}
			res, err := s.client.ReplayMatching(cmd.Context(), partitionq.BulkRequest{Match: q, All: bulk.all, DryRun: bulk.dryRun, Max: bulk.max,
				Reason: who.reason, Actor: a.actorOr(who.actor)})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(out, toBulkJSON(partitionq.AuditReplay, q, res))
			}
			return printBulk(out, partitionq.AuditReplay, q, res)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	who.bind(f, "why, recorded in the audit trail")
	sel.bind(f, "a dead letter to replay (repeatable, or comma-separated; IDs may also be given as arguments)")
	bulk.bind(f, "replay")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func replayOne(cmd *cobra.Command, s *session, t target, id int64, who actorFlags, actor string, asJSON bool) error {
	res, err := s.client.Replay(cmd.Context(), partitionq.ReplayRequest{Queue: t.queue, Group: t.group, ID: id, Reason: who.reason, Actor: actor})
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
}

// replayJSON is the --json output of dlq replay of one ID.
type replayJSON struct {
	ID         int64  `json:"id"`
	Outcome    string `json:"outcome"`
	NewEventID int64  `json:"new_event_id"`
}

func (a *app) dlqPurgeCmd() *cobra.Command {
	var (
		t      target
		sel    dlqFilterFlags
		bulk   bulkFlags
		who    actorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "purge (--id ID... | filters | --all) [--dry-run]",
		Short: "Delete dead letters for good",
		Long: `Delete dead letters of a group for good, in one transaction: those given by
--id (repeat it, or give a comma-separated list), those the filters of dlq
list select (--key, --type, --error, --dead-reason, --since, --before,
--pending, --filter), or --all of them (narrowed by any filter). Times are
2024-05-01T12:00:00Z, 2024-05-01, or an age such as 72h. The audit trail
records one action with the count. --dry-run prints what would be purged
and changes nothing. More than --max matches are refused, and nothing
changes.`,
		Example: `  partitionq dlq purge --queue files --group indexer --id 17,18
  partitionq dlq purge --queue files --group indexer --all --before 720h
  partitionq dlq purge --queue files --group indexer --key tenant-42 --dry-run`,
		Args: noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			switch {
			case !sel.set() && !bulk.all:
				return usagef("say which dead letters to purge: --id ID (repeatable), filters such as --key K or --filter EXPR, or --all (narrowed by --before TIME)")
			case len(sel.ids) > 0 && bulk.all:
				return usagef("give --id or --all, not both")
			case bulk.max < 1:
				return usagef("invalid --max %d: give 1 or more", bulk.max)
			}
			q := partitionq.DeadLetterQuery{Queue: t.queue, Group: t.group}
			if err := sel.apply(&q, time.Now()); err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			res, err := s.client.PurgeMatching(cmd.Context(), partitionq.BulkRequest{Match: q, All: bulk.all, DryRun: bulk.dryRun, Max: bulk.max,
				Reason: who.reason, Actor: a.actorOr(who.actor)})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toBulkJSON(partitionq.AuditPurge, q, res))
			}
			return printBulk(cmd.OutOrStdout(), partitionq.AuditPurge, q, res)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	sel.bind(f, "a dead letter to purge (repeatable, or comma-separated)")
	bulk.bind(f, "purge")
	who.bind(f, "why, recorded in the audit trail")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// printBulk prints what a bulk replay or purge did (or would do).
func printBulk(w io.Writer, action partitionq.AuditAction, q partitionq.DeadLetterQuery, res partitionq.BulkResult) error {
	what := ""
	if f := filterOf(q); f != "" {
		what = " (" + f + ")"
	}
	switch {
	case res.DryRun && action == partitionq.AuditReplay:
		fmt.Fprintf(w, "dry run: would replay %s%s in this order", plural(int64(res.Count), "dead letter"), what)
		if res.AlreadyReplayed > 0 {
			fmt.Fprintf(w, "; %d already replayed would be left as they are", res.AlreadyReplayed)
		}
		fmt.Fprintln(w, "; nothing changed")
	case res.DryRun:
		fmt.Fprintf(w, "dry run: would purge %s%s; nothing changed\n", plural(int64(res.Count), "dead letter"), what)
	case action == partitionq.AuditReplay:
		fmt.Fprintf(w, "replayed %s%s, in event order", plural(int64(res.Count), "dead letter"), what)
		if res.AlreadyReplayed > 0 {
			fmt.Fprintf(w, "; %d already replayed, left as they were", res.AlreadyReplayed)
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "purged %s\n", plural(int64(res.Count), "dead letter"))
	}
	if len(res.Unmatched) > 0 {
		ids := make([]string, len(res.Unmatched))
		for i, id := range res.Unmatched {
			ids[i] = i64(id)
		}
		fmt.Fprintf(w, "not selected: %s (no such dead letter in this group, or another filter excludes it)\n", strings.Join(ids, ", "))
	}
	if len(res.Items) == 0 {
		return nil
	}
	if !res.DryRun && res.AuditID != 0 {
		fmt.Fprintf(w, "audit entry %d\n", res.AuditID)
	}
	if !res.DryRun && action == partitionq.AuditPurge {
		return nil
	}
	if action == partitionq.AuditPurge { // a dry run: what would go
		tb := newTable(w, "ID", "EVENT", "KEY", "TYPE", "OUTCOME").widths(map[string]int{"KEY": 40, "TYPE": 24})
		for _, it := range res.Items {
			tb.row(i64(it.ID), i64(it.EventID), it.Key, dash(it.Type), "would purge")
		}
		return tb.flush()
	}
	tb := newTable(w, "ID", "EVENT", "KEY", "TYPE", "OUTCOME", "NEW EVENT").widths(map[string]int{"KEY": 40, "TYPE": 24})
	for _, it := range res.Items {
		ne := "-"
		if it.NewEventID != 0 {
			ne = i64(it.NewEventID)
		}
		outcome := string(it.Outcome)
		if res.DryRun && it.Outcome == partitionq.OutcomeReplayed {
			outcome = "would replay"
		}
		tb.row(i64(it.ID), i64(it.EventID), it.Key, dash(it.Type), outcome, ne)
	}
	return tb.flush()
}

// filterOf writes the selection of q as a --filter expression.
func filterOf(q partitionq.DeadLetterQuery) string {
	return dlqfilter.Format(q)
}
