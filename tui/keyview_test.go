package tui

import (
	"slices"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

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
