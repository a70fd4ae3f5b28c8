package partitionq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// stmtCounter counts the statements of a pool's sessions that contain a
// piece of SQL.
type stmtCounter struct {
	nextBatch, lastTick atomic.Int64
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(d.SQL, "next_batch_info"):
		c.nextBatch.Add(1)
	case strings.Contains(d.SQL, "max(t.tick_id)"):
		c.lastTick.Add(1)
	}
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A worker at rest whose slots have never had a batch polls for new ticks
// (one cheap read for all its slots) and opens no batches until a tick
// comes: each poll must not try every slot's next_batch again.
func TestIdleWorkerOpensNoBatchesUntilATick(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	count := &stmtCounter{}
	cfg.ConnConfig.Tracer = count // the worker's own pool is made from this configuration
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: db, pool: pool, client: client, ctx: ctx}
	b.group(t, 8) // the consumers start level with the queue's newest tick (create_queue makes one)
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: l, Limits: partitionq.LimitsConfig{PollInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	// Let start-up settle (the first look for batches, the first polls),
	// then count over many polls.
	pgtest.WaitFor(t, 30*time.Second, "the first polls", func() (bool, error) { return count.nextBatch.Load() > 0 && count.lastTick.Load() >= 5, nil })
	opened, polls := count.nextBatch.Load(), count.lastTick.Load()
	pgtest.WaitFor(t, 30*time.Second, "40 polls for new ticks", func() (bool, error) { return count.lastTick.Load() >= polls+40, nil })
	if n := count.nextBatch.Load() - opened; n > 2 {
		t.Fatalf("the idle worker tried to open batches %d times in 40 polls with no new tick, want at most 2", n)
	}
	// A tick wakes it: the slots open batches again and handle what came.
	if _, err := client.Send(ctx, "q", partitionq.Message{Key: "k", Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	if err := client.TickOnce(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "the event sent after the rest", func() (bool, error) { return len(l.okSeq("k")) == 1, nil })
}

// Per-tick cost follows the slots that have events, not N: with 64 slots,
// ticks every 10 ms and events of two keys only, a tick opens a batch for
// the cohort of idle slots (one probe) and one per slot with events, not
// 64; the idle slots' consumers still follow (moved to where the busy
// slots are within the bound docs/tuning.md states), and every event is
// handled in order.
func TestIdleSlotsOpenNoBatchPerTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 64)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec})
	k1, k2 := "tenant-1", "tenant-2"
	batches := func() int64 {
		var n int64
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select last_value from pgq.batch_id_seq`)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ticks := func() int64 {
		var n int64
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select max(tick_id) from pgq.tick`)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(seq int) {
		for _, k := range []string{k1, k2} {
			if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: k, Payload: []byte(fmt.Sprint(seq))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Warm up: every slot has been opened once, the cohort formed.
	for seq := range 20 {
		send(seq)
		time.Sleep(10 * time.Millisecond)
	}
	rec.waitTotal(t, 40)
	b0, t0 := batches(), ticks()
	for seq := 20; seq < 120; seq++ {
		send(seq)
		time.Sleep(10 * time.Millisecond)
	}
	rec.waitTotal(t, 240)
	db, dt := batches()-b0, ticks()-t0
	t.Logf("%d batches opened over %d ticks at N = 64 with 2 keys sending: %.1f a tick", db, dt, float64(db)/float64(dt))
	if dt < 20 {
		t.Fatalf("only %d ticks in the window: the test measured nothing", dt)
	}
	if perTick := float64(db) / float64(dt); perTick > 6 {
		t.Errorf("%.1f batches opened per tick with 2 slots of 64 having events, want at most 6 (a probe and the busy slots, not 64)", perTick)
	}
	// Every slot's consumer follows the busiest slots': once the sends have
	// stopped, the idle slots' consumers are moved (without a batch) to
	// the tick the busy slots finished last, within the idle bound (about
	// a second). (Lag itself, the age of a slot's last tick, grows for
	// every slot alike once ticks stop: a bound on it would measure how
	// quickly this test gets here.)
	pgtest.WaitFor(t, 10*time.Second, "every slot's consumer at the busy slots' last tick", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		if len(st.SlotStatus) != 64 {
			return false, fmt.Errorf("status listed %d slots, want 64", len(st.SlotStatus))
		}
		var furthest int64
		for _, s := range st.SlotStatus {
			furthest = max(furthest, s.Position)
		}
		for _, s := range st.SlotStatus {
			if s.Position != furthest {
				return false, nil
			}
		}
		return true, nil
	})
	for _, k := range []string{k1, k2} {
		got := rec.byKey[k]
		for i, p := range got {
			if p != fmt.Sprint(i) {
				t.Fatalf("key %s handled %v, not in order", k, got)
			}
		}
	}
}

