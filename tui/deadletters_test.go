package tui

import (
	"strings"
	"testing"
)

func TestBulkDeadLetters(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{})
	press(t, m, "3", "a", "f", "text:reason=skip", "enter")
	if m.dead.filterExpr != "reason=skip" || len(m.dead.list) != 1 || m.dead.list[0].ID != 11 {
		t.Fatalf("filter reason=skip: %q, %d listed", m.dead.filterExpr, len(m.dead.list))
	}
	press(t, m, "P")
	if !m.confirmOpen || m.confirm.req.kind != actPurgeMany || m.confirm.req.filter != "reason=skip" || m.confirm.bulk.Count != 1 {
		t.Fatalf("P: %+v, dry run %+v", m.confirm.req, m.confirm.bulk)
	}
	press(t, m, "enter") // no reason yet
	if len(f.done()) != 0 || !strings.Contains(m.confirm.problem, "reason is required") {
		t.Fatalf("enter without a reason acted: %v (%q)", f.done(), m.confirm.problem)
	}
	press(t, m, "esc")
	if m.confirmOpen || len(f.done()) != 0 {
		t.Fatal("esc did not cancel the purge")
	}
	press(t, m, "P", "text:spring cleaning", "enter")
	if got := f.done(); len(got) != 1 || got[0] != `purge reason="skip" (false) spring cleaning` {
		t.Fatalf("actions = %q", got)
	}
	if !strings.HasPrefix(m.flash.text, "✓ Purged 1 dead letter (reason=skip) · audit entry 4") {
		t.Fatalf("result line %q", m.flash.text)
	}
	// A filter that does not parse says why, and offers no bulk action.
	press(t, m, "esc", "f", "text:colour=red", "enter")
	if m.dead.filterErr == nil || !strings.Contains(m.View(), `unknown filter field "colour"`) {
		t.Fatalf("bad filter: %v\n%s", m.dead.filterErr, m.View())
	}
	press(t, m, "R")
	if m.confirmOpen {
		t.Fatal("R opened a bulk replay on a filter that does not parse")
	}
	press(t, m, "esc")
	if m.dead.filterExpr != "" || len(m.dead.list) != 3 {
		t.Fatalf("esc: filter %q, %d listed; want it cleared, all 3", m.dead.filterExpr, len(m.dead.list))
	}
	// Read-only: no bulk action.
	ro, rf := setup(t, Options{ReadOnly: true})
	press(t, ro, "3", "R", "P")
	if ro.confirmOpen || len(rf.done()) != 0 {
		t.Fatal("read-only console offered a bulk action")
	}
}
