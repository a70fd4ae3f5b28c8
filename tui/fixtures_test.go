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
	"github.com/charmbracelet/lipgloss"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/muesli/termenv"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/dlqfilter"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Fixed data for the model and view tests: a clock that never moves, so
// the goldens are stable.

var base = time.Date(2025, 3, 14, 3, 12, 0, 0, time.UTC)

func init() {
	// One colour profile for every view test: plain text, no escapes.
	lipgloss.SetColorProfile(termenv.Ascii)
}

// incidentStatus is a group of 4 slots in trouble, at base+offset: slot 0
// keeps up, slot 1 has blocked keys, slot 2's owner has stalled, slot 3
// has no live owner. pendingGrowth makes the stuck slots' pending grow
// with offset so that successive snapshots give read rates.
func incidentStatus(offset time.Duration) partitionq.GroupStatus {
	sec := int64(offset / time.Second)
	worker := func(name string, backend int32) *partitionq.Owner {
		// The default identity partitionq:<host>:<pid> names the worker's own process.
		var host string
		var pid int32
		fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(name, "partitionq:"), ":", " "), "%s %d", &host, &pid)
		return &partitionq.Owner{Name: name, Host: host, PID: pid, BackendPID: backend, Addr: "10.0.3.7", Since: base.Add(-26 * time.Hour), Epoch: 7}
	}
	// 60 events a second arrive; a slot's position is the head less what
	// it has pending: slots 0 and 1 keep up, 2 and 3 do not move (their own
	// backlog grows by their share, 15 a second).
	head := 100_000 + 60*sec
	pending := []int64{12 + (sec%3)*5, 40 + (sec%4)*10, 26120 + 60*sec, 23400 + 60*sec}
	own := []int64{3 + (sec%3+3)%3, 10 + (sec%4+4)%4*2, 6530 + 15*sec, 5850 + 15*sec}
	wave := float64((sec%20+20)%20) / 2 // the handled rates wobble
	rates := []partitionq.Rates{
		{Handled10s: 28 + wave, Handled1m: 29.5},
		{Handled10s: 27 - wave/2, Failed10s: 0.4, Handled1m: 27.2, Failed1m: 0.3},
		{}, {},
	}
	var group partitionq.Rates
	for _, r := range rates {
		group.Handled10s += r.Handled10s
		group.Failed10s += r.Failed10s
		group.Handled1m += r.Handled1m
		group.Failed1m += r.Failed1m
	}
	return partitionq.GroupStatus{
		Queue: "files", Group: "indexer", Slots: 4, Engine: "pgq", DeadLetters: 2, At: base.Add(offset), Head: head,
		Pending: own[0] + own[1] + own[2] + own[3], Rates: group,
		SlotStatus: []partitionq.SlotStatus{
			{Slot: 0, Consumer: "indexer#0/4", Owner: worker("partitionq:web-1:4121", 88231), Lag: 213 * time.Millisecond,
				LastSeen: 400 * time.Millisecond, QueuePending: pending[0], Pending: own[0], Oldest: 180 * time.Millisecond,
				SinceFinish: 90 * time.Millisecond, Rates: rates[0], Position: head - pending[0]},
			{Slot: 1, Consumer: "indexer#1/4", Owner: worker("partitionq:web-1:4121", 88232), Lag: 1200 * time.Millisecond,
				LastSeen: time.Second, QueuePending: pending[1], Pending: own[1], Oldest: 1500 * time.Millisecond, SinceFinish: 800 * time.Millisecond,
				Rates: rates[1], BlockedKeys: 2, SetAside: 59, Position: head - pending[1]},
			{Slot: 2, Consumer: "indexer#2/4", Owner: worker("partitionq:web-2:5230", 90417), Lag: 7*time.Minute + 12*time.Second + offset,
				LastSeen: 7*time.Minute + 10*time.Second + offset, InBatch: true, QueuePending: pending[2], Pending: own[2], BlockedKeys: 1, SetAside: 1,
				Oldest: 7*time.Minute + 13*time.Second + offset, SinceFinish: 7*time.Minute + 10*time.Second + offset, Position: head - pending[2]},
			{Slot: 3, Consumer: "indexer#3/4", Lag: 6*time.Minute + offset, LastSeen: 6*time.Minute + offset,
				QueuePending: pending[3], Pending: own[3], Oldest: 6*time.Minute + 2*time.Second + offset, SinceFinish: -1, Position: head - pending[3]},
		},
	}
}

