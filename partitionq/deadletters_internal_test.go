package partitionq

import (
	"errors"
	"strings"
	"testing"
)

// The audit trail's outcomes split into their Outcome and Detail and join
// again as recorded, in every form the database writes (the SQL
// functions of internal/store/migration and DropGroup).
func TestAuditOutcomesSplitAndJoin(t *testing.T) {
	for _, c := range []struct {
		text    string
		outcome Outcome
		detail  string
	}{
		{"skipped", OutcomeSkipped, ""},
		{"already_resolved", OutcomeAlreadyResolved, ""},
		{"retry_scheduled", OutcomeRetryScheduled, ""},
		{"quarantined", OutcomeQuarantined, ""},
		{"replayed", OutcomeReplayed, ""},
		{"already_replayed", OutcomeAlreadyReplayed, ""},
		{`replayed 5 (already_replayed 1, key="a")`, OutcomeReplayed, `5 (already_replayed 1, key="a")`},
		{"replayed 1 (type=FileCreated)", OutcomeReplayed, "1 (type=FileCreated)"},
		{"purged 0", OutcomePurged, "0"},
		{`purged 3 (key="tenant-7")`, OutcomePurged, `3 (key="tenant-7")`},
		{"started: 4 to 8 slots (generation 2)", OutcomeResizeStarted, "4 to 8 slots (generation 2)"},
		{"completed: 4 to 8 slots (generation 2)", OutcomeResizeCompleted, "4 to 8 slots (generation 2)"},
		{"aborted: 2 to 4 slots", OutcomeResizeAborted, "2 to 4 slots"},
		{"dropped 3 slots, 0 events set aside dropped", OutcomeDropped, "3 slots, 0 events set aside dropped"},
		// Not this version's: whole, no detail.
		{"deferred 3", "deferred 3", ""},
		{"started 4 to 8", "started 4 to 8", ""},
		{"purged", OutcomePurged, ""},
		{"", "", ""},
	} {
		o, d := splitOutcome(c.text)
		if o != c.outcome || d != c.detail {
			t.Errorf("splitOutcome(%q) = %q, %q; want %q, %q", c.text, o, d, c.outcome, c.detail)
		}
		if got := (AuditEntry{Outcome: o, Detail: d}).OutcomeText(); got != c.text {
			t.Errorf("OutcomeText of %q = %q", c.text, got)
		}
	}
	// Every outcome the table of actions lists as a value splits to itself.
	for _, r := range AuditActions() {
		for _, s := range r.Outcomes {
			if o, d := splitOutcome(s); d == "" && string(o) != s {
				t.Errorf("%s: outcome %q split to %q", r.Action, s, o)
			}
		}
	}
}

// A read's positional arguments have no default (docs/glossary.md, "Calls
// and their arguments"): a limit, a top or a poll of 0 is refused with a
// *ValidationError naming it, before anything is read.
func TestReadsRefuseAZeroBound(t *testing.T) {
	t.Parallel()
	c := &Client{} // each refuses before it touches the database
	for field, call := range map[string]func() error{
		"limit (Audit)": func() error { _, err := c.Audit(t.Context(), "q", "g", 0); return err },
		"limit (Preview)": func() error {
			_, err := c.Preview(t.Context(), "q", "g", "k", 0)
			return err
		},
		"top (HotKeys)": func() error { _, err := c.HotKeys(t.Context(), "q", "g", 0); return err },
		"poll (WaitResize)": func() error {
			_, err := c.WaitResize(t.Context(), "q", "g", 0)
			return err
		},
	} {
		var ve *ValidationError
		if err := call(); !errors.As(err, &ve) || ve.Field != strings.Fields(field)[0] {
			t.Errorf("%s of 0: %v, want a *ValidationError for it", field, err)
		}
	}
}
