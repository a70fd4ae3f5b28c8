package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// press drives m with key names and typed text ("text:..." types it).
func press(t *testing.T, m *Model, keys ...string) (seen []tea.Msg, ticks []armedTick) {
	t.Helper()
	for _, k := range keys {
		var msgs []tea.Msg
		if s, ok := strings.CutPrefix(k, "text:"); ok {
			msgs = typeText(s)
		} else {
			msgs = []tea.Msg{keyMsg(k)}
		}
		for _, msg := range msgs {
			s, tk := drive(t, m, msg)
			seen, ticks = append(seen, s...), append(ticks, tk...)
		}
	}
	return seen, ticks
}

func quits(seen []tea.Msg) bool {
	for _, m := range seen {
		if _, ok := m.(tea.QuitMsg); ok {
			return true
		}
	}
	return false
}

func setup(t *testing.T, opts Options) (*Model, *fakeClient) {
	t.Helper()
	f := newFake()
	m := newTestModel(t, f, opts)
	drive(t, m, tea.WindowSizeMsg{Width: 100, Height: 30})
	drive(t, m, m.Init()())
	return m, f
}

func TestNavigation(t *testing.T) {
	t.Parallel()
	m, _ := setup(t, Options{})
	if m.active != tabSlots || m.slots.selectedSlot() != 2 {
		t.Fatalf("starts on tab %d, slot %d; want the slots tab on the stalled slot 2", m.active, m.slots.selectedSlot())
	}
	press(t, m, "2")
	if m.active != tabBlocked {
		t.Fatalf("2: tab %d, want blocked", m.active)
	}
	press(t, m, "tab", "tab")
	if m.active != tabAudit {
		t.Fatalf("tab tab: tab %d, want audit", m.active)
	}
	if !m.audit.have || len(m.audit.entries) != 3 {
		t.Fatalf("the audit tab read no entries: %v", m.audit.entries)
	}
	drive(t, m, tea.KeyMsg{Type: tea.KeyShiftTab})
	if m.active != tabDead || !m.dead.have {
		t.Fatalf("shift+tab: tab %d (dead letters read: %v), want dead letters", m.active, m.dead.have)
	}
	press(t, m, "1", "up") // slot 1, which has blocked keys
	press(t, m, "enter")
	if m.active != tabBlocked || m.blocked.filter.Value() != "slot:1" || len(m.blocked.rows) != 2 {
		t.Fatalf("enter on slot 1: tab %d, filter %q, %d rows; want the 2 blocked keys of slot 1", m.active, m.blocked.filter.Value(), len(m.blocked.rows))
	}
	press(t, m, "down", "enter")
	if !m.detailOpen || m.detail.key.Key != "tenant-42" {
		t.Fatalf("enter: detail open %v on %q, want tenant-42", m.detailOpen, m.detail.key.Key)
	}
	if !m.detail.loaded {
		t.Fatal("opening the detail did not read the key's waiting events")
	}
	press(t, m, "esc")
	if m.detailOpen {
		t.Fatal("esc did not close the detail")
	}
	if seen, _ := press(t, m, "q"); !quits(seen) {
		t.Fatal("q did not quit")
	}
}

