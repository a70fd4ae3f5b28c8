package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

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
