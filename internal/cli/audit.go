package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// auditJSON is the --json output of audit (docs/cli.md).
type auditJSON struct {
	Queue   string           `json:"queue"`
	Group   string           `json:"group"`
	Entries []auditEntryJSON `json:"entries"`
}

type auditEntryJSON struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	DBRole  string    `json:"db_role"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	Key     string    `json:"key"`
	EventID int64     `json:"event_id"`
	Reason  string    `json:"reason"`
	Outcome string    `json:"outcome"`
}

func (a *app) auditCmd() *cobra.Command {
	var (
		t      target
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit trail of operator actions, newest first",
		Long: `Show the operator actions on a group, newest first: when, the database
role and the actor, the key and event, the reason and what came of it
(OUTCOME). A dropped group's trail stays readable. The actions, the
command that does each, and what OUTCOME says for it:

` + auditActionsHelp(),
		Example: "  partitionq audit --queue files --group indexer --limit 20",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if limit < 1 {
				return usagef("invalid --limit %d: give 1 or more", limit)
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			es, err := s.client.Audit(cmd.Context(), t.queue, t.group, limit)
			if err != nil {
				return err
			}
			if asJSON {
				out := auditJSON{Queue: t.queue, Group: t.group, Entries: make([]auditEntryJSON, 0, len(es))}
				for _, e := range es {
					out.Entries = append(out.Entries, auditEntryJSON{ID: e.ID, At: utc(e.At), DBRole: e.DBRole, Actor: e.Actor,
						Action: string(e.Action), Key: e.Key, EventID: e.EventID, Reason: e.Reason, Outcome: e.OutcomeText()})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printAudit(cmd.OutOrStdout(), es)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.IntVar(&limit, "limit", 100, "show at most this many entries")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// auditActionsHelp lists the actions of the audit trail for audit --help,
// from partitionq's table of them, one a line:
// "  skip (partitionq skip): skipped, already_resolved".
func auditActionsHelp() string {
	var b strings.Builder
	for i, a := range partitionq.AuditActions() {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  %s (partitionq %s): %s", a.Action, a.Command, strings.Join(a.Outcomes, "; "))
	}
	return b.String()
}

func printAudit(w io.Writer, es []partitionq.AuditEntry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "no operator actions recorded")
		return err
	}
	tb := newTable(w, "ID", "AT", "ROLE", "ACTOR", "ACTION", "KEY", "EVENT", "OUTCOME", "REASON").
		widths(map[string]int{"ROLE": 24, "ACTOR": 24, "KEY": 40, "OUTCOME": 48, "REASON": 60})
	for _, e := range es {
		ev := "-"
		if e.EventID != 0 {
			ev = i64(e.EventID)
		}
		tb.row(i64(e.ID), fmtTime(e.At), e.DBRole, dash(e.Actor), string(e.Action), dash(e.Key), ev, e.OutcomeText(), dash(e.Reason))
	}
	return tb.flush()
}