func TestFilterAndSort(t *testing.T) {
	t.Parallel()
	m, _ := setup(t, Options{})
	press(t, m, "2", "f", "text:BILLING")
	if !m.blocked.filtering || len(m.blocked.rows) != 1 || m.blocked.rows[0].Key != "tenant-42" {
		t.Fatalf("filter billing: %d rows, want tenant-42 (its error mentions billing)", len(m.blocked.rows))
	}
	if seen, _ := press(t, m, "q"); quits(seen) {
		t.Fatal("q typed into the filter quit the console")
	}
	press(t, m, "backspace", "enter")
	if m.blocked.filtering || m.blocked.filter.Value() != "BILLING" {
		t.Fatalf("enter: filtering %v, filter %q; want the filter kept and the list focused", m.blocked.filtering, m.blocked.filter.Value())
	}
	press(t, m, "esc")
	if len(m.blocked.rows) != 3 {
		t.Fatalf("esc: %d rows, want the filter cleared", len(m.blocked.rows))
	}
	press(t, m, "o")
	var got []string
	for _, b := range m.blocked.rows {
		got = append(got, b.Key)
	}
	if strings.Join(got, ",") != "tenant-42,tenant-7,globex" {
		t.Fatalf("sorted by backlog: %v", got)
	}
	press(t, m, "1", "o")
	if m.slots.sortBy != byLag || m.slots.selectedSlot() != 2 {
		t.Fatalf("o on slots: sort %s, selection %d; want lag, kept on slot 2", m.slots.sortBy, m.slots.selectedSlot())
	}
}

func TestSkipConfirmation(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{Actor: "alice"})
	f.result = partitionq.ActionResult{Outcome: partitionq.OutcomeSkipped, EventID: 48211, Count: 1, NextIDs: []int64{48300, 48317, 48334, 48351}}
	press(t, m, "2", "enter", "s")
	if !m.confirmOpen || m.confirm.req.action() != partitionq.AuditSkip || m.confirm.req.key.Head.ID != 48211 {
		t.Fatalf("s: confirm open %v for %+v", m.confirmOpen, m.confirm.req)
	}
	if !m.confirm.loaded || len(m.confirm.preview) != PreviewLimit+1 {
		t.Fatalf("the confirmation did not read what runs next: loaded %v, %d events", m.confirm.loaded, len(m.confirm.preview))
	}
	if v := m.View(); !strings.Contains(v, "#48300 FileUpdated") {
		t.Fatalf("the confirmation does not show the next event:\n%s", v)
	}
	press(t, m, "enter")
	if !m.confirmOpen || len(f.done()) != 0 || !strings.Contains(m.View(), "A reason is required") {
		t.Fatal("enter without a reason acted, or did not say a reason is required")
	}
	press(t, m, "text:q dup row", "enter")
	if got := f.done(); len(got) != 1 || got[0] != "skip tenant-7 #48211 q dup row" {
		t.Fatalf("actions: %q, want one skip of the head the operator saw", got)
	}
	if m.confirmOpen || m.detailOpen {
		t.Fatalf("after the skip: confirm open %v, detail open %v; want back to the inbox", m.confirmOpen, m.detailOpen)
	}
	if want := "✓ Skipped event #48211 of key tenant-7 (now a dead letter); next to run: #48300, #48317, #48334, …"; m.flash.text != want {
		t.Fatalf("flash %q, want %q", m.flash.text, want)
	}
}

func TestActionOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		keys   []string
		result partitionq.ActionResult
		replay partitionq.ReplayResult
		err    error
		action string
		flash  string
	}{
		{name: "already resolved", keys: []string{"2", "s", "text:x", "enter"},
			result: partitionq.ActionResult{Outcome: partitionq.OutcomeAlreadyResolved, EventID: 48211, Resolved: &partitionq.Resolution{How: partitionq.ResolvedHandled}},
			action: "skip tenant-7 #48211 x", flash: "• Already resolved: event #48211 of key tenant-7 was handled by a worker; nothing changed"},
		{name: "skipped by someone else", keys: []string{"2", "s", "text:x", "enter"},
			result: partitionq.ActionResult{Outcome: partitionq.OutcomeAlreadyResolved, EventID: 48211, Resolved: &partitionq.Resolution{
				How: partitionq.ResolvedSkipped, Actor: "bob", Reason: "skip: corrupt", At: time.Date(2024, 5, 1, 10, 5, 0, 0, time.Local)}},
			action: "skip tenant-7 #48211 x", flash: "• Already resolved: event #48211 of key tenant-7 was skipped by bob at 10:05:00 (skip: corrupt); nothing changed"},
		{name: "not the head", keys: []string{"2", "s", "text:x", "enter"},
			err:    &partitionq.NotHeadError{Action: "skip", Key: "tenant-7", EventID: 48211, Head: 48300, HeadState: partitionq.KeyBlocked, Why: "event 48211 waits behind the head"},
			action: "skip tenant-7 #48211 x", flash: "✗ skip of key tenant-7 failed: event #48211 is not the head and was never resolved (event 48211 waits behind the head); its head is #48300 now (blocked); nothing changed"},
		{name: "head busy", keys: []string{"2", "s", "text:x", "enter"}, err: fmt.Errorf("wrapped: %w", partitionq.ErrHeadBusy),
			action: "skip tenant-7 #48211 x", flash: "✗ skip of key tenant-7 failed: a worker is handling the head right now; try again in a moment"},
		{name: "not blocked any more", keys: []string{"2", "s", "text:x", "enter"}, err: fmt.Errorf("wrapped: %w", partitionq.ErrNotBlocked),
			action: "skip tenant-7 #48211 x", flash: "✗ skip of key tenant-7 failed: the key is not blocked (any more): nothing of it is set aside and its events run as they arrive; nothing changed (the list drops it at the next refresh)"},
		{name: "retry now", keys: []string{"2", "down", "r"}, result: partitionq.ActionResult{Outcome: partitionq.OutcomeRetryScheduled, EventID: 48877},
			action: "retry tenant-42 #48877 ", flash: "✓ Retry of event #48877 (key tenant-42) brought forward: the worker tries it within a second or so"},
		{name: "quarantine", keys: []string{"2", "Q", "text:tenant deleted", "enter"}, result: partitionq.ActionResult{Outcome: partitionq.OutcomeQuarantined, Count: 15},
			action: "quarantine tenant-7 #48211 tenant deleted", flash: "✓ Quarantined key tenant-7: 15 events moved to the dead letters"},
		{name: "replay", keys: []string{"3", "r", "text:fixed", "enter"}, replay: partitionq.ReplayResult{Outcome: partitionq.OutcomeReplayed, NewEventID: 50001},
			action: "replay 11 fixed", flash: "✓ Replayed dead letter 11 as event #50001"},
		{name: "replayed before", keys: []string{"3", "a", "down", "r", "text:again", "enter"}, replay: partitionq.ReplayResult{Outcome: partitionq.OutcomeAlreadyReplayed, NewEventID: 47001},
			action: "replay 12 again", flash: "• Dead letter 12 was already replayed (event #47001); nothing changed"},
		{name: "cancel", keys: []string{"2", "s", "text:x", "esc"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, f := setup(t, Options{})
			f.result, f.replay, f.actErr = c.result, c.replay, c.err
			press(t, m, c.keys...)
			got := f.done()
			if c.action == "" {
				if len(got) != 0 || m.confirmOpen {
					t.Fatalf("actions %q, confirm open %v; want nothing done and the dialog closed", got, m.confirmOpen)
				}
				return
			}
			if len(got) != 1 || got[0] != c.action {
				t.Fatalf("actions %q, want %q", got, c.action)
			}
			if m.flash.text != c.flash {
				t.Fatalf("flash %q, want %q", m.flash.text, c.flash)
			}
		})
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	m, f := setup(t, Options{ReadOnly: true})
	press(t, m, "2", "s", "r", "Q", "enter", "s", "r", "Q", "esc", "3", "r")
	if got := f.done(); len(got) != 0 || m.confirmOpen {
		t.Fatalf("read-only: actions %q, confirm open %v", got, m.confirmOpen)
	}
	press(t, m, "2")
	for _, word := range []string{"skip", "retry", "quarantine", "replay"} {
		if v := m.View(); strings.Contains(v, word) {
			t.Fatalf("read-only view mentions %q:\n%s", word, v)
		}
	}
}

