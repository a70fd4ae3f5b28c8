package tui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/partitionq/partitionq/partitionq"
)

// A resize in flight shows on the slots tab: the summary says from what to
// what and how far, the old slots are listed as "slot/N" draining to the
// cutover or handing off, a new slot waiting for its parents says so, and
// the "why" panel explains the selected slot's part.
func TestSlotsShowAResize(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, newFake(), Options{})
	drive(t, m, tea.WindowSizeMsg{Width: 120, Height: 40})
	st := incidentStatus(0)
	st.Resize = &partitionq.ResizeState{From: 2, To: 4, Generation: 2, StartedAt: base.Add(-time.Second), StartedBy: "postgres",
		Cutover: 812, Remaining: []int{1}}
	for i := range st.SlotStatus {
		s := &st.SlotStatus[i]
		s.Slots = 4
		s.Resize = &partitionq.SlotResize{Parents: []int{s.Slot % 2}}
		if s.Slot%2 == 1 {
			s.Resize.Waiting = []int{1}
		}
	}
	st.SlotStatus = append(st.SlotStatus, partitionq.SlotStatus{Slot: 1, Slots: 2, Consumer: "indexer#1/2",
		Owner: st.SlotStatus[0].Owner, Lag: 50 * time.Millisecond, Resize: &partitionq.SlotResize{Old: true, AtCutover: true}})
	drive(t, m, snapshotMsg{at: base, status: st, blocked: incidentBlocked()})
	v := m.View()
	for _, want := range []string{"resizing 2→4: 1 old slot to hand off", "1/2", "handoff", "waits"} {
		if !strings.Contains(v, want) {
			t.Errorf("the slots tab during a resize misses %q:\n%s", want, v)
		}
	}
	press(t, m, "down") // from the worst slot (2) to new slot 3, waiting for old slot 1
	if v := m.View(); !strings.Contains(v, "new slot 3 takes keys from old slot 1; it starts once slot 1 is handed off") {
		t.Errorf("the why panel of a waiting new slot:\n%s", v)
	}
}

// The slots cursor opens on the worst slot, then stays where it is: it
// jumped to the "worst" slot on every refresh.
func TestSlotsCursorStaysOnRefresh(t *testing.T) {
	t.Parallel()
	m := incidentModel(t, Options{}, 100, 30)
	if got := m.slots.selectedSlot(); got != 2 {
		t.Fatalf("opens on slot %d, want the stalled slot 2", got)
	}
	// Slot 2 recovers and slot 0 becomes the worst: the selection stays.
	st := incidentStatus(time.Second)
	st.SlotStatus[2].Lag, st.SlotStatus[2].LastSeen, st.SlotStatus[2].QueuePending = time.Second, time.Second, 0
	st.SlotStatus[0].Owner = nil
	st.SlotStatus[0].Lag = 10 * time.Minute
	m.Update(snapshotMsg{at: base.Add(time.Second), status: st, blocked: incidentBlocked()})
	if got := m.slots.selectedSlot(); got != 2 {
		t.Fatalf("after a refresh the selection moved to slot %d, want it kept on 2", got)
	}
	press(t, m, "up")
	m.Update(snap(2*time.Second, m.plan()))
	if got := m.slots.selectedSlot(); got != 1 {
		t.Fatalf("after up and a refresh: slot %d, want 1", got)
	}
}

// A worker that has just started has not claimed its slots when the
// console first looks: no "4 without owner" in red before it had a chance.
func TestFreshSlotsWithoutOwnerAreNotAlarms(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.blocked = nil
	fresh := func() partitionq.GroupStatus {
		st := incidentStatus(0)
		for i := range st.SlotStatus {
			s := &st.SlotStatus[i]
			s.Owner, s.Lag, s.LastSeen, s.QueuePending, s.BlockedKeys, s.SetAside, s.InBatch = nil, 3*time.Minute, 3*time.Minute, 40, 0, 0, false
		}
		return st
	}
	f.status = fresh
	m := newTestModel(t, f, Options{})
	drive(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	drive(t, m, snapshotMsg{at: base, status: fresh()})
	v := m.View()
	if strings.Contains(v, "without owner") || strings.Contains(v, "NO OWNER") || strings.Contains(v, "\n!") || !strings.Contains(v, "4 not owned yet") {
		t.Fatalf("the first screen calls slots a worker is claiming an alarm:\n%s", v)
	}
	drive(t, m, snapshotMsg{at: base.Add(OwnerGrace - time.Second), status: fresh()})
	if strings.Contains(m.View(), "without owner") {
		t.Fatal("without owner before OwnerGrace")
	}
	drive(t, m, snapshotMsg{at: base.Add(OwnerGrace), status: fresh()})
	if v := m.View(); !strings.Contains(v, "4 without owner") || !strings.Contains(v, "NO OWNER") {
		t.Fatalf("after %s without owner the slots are not called out:\n%s", OwnerGrace, v)
	}
}
