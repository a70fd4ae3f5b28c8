package tui

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// countingTracer counts the statements a pool's connections send.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	if os.Getenv("PQ_TRACE_SQL") != "" {
		fmt.Fprintf(os.Stderr, "SQL: %.100s\n", strings.Join(strings.Fields(d.SQL), " "))
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// One console refresh runs the same number of statements whatever the
// number of slots (docs/console.md): counted through a tracer on the
// console's own pool, for the slots (and blocked keys) tab, the dead
// letters tab and the audit tab, at N = 4, 64 and 256, with a worker
// running (on a pool of its own) and a key blocked, so that the reads of
// blocked keys are in the count.
func TestQueriesPerRefreshFlatInN(t *testing.T) {
	t.Parallel()
	type counts struct{ slots, dead, audit int64 }
	got := map[int]counts{}
	for _, n := range []int{4, 64, 256} {
		b := setupDB(t) // 2 slots on files/indexer, a worker's pool
		if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "files", Group: fmt.Sprintf("g%d", n), Slots: n, TickMaxLag: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		group := fmt.Sprintf("g%d", n)
		w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{
			Queue: "files", Group: group, Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond},
			Handler: partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
				if strings.Contains(string(ev.Payload), "poison") {
					return fmt.Errorf("poison")
				}
				return nil
			}),
			Retry:  partitionq.RetryConfig{HeadScanInterval: 50 * time.Millisecond, BackoffMin: time.Hour},
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
			_ = w.Stop(ctx)
		})
		ms := []partitionq.Message{{Key: "tenant-7", Payload: []byte(`{"poison":true}`)}, {Key: "tenant-7", Payload: []byte(`{}`)}}
		for i := range 50 {
			ms = append(ms, partitionq.Message{Key: fmt.Sprintf("tenant-%d", 100+i), Payload: []byte(`{}`)})
		}
		if _, err := b.client.SendBatch(b.ctx, "files", ms); err != nil {
			t.Fatal(err)
		}
		pgtest.WaitFor(t, 30*time.Second, "tenant-7 blocked", func() (bool, error) {
			bk, err := b.client.BlockedKeys(b.ctx, "files", group)
			return len(bk) == 1, err
		})

		tr := &countingTracer{}
		cfg, err := pgxpool.ParseConfig(b.db.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Tracer = tr
		pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := newTestModel(t, c, Options{Queue: "files", Group: group})
		refresh := func(plan fetchPlan) int64 {
			if _, err := read(b.ctx, m.sh, plan); err != nil { // the warm-up: connections, the client's first look
				t.Fatal(err)
			}
			before := tr.n.Load()
			msg, err := read(b.ctx, m.sh, plan)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.status.SlotStatus) != n || len(msg.blocked) != 1 {
				t.Fatalf("N=%d: %d slots, %d blocked keys read", n, len(msg.status.SlotStatus), len(msg.blocked))
			}
			return tr.n.Load() - before
		}
		got[n] = counts{slots: refresh(fetchPlan{}), dead: refresh(fetchPlan{deadLetters: true}), audit: refresh(fetchPlan{audit: true})}
		t.Logf("N=%d: statements per refresh: %d on the slots and blocked-keys tabs, %d on the dead letters tab, %d on the audit tab",
			n, got[n].slots, got[n].dead, got[n].audit)
	}
	if got[4] != got[64] || got[4] != got[256] {
		t.Errorf("statements per refresh grow with N: %+v", got)
	}
}
