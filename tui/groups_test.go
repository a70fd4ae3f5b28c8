package tui

import (
	"strings"
	"testing"
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