func incidentBlocked() []partitionq.BlockedKey {
	return []partitionq.BlockedKey{
		{Key: "tenant-7", Slot: 1, State: partitionq.KeyBlocked, Waiting: 14, BlockedSince: base.Add(-12*time.Minute - 5*time.Second),
			Head: partitionq.HeadEvent{ID: 48211, Type: "FileCreated", Time: base.Add(-12*time.Minute - 6*time.Second), Attempts: 5,
				NextAttempt: base.Add(8 * time.Second), Payload: []byte(`{"tenant":"tenant-7","path":"/inbox/q1-report.pdf","size":183220,"tags":["finance","q1"]}`),
				LastError: `insert into files: ERROR: duplicate key value violates unique constraint "files_pkey" (SQLSTATE 23505)`}},
		{Key: "tenant-42", Slot: 1, State: partitionq.KeyBlocked, Waiting: 45, BlockedSince: base.Add(-3*time.Minute - 30*time.Second),
			Head: partitionq.HeadEvent{ID: 48877, Type: "FileDeleted", Time: base.Add(-3*time.Minute - 31*time.Second), Attempts: 2,
				NextAttempt: base.Add(90 * time.Second), Payload: []byte(`{"tenant":"tenant-42","path":"/tmp/x"}`),
				LastError: "POST https://billing.internal/v1/charge: 503 Service Unavailable"}},
		{Key: "globex", Slot: 2, State: partitionq.KeyBlocked, Waiting: 0, BlockedSince: base.Add(-40 * time.Second),
			Head: partitionq.HeadEvent{ID: 49002, Type: "FileMoved", Time: base.Add(-41 * time.Second), Attempts: 1,
				Payload: []byte("not json: raw text body"), LastError: "context deadline exceeded"}},
	}
}

func tenant7Preview() []partitionq.PreviewEvent {
	evs := []partitionq.PreviewEvent{{ID: 48211, Type: "FileCreated", Time: base.Add(-12*time.Minute - 6*time.Second), Head: true,
		Payload: incidentBlocked()[0].Head.Payload}}
	for i := range 14 {
		evs = append(evs, partitionq.PreviewEvent{ID: int64(48300 + 17*i), Type: "FileUpdated", Time: base.Add(time.Duration(-11*60+i*20) * time.Second),
			Payload: []byte(fmt.Sprintf(`{"tenant":"tenant-7","path":"/inbox/q1-report.pdf","rev":%d}`, i+2))})
	}
	return evs[:PreviewLimit+1]
}

func incidentDead() []partitionq.DeadLetter {
	replayedAt := base.Add(-time.Hour)
	replayID := int64(47001)
	return []partitionq.DeadLetter{
		{ID: 11, Queue: "files", Group: "indexer", Slot: 0, EventID: 45120, EventTime: base.Add(-5 * time.Hour), Type: "FileCreated",
			Payload: []byte(`{"tenant":"initech","path":"/a"}`), Key: "initech", Attempts: 7, LastError: "parse: unexpected EOF",
			Reason: "skip: bad payload, confirmed with the tenant", Actor: "alice", DBRole: "ops", DeadAt: base.Add(-4 * time.Hour)},
		{ID: 12, Queue: "files", Group: "indexer", Slot: 1, EventID: 46002, EventTime: base.Add(-2 * time.Hour), Type: "FileDeleted",
			Payload: []byte(`{"tenant":"tenant-9"}`), Key: "tenant-9", Attempts: 3, LastError: "permission denied",
			Reason: "handler", Actor: "worker", DBRole: "app", DeadAt: base.Add(-90 * time.Minute), ReplayedAt: &replayedAt, ReplayID: &replayID},
		{ID: 13, Queue: "files", Group: "indexer", Slot: 3, EventID: 47950, EventTime: base.Add(-20 * time.Minute), Type: "FileCreated",
			Payload: []byte(`{"tenant":"hooli","path":"/b","size":12}`), Key: "hooli", Attempts: 10, LastError: "timeout after 1m0s",
			Reason: "max_attempts", Actor: "worker", DBRole: "app", DeadAt: base.Add(-15 * time.Minute)},
	}
}

