package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// actionJSON is the --json output of skip, retry and quarantine (docs/cli.md).
type actionJSON struct {
	Action       string  `json:"action"`
	Outcome      string  `json:"outcome"`
	Queue        string  `json:"queue"`
	Group        string  `json:"group"`
	Key          string  `json:"key"`
	Slot         int     `json:"slot"`
	EventID      int64   `json:"event_id"`
	Count        int     `json:"count"`
	NextEventIDs []int64 `json:"next_event_ids"`
	// Resolved: how and by whom, for already_resolved (else null).
	Resolved *resolvedJSON `json:"resolved"`
}

// resolvedJSON is how an event was resolved (docs/cli.md, unblocking).
type resolvedJSON struct {
	How          string     `json:"how"`
	Reason       string     `json:"reason"`
	Actor        string     `json:"actor"`
	DBRole       string     `json:"db_role"`
	At           *time.Time `json:"at"`
	DeadLetterID *int64     `json:"dead_letter_id"`
}

// keyActionHelp is what a key action's command says beyond the table's
// row (partitionq.AuditActions): its long help, its example and --reason's
// line, keyed by action. An action without an entry gets its row's
// summary as long help.
var keyActionHelp = map[partitionq.AuditAction]struct{ long, example, reasonUsage string }{
	partitionq.AuditSkip: {
		long: `Skip the head event of a blocked key: it goes to the dead letters (replay
it later with dlq replay), and the key's waiting events run next, in order.
Safe while workers run. --reason is required: it is kept in the audit trail
and the dead letter. With --event, the skip applies only if that event is
still the head; if it was resolved before, it prints "already resolved"
(how, by whom) and changes nothing, so running the same skip twice is
harmless; any other event is refused (exit 1), naming the head. Without
--event it refuses a
draining key (its head never failed): name that event with --event to skip
it anyway.`,
		example:     "  partitionq skip --queue files --group indexer --key tenant-42 --event 1234 --reason 'corrupt file'",
		reasonUsage: "why (required), recorded in the audit trail and in the dead letter of the head",
	},
	partitionq.AuditRetry: {
		long: `Bring the next attempt of a blocked key's head event forward to now: a
running worker tries it again within about a second. Without --event it
refuses a draining key, whose head is due anyway.`,
		example:     "  partitionq retry --queue files --group indexer --key tenant-42",
		reasonUsage: "why, recorded in the audit trail (optional)",
	},
	partitionq.AuditQuarantine: {
		long: `Move the head event of a key and every event waiting behind it to the
dead letters, in one transaction (for a tenant being deleted, or a key
known to be broken). Events of the key sent later are handled as usual.
--reason is required: it is kept in the audit trail and the dead letters.
Without --event it refuses a draining key (its head never failed).`,
		example:     "  partitionq quarantine --queue files --group indexer --key tenant-42 --reason 'tenant deleted'",
		reasonUsage: "why (required), recorded in the audit trail and in the dead letters of the key's events",
	},
}

// actionTries is how many times skip, retry and quarantine try a head that
// a worker is handling (partitionq.ErrHeadBusy) before they give up.
const actionTries = 3

// keyActionCmds makes one command per action on a key's head in
// partitionq's table of actions, in the table's order.
func (a *app) keyActionCmds() []*cobra.Command {
	var out []*cobra.Command
	for _, row := range partitionq.AuditActions() {
		if row.On == partitionq.TargetKeyHead {
			out = append(out, a.keyActionCmd(row))
		}
	}
	return out
}