func TestRefreshLoop(t *testing.T) {
	t.Parallel()
	f := newFake()
	m := newTestModel(t, f, Options{Refresh: 2 * time.Second})
	drive(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	_, ticks := drive(t, m, m.Init()())
	if len(ticks) != 1 || ticks[0].d != 2*time.Second {
		t.Fatalf("after the first refresh: ticks %+v, want one in 2s", ticks)
	}
	next := ticks[0].msg
	// A refresh asked for early makes the armed tick stale.
	press(t, m, "ctrl+r")
	if _, ticks := drive(t, m, next); len(ticks) != 0 {
		t.Fatal("a stale tick refreshed")
	}

	// The database goes away: refreshes fail and back off, the last state stays.
	f.mu.Lock()
	f.err = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	f.mu.Unlock()
	var waits []time.Duration
	next = tickMsg{gen: m.ref.gen}
	for range 6 {
		_, ticks := drive(t, m, next)
		if len(ticks) != 1 {
			t.Fatalf("a failed refresh armed %d ticks, want 1", len(ticks))
		}
		waits = append(waits, ticks[0].d)
		next = ticks[0].msg
	}
	if want := []time.Duration{2, 4, 8, 15, 15, 15}; fmt.Sprint(waits) != fmt.Sprint(scale(want)) {
		t.Fatalf("backoff %v, want %v", waits, scale(want))
	}
	v := m.View()
	for _, want := range []string{"Database unreachable", "DB DOWN · as of 03:12:00", "6 failed refreshes", "connection refused", "STALLED"} {
		if !strings.Contains(v, want) {
			t.Fatalf("while the database is away the view lacks %q:\n%s", want, v)
		}
	}
	// It comes back: one refresh recovers, at the normal pace.
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	_, ticks = drive(t, m, next)
	if len(ticks) != 1 || ticks[0].d != 2*time.Second || m.ref.err != nil {
		t.Fatalf("after recovery: ticks %+v, err %v", ticks, m.ref.err)
	}
	if v := m.View(); strings.Contains(v, "unreachable") || !strings.Contains(v, "● live") {
		t.Fatalf("after recovery the view still says the database is away:\n%s", v)
	}
}

func scale(secs []time.Duration) []time.Duration {
	out := make([]time.Duration, len(secs))
	for i, s := range secs {
		out[i] = s * time.Second
	}
	return out
}

func TestEmptyStates(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, newFake(), Options{})
	drive(t, m, tea.WindowSizeMsg{Width: 80, Height: 24})
	drive(t, m, snapshotMsg{at: base, err: fmt.Errorf("status: %w %q: run partitionq setup first", partitionq.ErrNoSuchQueue, "files")})
	if v := m.View(); !strings.Contains(v, `No queue "files" in this database`) || strings.Contains(v, "UNREACHABLE") {
		t.Fatalf("no such queue:\n%s", v)
	}
	quiet := incidentStatus(0)
	for i := range quiet.SlotStatus {
		s := &quiet.SlotStatus[i]
		s.Owner, s.Lag, s.LastSeen, s.QueuePending, s.Pending, s.BlockedKeys, s.InBatch = &partitionq.Owner{Name: "w", PID: 1}, time.Second, time.Second, 0, 0, 0, false
		s.Rates = partitionq.Rates{}
	}
	quiet.Pending, quiet.Rates = 0, partitionq.Rates{}
	drive(t, m, snapshotMsg{at: base, status: quiet})
	if v := m.View(); !strings.Contains(v, "no traffic") {
		t.Fatalf("no traffic:\n%s", v)
	}
	press(t, m, "2")
	if v := m.View(); !strings.Contains(v, "No blocked keys: every key is flowing.") {
		t.Fatalf("no blocked keys:\n%s", v)
	}
}

