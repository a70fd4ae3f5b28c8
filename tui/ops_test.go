package tui

import (
	"slices"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// Issue 14: the list of every group, and switching between groups.
func TestEveryGroup(t *testing.T) {
	t.Parallel()
	m, _ := setup(t, Options{Queue: everyGroup})
	if !m.groupsMode || !m.groups.have || len(m.groups.list) != 4 {
		t.Fatalf("without a group: groups mode %v, %d groups read; want the 4 of the list", m.groupsMode, len(m.groups.list))
	}
	if p := m.plan(); !p.groups || p.deadLetters || p.findKey != "" {
		t.Fatalf("the list's refresh plan = %+v, want the groups alone", p)
	}
	press(t, m, "2", "/") // no tabs, no key finder on the list
	if !m.groupsMode || m.keyOpen {
		t.Fatal("2 or / left the list of groups")
	}
	press(t, m, "down", "enter")
	if m.groupsMode || m.sh.queue != "files" || m.sh.group != "thumbnails" {
		t.Fatalf("enter on the second row: groups mode %v, group %s/%s; want files/thumbnails", m.groupsMode, m.sh.queue, m.sh.group)
	}
	if !strings.Contains(m.View(), "partitionq console · files/thumbnails") {
		t.Fatalf("the opened group's header:\n%s", m.View())
	}
	// A refresh of the list still in flight when the group opened is dropped.
	stale := snap(0, fetchPlan{groups: true})
	m.Update(stale)
	if m.groupsMode || m.last.status.Slots == 0 {
		t.Fatalf("a stale list refresh changed the group's view (groups mode %v)", m.groupsMode)
	}
	old := snap(0, m.plan())
	old.queue, old.group = "files", "indexer-before"
	_, cmd := m.Update(old)
	if cmd == nil || !m.ref.inFlight {
		t.Fatal("a refresh of another group was not answered by a new refresh")
	}
	press(t, m, "0")
	if !m.groupsMode || m.groups.selected().Group != "thumbnails" {
		t.Fatalf("0: groups mode %v, selected %+v; want the list, on the group left", m.groupsMode, m.groups.selected())
	}
}

func TestFindKey(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{})
	press(t, m, "/", "text:tenant-7")
	if !m.keyOpen || !m.keyv.prompting {
		t.Fatal("/ did not open the key prompt")
	}
	if seen, _ := press(t, m, "text:q"); quits(seen) {
		t.Fatal("q typed into the prompt quit")
	}
	press(t, m, "backspace", "enter")
	if m.keyv.prompting || !m.keyv.have || m.keyv.info.State != partitionq.KeyBlocked || m.keyv.info.Slot != 1 {
		t.Fatalf("enter: prompting %v, read %v, info %+v; want tenant-7 blocked in slot 1", m.keyv.prompting, m.keyv.have, m.keyv.info)
	}
	if m.plan().findKey != "tenant-7" || !slices.Contains(f.keys, "tenant-7") {
		t.Fatalf("the refresh does not read the key: plan %+v, keys read %v", m.plan(), f.keys)
	}
	// Skip its head from here: the confirmation, then the action.
	press(t, m, "s", "text:dup row", "enter")
	if got := f.done(); len(got) != 1 || got[0] != "skip tenant-7 #48211 dup row" {
		t.Fatalf("actions = %v", got)
	}
	if !m.keyOpen {
		t.Fatal("the action closed the key view")
	}
	// Another key, flowing, with a dead letter: replay it in bulk.
	press(t, m, "/", "text:hooli", "enter")
	if m.keyv.info.State != partitionq.KeyFlowing || m.keyv.info.PendingDeadLetters != 1 {
		t.Fatalf("hooli = %+v, want flowing with 1 pending dead letter", m.keyv.info)
	}
	press(t, m, "R")
	if !m.confirmOpen || m.confirm.req.kind != actReplayMany || !m.confirm.loaded || m.confirm.bulk.Count != 1 {
		t.Fatalf("R: confirm open %v, req %+v, dry run %+v", m.confirmOpen, m.confirm.req, m.confirm.bulk)
	}
	press(t, m, "text:fixed", "enter")
	if got := f.done(); len(got) != 2 || got[1] != `replay key="hooli" pending (true) fixed` {
		t.Fatalf("actions = %q", got)
	}
	if !strings.Contains(m.flash.text, "✓ Replayed 1 dead letter (key=hooli pending) in event order · audit entry 4") {
		t.Fatalf("result line %q", m.flash.text)
	}
	// An invalid key is the view's error, not the database's.
	press(t, m, "/", "text:"+strings.Repeat("k", partitionq.MaxKeyLen+1), "enter")
	if m.keyv.err == nil || m.ref.err != nil || !strings.Contains(m.View(), "more than 512") {
		t.Fatalf("a key too long: view error %v, refresh error %v\n%s", m.keyv.err, m.ref.err, m.View())
	}
	press(t, m, "esc")
	if m.keyOpen {
		t.Fatal("esc did not close the key view")
	}
	press(t, m, "/", "esc")
	if m.keyOpen {
		t.Fatal("esc in an empty prompt did not close it")
	}
}

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
