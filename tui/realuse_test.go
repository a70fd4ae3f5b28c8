package tui

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/term"

	"github.com/partitionq/partitionq/partitionq"
)

// The console under real use (issue 13): what an operator on a laggy link,
// with hostile keys and a fresh worker, sees and does.

// Finding 4: several characters that arrive in one read come as one key
// message (tmux send-keys -l jjjj, a held key, a laggy SSH link); each
// is a key of its own.
func TestKeysTypedFastAreEachAKey(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{})
	drive(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("31")})
	if m.active != tabSlots || !m.dead.have {
		t.Fatalf(`"31" in one message: tab %d (dead letters read: %v); want the dead letters read, then the slots`, m.active, m.dead.have)
	}
	drive(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2jj")})
	if m.active != tabBlocked || m.blocked.cursor != 2 {
		t.Fatalf(`"2jj" in one message: tab %d, cursor %d; want the blocked keys, third row`, m.active, m.blocked.cursor)
	}
	drive(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("kk")})
	if m.blocked.cursor != 0 {
		t.Fatalf(`"kk": cursor %d, want 0`, m.blocked.cursor)
	}
	// A key that opens a text input hands it the rest: "fbill" filters.
	drive(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("fbill")})
	if !m.blocked.filtering || m.blocked.filter.Value() != "bill" || len(m.blocked.rows) != 1 {
		t.Fatalf(`"fbill": filtering %v, filter %q, %d rows`, m.blocked.filtering, m.blocked.filter.Value(), len(m.blocked.rows))
	}
	// Typed fast into the reason, "qq" is text, not quit.
	press(t, m, "esc", "s")
	if seen, _ := drive(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("qq fast")}); quits(seen) || m.confirm.reason.Value() != "qq fast" {
		t.Fatalf("typing fast into the reason: quit %v, reason %q", quits(seen), m.confirm.reason.Value())
	}
	if len(f.done()) != 0 {
		t.Fatalf("actions: %q", f.done())
	}
}

// Finding 3: a key with a newline (and escapes in its type and error)
// stays on its row, the frame keeps its size in every view, and the result
// line stays one line.
func TestHostileKeysKeepTheFrame(t *testing.T) {
	t.Parallel()
	for _, size := range [][2]int{{80, 24}, {120, 40}, {60, 15}} {
		for _, keys := range [][]string{{"2"}, {"2", "enter"}, {"2", "s"}, {"2", "Q"}, {"1"}, {"2", "G", "enter"}} {
			m := incidentModelWith(t, Options{}, size[0], size[1], hostileBlocked())
			press(t, m, keys...)
			m.Update(snapWith(0, m.plan(), hostileBlocked()))
			v := m.View()
			checkFrame(t, v, size[0], size[1])
			if strings.ContainsAny(v, "\x1b\t\r") || strings.Contains(v, "multi\nline") {
				t.Fatalf("%dx%d after %v: the view writes an untrusted text raw:\n%s", size[0], size[1], keys, v)
			}
		}
	}
	// The result of a skip of that key: one line, with its time.
	m, f := setup(t, Options{})
	f.mu.Lock()
	f.blocked = hostileBlocked()
	f.result = partitionq.ActionResult{Outcome: partitionq.OutcomeSkipped, EventID: 48211, Count: 1}
	f.mu.Unlock()
	press(t, m, "ctrl+r", "2", "s", "text:corrupt", "enter")
	if got := f.done(); len(got) != 1 || got[0] != "skip multi\nline\nkey #48211 corrupt" {
		t.Fatalf("actions %q: want a skip of the key as it is, not as shown", got)
	}
	v := m.View()
	checkFrame(t, v, 100, 30)
	if !strings.Contains(v, `03:12:00 ✓ Skipped event #48211 of key multi\nline\nkey`) {
		t.Fatalf("the result line:\n%s", v)
	}
}