func TestDiagnose(t *testing.T) {
	t.Parallel()
	st := incidentStatus(0)
	bl := incidentBlocked()
	cases := []struct {
		slot  int
		state string
		says  string
	}{
		{0, "ok", "Keeping up"},
		{1, "blocked", "2 blocked keys, 59 events waiting behind them"},
		{2, "STALLED", "Owner not advancing"},
		{3, "NO OWNER", "No live owner"},
	}
	in := func(s partitionq.SlotStatus, g partitionq.GroupStatus, keys []partitionq.BlockedKey) slotInput {
		return slotInput{s: s, group: g, keys: keys, at: base, noOwnerFor: time.Hour}
	}
	for _, c := range cases {
		d := diagnose(in(st.SlotStatus[c.slot], st, blockedOf(bl, c.slot)))
		if d.state != c.state || !strings.Contains(fmt.Sprint(d.findings), c.says) {
			t.Errorf("slot %d: %s %v; want %s saying %q", c.slot, d.state, d.findings, c.state, c.says)
		}
	}
	// An owner that advances but is behind: a hot key or a slow handler.
	slow := st.SlotStatus[0]
	slow.Lag, slow.QueuePending = 3*time.Minute, 9000
	if d := diagnose(in(slow, st, nil)); d.state != "behind" || !strings.Contains(fmt.Sprint(d.findings), "hot key") {
		t.Errorf("slow owner: %s %v", d.state, d.findings)
	}
	// A blocked key holding most waiting events is a hot key.
	hot := bl[:1]
	hot[0].Waiting = 5000
	if d := diagnose(in(st.SlotStatus[1], st, hot)); !strings.Contains(fmt.Sprint(d.findings), "Hot key tenant-7 holds 5.0k") {
		t.Errorf("hot blocked key: %v", d.findings)
	}
	// No tick anywhere: the ticker, not the slots.
	idle := incidentStatus(0)
	for i := range idle.SlotStatus {
		idle.SlotStatus[i].Lag, idle.SlotStatus[i].QueuePending, idle.SlotStatus[i].Owner = 10*time.Minute, 0, &partitionq.Owner{Name: "w"}
		idle.SlotStatus[i].LastSeen = 10 * time.Minute
	}
	if d := diagnose(in(idle.SlotStatus[0], idle, nil)); d.state != "no ticks" {
		t.Errorf("no ticks: %s %v", d.state, d.findings)
	}
}

// The sparklines show what successive refreshes showed, spread over
// HistorySpan by time: a slot's pending (the peak of each cell) and its
// handled rate (the mean), blank where the console saw nothing.
func TestHistory(t *testing.T) {
	t.Parallel()
	h := newHistory()
	st := incidentStatus(0)
	if got := h.pendingLine(0, base, 10); got != strings.Repeat(" ", 10) {
		t.Errorf("before any snapshot: %q, want blank", got)
	}
	// Two minutes at one refresh a second: slot 0's backlog climbs, then
	// falls; its rate is steady at 30/s, then 0.
	for i := range 120 {
		at := base.Add(time.Duration(i-119) * time.Second)
		st.SlotStatus[0].Pending = int64(min(i, 120-i) * 10)
		st.SlotStatus[0].Rates.Handled10s = 30
		if i >= 90 {
			st.SlotStatus[0].Rates.Handled10s = 0
		}
		h.add(st, at)
		h.add(st, at) // the same moment again: kept once
	}
	if n := len(h.of(0)); n != 120 {
		t.Errorf("kept %d samples, want 120", n)
	}
	// 10 cells of 30 s: the first 6 (3 minutes before the console started)
	// are blank; each of the others draws its peak (280, 580, 600, 310).
	if got, want := h.pendingLine(0, base, 10), "      ▄██▅"; got != want {
		t.Errorf("pending sparkline %q, want %q", got, want)
	}
	if got, want := h.handledLine(0, base, 10), "      ███▁"; got != want {
		t.Errorf("handled sparkline %q, want %q", got, want)
	}
	// Samples older than HistorySpan are dropped.
	h.add(st, base.Add(HistorySpan-time.Minute))
	if n := len(h.of(0)); n != 61 {
		t.Errorf("%s later: %d samples kept, want the last minute's 60 and the new one", HistorySpan-time.Minute, n)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Group: "g"}, {Queue: "q"}, {Queue: "q", Group: "g", Refresh: time.Millisecond}, {Queue: "bad name", Group: "g"}} {
		if _, err := NewModel(t.Context(), newFake(), o); !errors.Is(err, partitionq.ErrInvalid) {
			t.Errorf("NewModel(%+v): %v, want ErrInvalid", o, err)
		}
	}
	m, err := NewModel(t.Context(), newFake(), Options{Queue: "q", Group: "g"})
	if err != nil || m.sh.refresh != RefreshDefault {
		t.Fatalf("defaults: %v, refresh %v", err, m.sh.refresh)
	}
}

