package partitionq_test

import (
	"context"
	"strings"
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
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: l, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck
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
