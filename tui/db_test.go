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
	"github.com/partitionq/partitionq/test/pgtest"
)

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