func TestConsoleAgainstDatabase(t *testing.T) {
	t.Parallel()
	b := setupDB(t)
	p := b.startWorker(t)
	b.sendIncident(t)
	m := realModel(t, b.client)
	drive(t, m, m.Init()())
	refreshUntil(t, m, 30*time.Second, "tenant-7 blocked, seen by the console", func() bool {
		return len(m.last.blocked) == 1 && m.last.blocked[0].Head.Attempts >= 1
	})
	if m.last.status.Slots != 2 || len(m.last.status.SlotStatus) != 2 {
		t.Fatalf("status: %+v", m.last.status)
	}

	press(t, m, "2", "s")
	if !m.confirmOpen || !m.confirm.loaded || len(m.confirm.preview) != 3 {
		t.Fatalf("confirm: open %v, loaded %v, preview %+v; want the head and 2 waiting events", m.confirmOpen, m.confirm.loaded, m.confirm.preview)
	}
	if v := m.View(); !strings.Contains(v, `{"seq":2}`) || !strings.Contains(v, `{"seq":3}`) {
		t.Fatalf("the confirmation does not preview the waiting events:\n%s", v)
	}
	press(t, m, "text:poison invoice", "enter")
	if !strings.HasPrefix(m.flash.text, "✓ Skipped event #") {
		t.Fatalf("flash after skip: %q", m.flash.text)
	}
	pgtest.WaitFor(t, 30*time.Second, "the waiting events of tenant-7 handled", func() (bool, error) {
		var seqs []string
		for _, h := range p.got() {
			if k, payload, _ := strings.Cut(h, " "); k == "tenant-7" {
				seqs = append(seqs, payload)
			}
		}
		return strings.Join(seqs, ",") == `{"seq":2},{"seq":3}`, nil
	})
	refreshUntil(t, m, 10*time.Second, "the key gone from the inbox", func() bool { return len(m.blocked.rows) == 0 })

	// The same skip again: the library says it was already resolved.
	drive(t, m, runActionMsg{req: actionRequest{kind: actKeyHead, row: rowOf(t, partitionq.AuditSkip), key: partitionq.BlockedKey{Key: "tenant-7", Head: partitionq.HeadEvent{ID: m.confirm.req.key.Head.ID}}, reason: "again"}})
	if !strings.HasPrefix(m.flash.text, "• Already resolved") {
		t.Fatalf("flash after a second skip: %q", m.flash.text)
	}

	press(t, m, "4")
	if len(m.audit.entries) != 2 || m.audit.entries[1].Action != "skip" || m.audit.entries[1].Reason != "poison invoice" || m.audit.entries[1].Actor != "tester" {
		t.Fatalf("audit: %+v", m.audit.entries)
	}
	press(t, m, "3")
	if len(m.dead.list) != 1 || m.dead.list[0].Key != "tenant-7" {
		t.Fatalf("dead letters: %+v", m.dead.list)
	}
	press(t, m, "enter")
	if v := m.View(); !strings.Contains(v, `"poison": true`) {
		t.Fatalf("dead letter detail without its pretty payload:\n%s", v)
	}
	press(t, m, "r", "text:replay check", "enter")
	if !strings.HasPrefix(m.flash.text, "✓ Replayed dead letter") {
		t.Fatalf("flash after replay: %q", m.flash.text)
	}
}