// tickNow makes the engine tick queue q now (its ticker_max_lag is 1ms):
// it ticks until the queue's tick count grows.
func (b *bundle) tickNow(t *testing.T) {
	t.Helper()
	before := b.count(t, `select count(*) from pgq.tick`)
	pgtest.WaitFor(t, 10*time.Second, "a tick", func() (bool, error) {
		if err := b.client.TickOnce(b.ctx); err != nil {
			return false, err
		}
		return b.count(t, `select count(*) from pgq.tick`) > before, nil
	})
}

// engineBatches is how many engine batches the database has opened.
func (b *bundle) engineBatches(t *testing.T) int {
	t.Helper()
	return b.count(t, `select last_value from pgq.batch_id_seq`)
}

// A slot that is behind takes every tick it is behind by as one batch,
// judged by its own lag (the engine's min_interval), not one batch per tick.
func TestSlotBehindCatchesUpInOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1, TickMaxLag: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // ten ticks of five events each, before any worker runs
		var ms []partitionq.Message
		for j := range 5 {
			ms = append(ms, partitionq.Message{Key: "k", Payload: []byte(fmt.Sprint(i*5 + j))})
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		b.tickNow(t)
	}
	before := b.engineBatches(t)
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: l, Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the 50 events handled", func() (bool, error) { return len(l.okSeq("k")) == 50, nil })
	if n := b.engineBatches(t) - before; n > 2 {
		t.Fatalf("the slot behind by 10 ticks opened %d batches to catch up, want 1 (2 at most)", n)
	}
	for i, p := range l.okSeq("k") {
		if p != fmt.Sprint(i) {
			t.Fatalf("out of order: %v", l.okSeq("k"))
		}
	}
}

// A slot of a group's old generation never takes a batch past the resize's
// cutover tick, even when it is behind (and would merge ticks): the events
// sent before the resize are handled by the old generation's slots, those
// sent after its cutover by the new generation's (ENGINE.md, Z3).
func TestOldSlotsStopAtTheCutover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2, TickMaxLag: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	send := func(phase string) {
		var ms []partitionq.Message
		for k := range 10 {
			for j := range 2 {
				ms = append(ms, partitionq.Message{Key: fmt.Sprint("k", k), Type: phase, Payload: []byte(fmt.Sprint(j))})
			}
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
	}
	send("before")
	b.tickNow(t)
	b.tickNow(t)
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	b.tickNow(t) // the cutover: the first tick that sees the resize
	send("after")
	b.tickNow(t)
	b.tickNow(t)
	var mu sync.Mutex
	wrong := []string{}
	handled := 0
	h := partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		handled++
		if want := map[string]int{"before": 2, "after": 4}[ev.Type]; ev.Slots != want {
			wrong = append(wrong, fmt.Sprintf("%s event %d of %s handled by a slot of %d", ev.Type, ev.ID, ev.Key, ev.Slots))
		}
		return nil
	})
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h, Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	ticks, done := make(chan struct{}), make(chan struct{}) // the workers need ticks to see the handoffs through
	go func() {
		defer close(done)
		for {
			select {
			case <-ticks:
				return
			case <-time.After(20 * time.Millisecond):
				b.client.TickOnce(b.ctx) // the next one tries again
			}
		}
	}()
	defer func() { close(ticks); <-done }()
	pgtest.WaitFor(t, 60*time.Second, "the 40 events handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return handled >= 40, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(wrong) > 0 || handled != 40 {
		t.Fatalf("%d handlings; across the cutover: %v", handled, wrong)
	}
}
