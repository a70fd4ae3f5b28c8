package tui

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/partitionq/partitionq/partitionq"
)

// TestViews pins each view as a golden file at 80x24 and 120x40.
func TestViews(t *testing.T) {
	type step = []tea.Msg
	cases := []struct {
		name    string
		opts    Options
		keys    step
		away    bool                    // the database stops answering after the keys
		blocked []partitionq.BlockedKey // other blocked keys than the incident's
	}{
		{name: "slots"},
		{name: "slots_sorted_by_lag", keys: step{keyMsg("o"), keyMsg("down")}},
		{name: "blocked", keys: step{keyMsg("2")}},
		{name: "blocked_filter", keys: append(step{keyMsg("2"), keyMsg("f")}, typeText("billing")...)},
		{name: "key_detail", keys: step{keyMsg("2"), keyMsg("enter")}},
		{name: "confirm_skip", keys: append(step{keyMsg("2"), keyMsg("s")}, typeText("dup row, fixed by hand")...)},
		{name: "confirm_quarantine", keys: step{keyMsg("2"), keyMsg("Q")}},
		{name: "dead_letters", keys: step{keyMsg("3")}},
		{name: "dead_letter_detail", keys: step{keyMsg("3"), keyMsg("enter")}},
		{name: "audit", keys: step{keyMsg("4")}},
		{name: "hot_keys", keys: step{keyMsg("5")}},
		{name: "read_only_blocked", opts: Options{ReadOnly: true}, keys: step{keyMsg("2")}},
		{name: "help", keys: step{keyMsg("?")}},
		{name: "dead_letters_all", keys: step{keyMsg("3"), keyMsg("a")}},
		{name: "database_away", away: true},
		// Untrusted text that would break rows and the frame, and a key
		// that drains.
		{name: "hostile_blocked", keys: step{keyMsg("2")}, blocked: hostileBlocked()},
		{name: "hostile_key_detail", keys: step{keyMsg("2"), keyMsg("enter")}, blocked: hostileBlocked()},
		{name: "hostile_confirm_skip", keys: step{keyMsg("2"), keyMsg("s")}, blocked: hostileBlocked()},
		{name: "draining_key_detail", keys: step{keyMsg("2"), keyMsg("G"), keyMsg("enter")}, blocked: hostileBlocked()},
		{name: "draining_confirm_skip", keys: step{keyMsg("2"), keyMsg("G"), keyMsg("s")}, blocked: hostileBlocked()},
		// Issue 14: every group, find a key, dead letters in bulk.
		{name: "groups", opts: Options{Queue: everyGroup}, keys: step{keyMsg("down")}},
		{name: "find_key_prompt", keys: append(step{keyMsg("/")}, typeText("tenant-7")...)},
		{name: "find_key_blocked", keys: append(append(step{keyMsg("/")}, typeText("tenant-7")...), keyMsg("enter"))},
		{name: "find_key_flowing", keys: append(append(step{keyMsg("/")}, typeText("hooli")...), keyMsg("enter"))},
		{name: "dead_letters_filter", keys: append(append(step{keyMsg("3"), keyMsg("a"), keyMsg("f")}, typeText("reason=skip")...), keyMsg("enter"))},
		{name: "confirm_bulk_replay", keys: append(step{keyMsg("3"), keyMsg("R")}, typeText("billing is back")...)},
		{name: "confirm_bulk_purge", keys: append(append(append(step{keyMsg("3"), keyMsg("a"), keyMsg("f")}, typeText("key=tenant-9")...), keyMsg("enter"), keyMsg("P")), typeText("tenant gone")...)},
	}
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		for _, c := range cases {
			name := fmt.Sprintf("%s_%dx%d", c.name, size[0], size[1])
			t.Run(name, func(t *testing.T) {
				blocked := c.blocked
				if blocked == nil {
					blocked = incidentBlocked()
				}
				m := incidentModelWith(t, c.opts, size[0], size[1], blocked)
				for _, k := range c.keys {
					drive(t, m, k)
				}
				// One more refresh with what the view asks for now.
				m.Update(snapWith(0, m.plan(), blocked))
				if c.away {
					for i := range 4 {
						m.Update(snapshotMsg{at: base.Add(time.Duration(1+i) * time.Second),
							err: errors.New(`failed to connect to host=db.internal user=indexer database=files: dial tcp 10.0.3.2:5432: connect: connection refused`)})
					}
				}
				view := m.View()
				checkFrame(t, view, size[0], size[1])
				golden(t, name, view)
			})
		}
	}
}

// TestOddSizes renders every view at sizes from tiny to huge: no panic,
// and the frame is always exactly the terminal's size.
func TestOddSizes(t *testing.T) {
	t.Parallel()
	for _, size := range [][2]int{{1, 1}, {20, 5}, {40, 10}, {80, 12}, {200, 60}} {
		for _, keys := range [][]string{{}, {"2"}, {"2", "enter"}, {"2", "s"}, {"3"}, {"3", "enter"}, {"4"}, {"?"},
			{"/", "text:tenant-7", "enter"}, {"/"}, {"3", "R"}, {"3", "f"}, {"0"}} {
			m := incidentModel(t, Options{}, size[0], size[1])
			press(t, m, keys...)
			checkFrame(t, m.View(), size[0], size[1])
		}
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