// downBound is how soon after the database goes away a refresh must show
// it: the refresh deadline, and scheduling slack on a busy machine.
const downBound = RefreshTimeoutDefault + time.Second

// proxied is a client of b's database through a proxy, its connection
// string the suite's with host and port moved to the proxy and sslmode set
// to sslmode.
func proxied(t *testing.T, b *dbBundle, sslmode string) (*partitionq.Client, *netproxy.Proxy) {
	t.Helper()
	px, url := netproxy.Front(t, b.db.URL, "sslmode", sslmode)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{EngineSchema: b.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return c, px
}

// refreshDown refreshes m once and fails unless the refresh failed within
// downBound and the console says the database is down.
func refreshDown(t *testing.T, m *Model, failures int) []armedTick {
	t.Helper()
	start := time.Now()
	_, ticks := drive(t, m, refreshNowMsg{})
	if took := time.Since(start); took > downBound {
		t.Errorf("refresh %d after the database went away took %s; the bound is %s", failures, took.Round(time.Millisecond), downBound)
	}
	if m.ref.err == nil || m.ref.failures != failures {
		t.Fatalf("after refresh %d: %d failures, err %v; want %d failures", failures, m.ref.failures, m.ref.err, failures)
	}
	if v := m.View(); !strings.Contains(v, "DB DOWN") || !strings.Contains(v, "Database unreachable") {
		t.Fatalf("the view does not say the database is away:\n%s", v)
	}
	return ticks
}

// The console sees a lost database within the refresh deadline, whether
// the connection is refused, frozen (a network partition: nothing answers,
// nothing closes) or frozen while pgx connects (under sslmode=prefer the
// TLS attempt then waits, and the attempt without TLS after it): each
// refresh fails by its deadline and the next one does not wait for it.
func TestDatabaseGoesAway(t *testing.T) {
	t.Parallel()
	b := setupDB(t)
	for _, c := range []struct {
		name    string
		cut     func(*netproxy.Proxy)
		recover bool
	}{
		{"refused", func(px *netproxy.Proxy) { px.Close() }, false},
		{"frozen", (*netproxy.Proxy).Freeze, true},
		{"frozen while connecting", func(px *netproxy.Proxy) { px.DropAll(); px.Freeze() }, true},
	} {
		for _, sslmode := range []string{"prefer", "disable"} {
			t.Run(c.name+"/sslmode="+sslmode, func(t *testing.T) {
				t.Parallel()
				client, px := proxied(t, b, sslmode)
				m := realModel(t, client)
				drive(t, m, m.Init()())
				if m.ref.err != nil || m.last.status.Slots != 2 {
					t.Fatalf("first refresh: %v", m.ref.err)
				}

				c.cut(px)
				refreshDown(t, m, 1)
				ticks := refreshDown(t, m, 2)
				if len(ticks) != 1 || ticks[0].d <= m.sh.refresh {
					t.Fatalf("after %d failures the next refresh is armed in %+v; want a backoff", m.ref.failures, ticks)
				}
				if !c.recover {
					return
				}
				px.Resume()
				refreshUntil(t, m, 30*time.Second, "the console to recover", func() bool { return m.ref.err == nil })
				if v := m.View(); strings.Contains(v, "unreachable") || !strings.Contains(v, "● live") {
					t.Fatalf("after recovery:\n%s", v)
				}
			})
		}
	}
}

// hangingClient is a client whose Status never answers until released,
// whatever its context says: a call stuck in a way no deadline reaches.
type hangingClient struct {
	*fakeClient
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (h *hangingClient) Status(ctx context.Context, queue, group string) (partitionq.GroupStatus, error) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	<-h.release
	return partitionq.GroupStatus{}, errors.New("released")
}

func TestRefreshThatHangsDoesNotBlockTheNext(t *testing.T) {
	h := &hangingClient{fakeClient: newFake(), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	m := newTestModel(t, h, Options{RefreshTimeout: RefreshMin})
	drive(t, m, tea.WindowSizeMsg{Width: 100, Height: 30})

	start := time.Now()
	_, ticks := drive(t, m, m.Init()())
	if took := time.Since(start); took > RefreshMin+time.Second {
		t.Errorf("the hanging refresh took %s to count as failed; its deadline is %s", took, RefreshMin)
	}
	if m.ref.failures != 1 || !errors.Is(m.ref.err, context.DeadlineExceeded) || m.ref.inFlight {
		t.Fatalf("after the deadline: %d failures, err %v, in flight %v; want 1 failure, a deadline error, nothing in flight", m.ref.failures, m.ref.err, m.ref.inFlight)
	}
	if !strings.Contains(m.ref.err.Error(), "no answer within 100ms") {
		t.Errorf("the error does not name the deadline: %v", m.ref.err)
	}
	if v := m.View(); !strings.Contains(v, "DB DOWN") {
		t.Fatalf("the view does not say the database is down:\n%s", v)
	}
	if len(ticks) != 1 {
		t.Fatalf("ticks armed: %+v", ticks)
	}

	// The tick's refresh goes ahead although the first call still hangs.
	drive(t, m, ticks[0].msg)
	h.mu.Lock()
	calls := h.calls
	h.mu.Unlock()
	if calls != 2 || m.ref.failures != 2 {
		t.Fatalf("after the next tick: %d calls to Status, %d failures; want 2 and 2", calls, m.ref.failures)
	}
}

func TestRefreshTimeoutOption(t *testing.T) {
	m, err := NewModel(context.Background(), newFake(), Options{Queue: "files", Group: "indexer"})
	if err != nil {
		t.Fatal(err)
	}
	if m.sh.refreshLimit != RefreshTimeoutDefault {
		t.Errorf("default refresh deadline %s, want %s", m.sh.refreshLimit, RefreshTimeoutDefault)
	}
	_, err = NewModel(context.Background(), newFake(), Options{Queue: "files", Group: "indexer", RefreshTimeout: time.Millisecond})
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) || ve.Field != "Options.RefreshTimeout" {
		t.Fatalf("a 1ms refresh deadline: %v", err)
	}
}

// Issue 28: a refresh in flight (here one whose Status hangs, as on a slow
// database) never holds the keys: Update hands the read to a command and
// returns, and the keys pressed meanwhile move, switch views and open
// dialogs at once.
func TestKeysAnswerWhileARefreshIsInFlight(t *testing.T) {
	h := &hangingClient{fakeClient: newFake(), release: make(chan struct{})}
	m := incidentModel(t, Options{}, 100, 30)
	m.sh.client = h
	cmd := m.refreshNow() // the read, not run: Bubble Tea runs it on a goroutine of its own
	if cmd == nil || !m.ref.inFlight {
		t.Fatalf("no refresh in flight (cmd %v, in flight %v)", cmd, m.ref.inFlight)
	}
	done := make(chan struct{})
	go func() { cmd(); close(done) }() // hangs until released
	start := time.Now()
	press(t, m, "2", "down", "s") // runs what the keys return; a refresh asked meanwhile waits for the one in flight
	if took := time.Since(start); !m.confirmOpen || m.active != tabBlocked || took > time.Second {
		t.Fatalf("keys during the refresh: confirm open %v, view %v, after %s", m.confirmOpen, m.active, took)
	}
	close(h.release)
	<-done
}

// The console under real use: what an operator on a laggy link,
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