func (a *app) keyActionCmd(row partitionq.AuditActionInfo) *cobra.Command {
	name, help := row.Command, keyActionHelp[row.Action]
	if help.long == "" {
		help.long = row.Summary
	}
	if help.reasonUsage == "" {
		help.reasonUsage = "why, recorded in the audit trail (optional)"
		if row.ReasonRequired {
			help.reasonUsage = "why (required), recorded in the audit trail"
		}
	}
	var (
		t      target
		key    string
		headID int64
		who    actorFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     name,
		Short:   row.Summary,
		Long:    help.long,
		Example: help.example,
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if err := need("key", key, "name the blocked key (see partitionq blocked)"); err != nil {
				return err
			}
			if headID < 0 {
				return usagef("invalid --event %d: give the head event id shown by partitionq blocked", headID)
			}
			if row.ReasonRequired && strings.TrimSpace(who.reason) == "" {
				return usagef("missing --reason: say why, e.g. --reason 'corrupt file, INC-42': it is kept in the audit trail and the dead letters")
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			act := partitionq.ActionRequest{Action: row.Action, Queue: t.queue, Group: t.group, Key: key, HeadID: headID, Reason: who.reason, Actor: a.actorOr(who.actor)}
			res, err := s.client.Act(cmd.Context(), act)
			// A worker handling the head right now (each try waits for it
			// up to 5 s): try again, a few times.
			for try := 1; errors.Is(err, partitionq.ErrHeadBusy) && try < actionTries; try++ {
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(200 * time.Millisecond):
				}
				res, err = s.client.Act(cmd.Context(), act)
			}
			var de *partitionq.DrainingError
			if errors.As(err, &de) {
				return explain(err, "key %s is draining, not blocked: its head, event %d, has never failed (its failed event was resolved, and its waiting events now run in order without help): %s changed nothing; to %s event %d anyway, pass --event %d (partitionq preview shows what runs next)",
					quote(key), de.EventID, name, name, de.EventID, de.EventID)
			}
			var nh *partitionq.NotHeadError
			if errors.As(err, &nh) {
				next := fmt.Sprintf("to %s its head, pass --event %d", name, nh.Head)
				if nh.Head == 0 {
					next = "nothing needs doing: its events run as they arrive (partitionq key shows its state)"
				}
				return explain(err, "event %d is not the head of key %s, and was never resolved: %s; %s changed nothing and recorded nothing; %s",
					nh.EventID, quote(key), nh.Why, name, notHeadState(nh)+"; "+next)
			}
			if errors.Is(err, partitionq.ErrNotBlocked) {
				return explain(err, "key %s is not blocked: nothing of it is set aside, so %s has nothing to act on; its events run as they arrive "+
					"(partitionq key --queue %s --group %s --key %s shows its state; partitionq blocked lists the blocked keys)",
					quote(key), name, t.queue, t.group, quote(key))
			}
			if err != nil {
				return err
			}
			if asJSON {
				next := res.NextIDs
				if next == nil {
					next = []int64{}
				}
				return writeJSON(cmd.OutOrStdout(), actionJSON{Action: string(row.Action), Outcome: string(res.Outcome), Queue: t.queue, Group: t.group,
					Key: res.Key, Slot: res.Slot, EventID: res.EventID, Count: res.Count, NextEventIDs: next, Resolved: resolvedOf(res.Resolved)})
			}
			return printAction(cmd.OutOrStdout(), res)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.StringVar(&key, "key", "", "the blocked key (required)")
	f.Int64Var(&headID, "event", 0, "act only if this event is still the key's head (the HEAD shown by blocked)")
	who.bind(f, help.reasonUsage)
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printAction(w io.Writer, res partitionq.ActionResult) error {
	var err error
	key := quote(res.Key)
	switch res.Outcome {
	case partitionq.OutcomeSkipped:
		_, err = fmt.Fprintf(w, "skipped: event %d of key %s (slot %d) moved to the dead letters", res.EventID, key, res.Slot)
		if len(res.NextIDs) > 0 {
			ids := make([]string, len(res.NextIDs))
			for i, id := range res.NextIDs {
				ids[i] = strconv.FormatInt(id, 10)
			}
			fmt.Fprintf(w, "; next to run: %s", strings.Join(ids, ", "))
		}
		fmt.Fprintln(w)
	case partitionq.OutcomeAlreadyResolved:
		_, err = fmt.Fprintf(w, "already resolved: event %d of key %s %s; nothing changed\n", res.EventID, key, resolvedText(res.Resolved))
	case partitionq.OutcomeRetryScheduled:
		_, err = fmt.Fprintf(w, "retry scheduled: event %d of key %s (slot %d) will be tried again now by the slot's worker\n", res.EventID, key, res.Slot)
	case partitionq.OutcomeQuarantined:
		_, err = fmt.Fprintf(w, "quarantined: %s of key %s (slot %d) moved to the dead letters\n", plural(int64(res.Count), "event"), key, res.Slot)
	default:
		_, err = fmt.Fprintf(w, "%s: event %d of key %s\n", res.Outcome, res.EventID, key)
	}
	return err
}

// notHeadState says what the key's head is now, for a *NotHeadError.
func notHeadState(nh *partitionq.NotHeadError) string {
	if nh.Head == 0 {
		return "the key is not blocked (nothing of it is set aside)"
	}
	return fmt.Sprintf("the key's head is event %d (%s)", nh.Head, nh.HeadState)
}

// resolvedText says how and by whom an event was resolved: "was skipped by
// alice (role ops) at 2024-05-01 10:05:00 (skip: corrupt file)".
func resolvedText(r *partitionq.Resolution) string {
	if r == nil {
		return "was resolved"
	}
	if r.How == partitionq.ResolvedHandled {
		return "was handled by a worker"
	}
	by := quote(r.Actor)
	if r.DBRole != "" {
		by += fmt.Sprintf(" (role %s)", quote(r.DBRole))
	}
	return fmt.Sprintf("was %s by %s at %s (dead letter %d, reason %s)", r.How, by, fmtTime(r.At), r.DeadLetterID, quote(r.Reason))
}

func resolvedOf(r *partitionq.Resolution) *resolvedJSON {
	if r == nil {
		return nil
	}
	out := &resolvedJSON{How: r.How, Reason: r.Reason, Actor: r.Actor, DBRole: r.DBRole}
	if !r.At.IsZero() {
		at := r.At.UTC()
		out.At = &at
	}
	if r.DeadLetterID != 0 {
		out.DeadLetterID = &r.DeadLetterID
	}
	return out
}
