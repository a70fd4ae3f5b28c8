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