// incidentDeadMatching is the incident's dead letters q selects (by key,
// type, reason and pending: the filters the tests use).
func incidentDeadMatching(q partitionq.DeadLetterQuery) []partitionq.DeadLetter {
	var out []partitionq.DeadLetter
	for _, d := range incidentDead() {
		if (q.Pending && d.ReplayedAt != nil) || (q.Key != "" && d.Key != q.Key) || (q.Type != "" && d.Type != q.Type) ||
			(q.Reason != "" && !strings.HasPrefix(d.Reason, q.Reason)) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func incidentAudit() []partitionq.AuditEntry {
	return []partitionq.AuditEntry{
		{ID: 3, At: base.Add(-10 * time.Minute), DBRole: "ops", Actor: "alice", Action: "retry", Queue: "files", Group: "indexer",
			Key: "tenant-7", EventID: 48211, Reason: "db failover finished", Outcome: "retry_scheduled"},
		{ID: 2, At: base.Add(-4 * time.Hour), DBRole: "ops", Actor: "alice", Action: "skip", Queue: "files", Group: "indexer",
			Key: "initech", EventID: 45120, Reason: "bad payload, confirmed with the tenant", Outcome: "skipped"},
		{ID: 1, At: base.Add(-26 * time.Hour), DBRole: "ops", Actor: "bob", Action: "replay", Queue: "files", Group: "indexer",
			Key: "tenant-9", EventID: 46002, Reason: "billing is back", Outcome: "replayed"},
	}
}

// incidentGroups is the list of every group: the incident's, a healthy
// one, one without a live worker, and one whose consumers are not whole.
func incidentGroups() []partitionq.GroupOverview {
	return []partitionq.GroupOverview{
		{Queue: "files", Group: "indexer", Slots: 4, Owned: 3, Workers: []string{"partitionq:web-1:4121", "partitionq:web-2:5230"},
			Backlog: 8180, Lag: 4*time.Minute + 12*time.Second, SetAside: 60, BlockedKeys: 3, DeadLetters: 2},
		{Queue: "files", Group: "thumbnails", Slots: 8, Owned: 8, Workers: []string{"thumbs-1"}, Backlog: 12, Lag: 300 * time.Millisecond},
		{Queue: "mail", Group: "sender", Slots: 2, Owned: 0, Backlog: 5400, Lag: 3 * time.Minute, DeadLetters: 41},
		{Queue: "mail", Group: "old", Slots: 2, Broken: "some slots have no consumer: run partitionq setup again with the same number of slots"},
	}
}

// armedTick is what the test clock's after returns: the tick is recorded,
// never slept on.
type armedTick struct {
	d   time.Duration
	msg tea.Msg
}

// everyGroup as Options.Queue makes newTestModel open on the list of
// every group (an empty Queue means the incident's group there).
const everyGroup = "-"

// newTestModel returns a model on c with a fixed clock, whose ticks do not sleep.
func newTestModel(t *testing.T, c Client, opts Options) *Model {
	t.Helper()
	switch opts.Queue {
	case "":
		opts.Queue, opts.Group = "files", "indexer"
	case everyGroup:
		opts.Queue = ""
	}
	m, err := NewModel(context.Background(), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	m.sh.now = func() time.Time { return base }
	m.sh.after = func(d time.Duration, msg tea.Msg) tea.Cmd {
		return func() tea.Msg { return armedTick{d: d, msg: msg} }
	}
	return m
}

// hostileBlocked is the incident's blocked keys with untrusted text that
// could break a terminal or a frame (a newline in a key, escapes in a type,
// a multi-line error, a long key), and a key that drains.
func hostileBlocked() []partitionq.BlockedKey {
	bs := incidentBlocked()
	bs[0].Key = "multi\nline\nkey"
	bs[0].Head.Type = "File\x1b[2JCreated"
	bs[0].Head.LastError = "store /inbox/q1-report.pdf: write to storage node s3-eu-1:\n  upload 3 of 4: corrupt file: checksum mismatch\n\tat upload.go:88"
	bs[1].Key = "tenant-with-a-very-long-name-0000000000000042"
	bs = append(bs, partitionq.BlockedKey{Key: "tenant-9", Slot: 1, State: partitionq.KeyDraining, Waiting: 3, BlockedSince: base.Add(-20 * time.Second),
		Head: partitionq.HeadEvent{ID: 48990, Type: "FileDeleted", Time: base.Add(-20 * time.Second), Payload: []byte(`{"tenant":"tenant-9"}`)}})
	return bs
}

// snap builds the snapshot of the incident at base+offset.
func snap(offset time.Duration, plan fetchPlan) snapshotMsg {
	return snapWith(offset, plan, incidentBlocked())
}

// snapWith is snap with other blocked keys.
func snapWith(offset time.Duration, plan fetchPlan, blocked []partitionq.BlockedKey) snapshotMsg {
	if plan.groups {
		return snapshotMsg{at: base.Add(offset), plan: plan, groups: incidentGroups()}
	}
	msg := snapshotMsg{at: base.Add(offset), status: incidentStatus(offset), blocked: blocked, plan: plan}
	if plan.deadLetters {
		q := partitionq.DeadLetterQuery{Pending: !plan.deadAll}
		if msg.deadErr = dlqfilter.Apply(&q, plan.deadFilter, base); msg.deadErr == nil {
			msg.dead = incidentDeadMatching(q)
		}
	}
	if plan.findKey != "" {
		f := newFake()
		f.blocked = blocked
		msg.key, msg.keyErr = f.Key(context.Background(), "files", "indexer", plan.findKey)
	}
	if plan.audit {
		msg.audit = incidentAudit()
	}
	if plan.hotKeys {
		msg.hot, _ = newFake().HotKeys(context.Background(), "files", "indexer", HotKeysTop)
	}
	if plan.previewKey == "tenant-7" {
		msg.preview = tenant7Preview()
	}
	for _, b := range blocked {
		if plan.previewKey == b.Key && msg.preview == nil {
			msg.preview = []partitionq.PreviewEvent{{ID: b.Head.ID, Type: b.Head.Type, Payload: b.Head.Payload, Time: b.Head.Time, Head: true}}
		}
	}
	return msg
}

// incidentModel is a model of width x height that has seen HistorySpan of
// snapshots of the incident, one a second, ending at base.
func incidentModel(t *testing.T, opts Options, width, height int) *Model {
	t.Helper()
	return incidentModelWith(t, opts, width, height, incidentBlocked())
}

// incidentModelWith is incidentModel with other blocked keys.
func incidentModelWith(t *testing.T, opts Options, width, height int, blocked []partitionq.BlockedKey) *Model {
	t.Helper()
	f := newFake()
	f.blocked = blocked
	m := newTestModel(t, f, opts)
	m.Update(tea.WindowSizeMsg{Width: width, Height: height})
	for i := -int(HistorySpan / time.Second); i <= 0; i++ {
		m.Update(snapWith(time.Duration(i)*time.Second, m.plan(), blocked))
	}
	return m
}

// keyMsg makes the key message of a key name as Bubble Tea reports it.
func keyMsg(name string) tea.KeyMsg {
	switch name {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	case "ctrl+r":
		return tea.KeyMsg{Type: tea.KeyCtrlR}
	case "shift+tab":
		return tea.KeyMsg{Type: tea.KeyShiftTab}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(name)}
}

// typeText makes the key messages of typing s.
func typeText(s string) []tea.Msg {
	var out []tea.Msg
	for _, r := range s {
		out = append(out, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	return out
}

// These tests drive the model against the real database through the real
// client: the same commands the console runs, executed in the test's
// goroutine.

// dbBundle is a fresh database with group files/indexer of 2 slots.
type dbBundle struct {
	db     pgtest.DB
	pool   *pgxpool.Pool
	client *partitionq.Client
	ctx    context.Context
}

func setupDB(t *testing.T) *dbBundle {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 20)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "files", Group: "indexer", Slots: 2, TickMaxLag: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return &dbBundle{db: db, pool: pool, client: c, ctx: ctx}
}

// poisonWorker runs a worker whose handler fails for payloads marked
// poison and records the others.
type poisonWorker struct {
	mu      sync.Mutex
	handled []string // key payload
}

func (p *poisonWorker) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.handled...)
}

func (b *dbBundle) startWorker(t *testing.T) *poisonWorker {
	t.Helper()
	p := &poisonWorker{}
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if strings.Contains(string(ev.Payload), `"poison":true`) {
			return errors.New("cannot parse invoice: field total missing")
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.handled = append(p.handled, ev.Key+" "+string(ev.Payload))
		return nil
	})
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{
		Queue: "files", Group: "indexer", Handler: h, Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond},
		Retry:  partitionq.RetryConfig{HeadScanInterval: 50 * time.Millisecond, BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second},
		Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return p
}

// sendIncident sends a poison event for tenant-7 with two events behind
// it, and events of other keys.
func (b *dbBundle) sendIncident(t *testing.T) {
	t.Helper()
	ms := []partitionq.Message{
		{Key: "tenant-7", Type: "InvoiceCreated", Payload: []byte(`{"seq":1,"poison":true}`)},
		{Key: "tenant-7", Type: "InvoiceCreated", Payload: []byte(`{"seq":2}`)},
		{Key: "tenant-7", Type: "InvoiceCreated", Payload: []byte(`{"seq":3}`)},
	}
	for i := range 6 {
		ms = append(ms, partitionq.Message{Key: fmt.Sprintf("tenant-%d", 100+i), Type: "InvoiceCreated", Payload: []byte(`{"seq":1}`)})
	}
	if _, err := b.client.SendBatch(b.ctx, "files", ms); err != nil {
		t.Fatal(err)
	}
}

// realModel is a model on the real client whose ticks are recorded, not slept on.
func realModel(t *testing.T, c Client) *Model {
	t.Helper()
	m := newTestModel(t, c, Options{Actor: "tester"})
	m.sh.now = time.Now
	drive(t, m, tea.WindowSizeMsg{Width: 100, Height: 30})
	return m
}

// refreshUntil refreshes m until cond holds, or fails after timeout.
func refreshUntil(t *testing.T, m *Model, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.WaitFor(t, timeout, what, func() (bool, error) {
		drive(t, m, refreshNowMsg{})
		return cond(), nil
	})
}