// The result line says when the library answered, and goes after FlashFor.
func TestResultLineExpires(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{})
	f.result = partitionq.ActionResult{Outcome: partitionq.OutcomeRetryScheduled, EventID: 48211}
	press(t, m, "2", "r")
	want := "03:12:00 ✓ Retry of event #48211 (key tenant-7) brought forward"
	if !strings.Contains(m.View(), want) {
		t.Fatalf("the result line lacks %q:\n%s", want, m.View())
	}
	m.Update(snap(FlashFor-time.Second, m.plan()))
	if !strings.Contains(m.View(), want) {
		t.Fatal("the result line went before FlashFor")
	}
	m.Update(snap(FlashFor, m.plan()))
	if strings.Contains(m.View(), "Retry of event") {
		t.Fatalf("the result line is still there after %s:\n%s", FlashFor, m.View())
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

// Finding 5: a group that does not exist is an empty state, not an error:
// the console says how to create it, keeps looking, and shows it once it
// is there.
func TestMissingGroupKeepsLooking(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.err = fmt.Errorf("%w %q on queue %q: run partitionq setup (Client.Setup) first", partitionq.ErrNoSuchGroup, "nosuch", "files")
	m := newTestModel(t, f, Options{Queue: "files", Group: "nosuch"})
	drive(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	_, ticks := drive(t, m, m.Init()())
	v := m.View()
	if !strings.Contains(v, `No consumer group "nosuch" on queue "files"`) || !strings.Contains(v, "partitionq setup --queue files --group nosuch") ||
		!strings.Contains(v, "keeps looking") || strings.Contains(v, "Client.Setup") {
		t.Fatalf("no such group:\n%s", v)
	}
	if len(ticks) != 1 || ticks[0].d != RefreshDefault {
		t.Fatalf("ticks %+v: want the next look armed at the normal pace", ticks)
	}
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	drive(t, m, ticks[0].msg)
	if v := m.View(); strings.Contains(v, "No consumer group") || !strings.Contains(v, "● live") {
		t.Fatalf("once the group exists:\n%s", v)
	}
}

// Finding 1 in the console: a draining key says so; retry now does not
// pretend to do anything, and a skip names the event the operator saw.
func TestDrainingKeyInTheConsole(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{})
	f.mu.Lock()
	f.blocked = hostileBlocked()
	f.result = partitionq.ActionResult{Outcome: partitionq.OutcomeSkipped, EventID: 48990, Count: 1}
	f.mu.Unlock()
	press(t, m, "ctrl+r", "2", "G")
	if b, _ := m.blocked.selected(); b.Key != "tenant-9" || b.State != partitionq.KeyDraining {
		t.Fatalf("selected %+v, want the draining tenant-9", b)
	}
	if v := m.View(); !strings.Contains(v, "1 draining") || !strings.Contains(v, "draining (never failed)") || !strings.Contains(v, "Blocked keys (3)") {
		t.Fatalf("the inbox does not show tenant-9 as draining:\n%s", v)
	}
	press(t, m, "r")
	if len(f.done()) != 0 || !strings.Contains(m.flash.text, "is draining") {
		t.Fatalf("retry now of a draining key: actions %q, flash %q", f.done(), m.flash.text)
	}
	press(t, m, "s")
	if v := m.View(); !strings.Contains(v, "never failed") {
		t.Fatalf("the skip confirmation does not say the event never failed:\n%s", v)
	}
	press(t, m, "text:stale", "enter")
	if got := f.done(); len(got) != 1 || got[0] != "skip tenant-9 #48990 stale" {
		t.Fatalf("actions %q: want a skip naming event 48990", got)
	}
}

// Without a terminal Run says so; it failed with "error creating
// cancelreader ... epoll".
func TestRunNeedsATerminal(t *testing.T) {
	t.Parallel()
	if term.IsTerminal(os.Stdin.Fd()) && term.IsTerminal(os.Stdout.Fd()) {
		t.Skip("the test runs in a terminal")
	}
	err := Run(t.Context(), &partitionq.Client{}, Options{Queue: "files", Group: "indexer"})
	if !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "must be a terminal") {
		t.Fatalf("Run without a terminal: %v", err)
	}
}

// Issue 28: the key under the blocked keys' cursor resolves (its retry
// succeeded) and leaves the list: the cursor rests on its neighbour, and
// the next s does not open a skip of that other key; it says what
// happened, and a second s (or a move first) acts on the key now shown.
func TestBlockedCursorOnAResolvedKeyHandsNoKeystrokeOn(t *testing.T) {
	t.Parallel()
	m := incidentModel(t, Options{}, 100, 30)
	press(t, m, "2")
	first, ok := m.blocked.selected()
	if !ok {
		t.Fatal("no blocked key selected")
	}
	var rest []partitionq.BlockedKey
	for _, b := range incidentBlocked() {
		if b.Key != first.Key {
			rest = append(rest, b)
		}
	}
	m.Update(snapWith(time.Second, m.plan(), rest))
	next, _ := m.blocked.selected()
	if v := m.View(); !strings.Contains(v, "Key "+first.Key+" was resolved and left the list; ▸ is on "+next.Key+" now") {
		t.Fatalf("the view does not say the key under the cursor left:\n%s", v)
	}
	press(t, m, "s")
	if m.confirmOpen {
		t.Fatalf("s after %s resolved opened a confirmation for %s", first.Key, next.Key)
	}
	press(t, m, "s")
	if !m.confirmOpen || m.confirm.req.key.Key != next.Key {
		t.Fatalf("a second s: confirm open %v for %q, want %s", m.confirmOpen, m.confirm.req.key.Key, next.Key)
	}
}
