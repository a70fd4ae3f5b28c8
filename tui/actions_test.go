package tui

import (
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// rowOf is action a's row of partitionq's table.
func rowOf(t testing.TB, a partitionq.AuditAction) partitionq.AuditActionInfo {
	t.Helper()
	r, ok := a.Info()
	if !ok {
		t.Fatalf("%s is not in partitionq's table of actions", a)
	}
	return r
}

// The blocked keys, key detail and key views offer the actions on a key's
// head that partitionq's table lists, with its keys and names, in its
// order, and each key asks for its row: the console has no list of its
// own. What the console does with a row (TestGenericKeyAction) needs
// nothing but the row, so a row added to the table works in all three.
func TestKeyActionsComeFromTheTable(t *testing.T) {
	t.Parallel()
	var want []string
	var rows []partitionq.AuditActionInfo
	for _, r := range partitionq.AuditActions() {
		if r.On == partitionq.TargetKeyHead && r.Key != "" {
			want = append(want, r.Key+" "+r.Name)
			rows = append(rows, r)
		}
	}
	if !slices.Equal(want, []string{"s skip", "r retry now", "Q quarantine"}) {
		t.Errorf("the table's key actions = %q", want)
	}
	views := map[string]keyActions{"blocked": newBlockedKeys(false).Acts, "detail": newDetailKeys(false).Acts, "find": newFindKeys(false).Acts}
	b := incidentBlocked()[0]
	for name, acts := range views {
		var got []string
		for _, b := range acts.bindings() {
			got = append(got, b.Help().Key+" "+b.Help().Desc)
			if !b.Enabled() {
				t.Errorf("%s: %s disabled", name, b.Help().Desc)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s view offers %q, want %q", name, got, want)
		}
		for _, r := range rows {
			var req actionRequest
			switch msg := acts.request(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(r.Key)}, b)().(type) {
			case confirmMsg:
				req = msg.req
				if !r.Confirm && !r.ReasonRequired {
					t.Errorf("%s view: %s confirms first, its row says not to", name, r.Action)
				}
			case runActionMsg:
				req = msg.req
				if r.Confirm || r.ReasonRequired {
					t.Errorf("%s view: %s runs at once, its row says to confirm or ask for a reason", name, r.Action)
				}
			default:
				t.Fatalf("%s view: %s gives %T", name, r.Action, msg)
			}
			if req.kind != actKeyHead || req.row.Action != r.Action || req.key.Key != b.Key || req.verb() != r.Name {
				t.Errorf("%s view: %s asks for %+v", name, r.Action, req)
			}
		}
	}
	for _, b := range newBlockedKeys(true).Acts.bindings() {
		if b.Enabled() {
			t.Errorf("read-only: %s enabled", b.Help().Desc)
		}
	}
}

// An action on a key's head that the console has no words of its own for
// is offered from its row alone: the confirm dialog, the pending text and
// the result line are built from the row and the library's answer, and
// whether the key leaves the list is the row's Resolves. The row here is
// made in the test (the table's rows all have their own words), as one
// added to partitionq's table would be.
func TestGenericKeyAction(t *testing.T) {
	t.Parallel()
	for _, resolves := range []bool{false, true} {
		m, f := setup(t, Options{Actor: "alice"})
		row := partitionq.AuditActionInfo{Action: "nudge", Name: "nudge", Command: "nudge", On: partitionq.TargetKeyHead,
			Summary: "Nudge a blocked key's head", Confirm: true, Resolves: resolves, PreviewWaiting: true, Key: "n"}
		press(t, m, "2", "enter")
		b := m.detail.key
		f.result = partitionq.ActionResult{Outcome: "nudged", EventID: b.Head.ID, Count: 3}
		drive(t, m, keyActions{{Binding: key.NewBinding(key.WithKeys(row.Key)), info: row}}.request(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("n")}, b)())
		if !m.confirmOpen || !m.confirm.loaded {
			t.Fatalf("n: confirm open %v, preview loaded %v", m.confirmOpen, m.confirm.loaded)
		}
		v := m.View()
		for _, s := range []string{"Nudge event #48211 of key tenant-7?", "Nudge a blocked key's head.", "#48300 FileUpdated", "Reason:", "enter: nudge"} {
			if !strings.Contains(v, s) {
				t.Errorf("the confirm dialog does not say %q:\n%s", s, v)
			}
		}
		if got := pendingText(m.confirm.req); got != "… nudge: key tenant-7, event #48211" {
			t.Errorf("pending text %q", got)
		}
		for _, k := range typeText("why not") {
			drive(t, m, k)
		}
		press(t, m, "enter")
		if got := f.done(); !slices.Equal(got, []string{"nudge tenant-7 #48211 why not"}) {
			t.Fatalf("actions done: %q", got)
		}
		if m.flash.sev != sevOK || m.flash.text != "✓ Nudge: event #48211 of key tenant-7, nudged (3 events)" {
			t.Errorf("result line %v %q", m.flash.sev, m.flash.text)
		}
		if m.detailOpen == resolves || (m.blocked.resolvedHere == "tenant-7") != resolves {
			t.Errorf("Resolves %v: detail open %v, resolved here %q", resolves, m.detailOpen, m.blocked.resolvedHere)
		}
	}
}
