package partitionq_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkStatusAtBacklog times what an operator's day reads while a
// backlog waits (docs/benchmarks.md, "Status at any backlog"): Status of
// groups of 4, 64 and 256 slots, Groups (partitionq groups), Key (the
// key view) and one console refresh (Status and BlockedKeys), at 10,000,
// 1,000,000 and 10,000,000 pending events (90% on one key), loaded straight
// into the queue's current event table, 50,000 a transaction with a tick
// after each (as a ticker would make them), and counted by the census as
// the ticker does after its ticks (its time is logged). Every Status is
// checked exact. PARTITIONQ_BENCH_MAX (events, default 10,000,000) stops
// it earlier:
//
//	go test -run '^$' -bench StatusAtBacklog -benchtime 20x -timeout 60m ./partitionq/
func BenchmarkStatusAtBacklog(b *testing.B) {
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 8)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ns := []int{4, 64, 256}
	for _, n := range ns {
		if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: fmt.Sprintf("g%d", n), Slots: n}); err != nil {
			b.Fatal(err)
		}
	}
	limit := int64(10_000_000)
	if s := os.Getenv("PARTITIONQ_BENCH_MAX"); s != "" {
		if _, err := fmt.Sscan(s, &limit); err != nil {
			b.Fatalf("PARTITIONQ_BENCH_MAX=%q: %v", s, err)
		}
	}
	var table string
	if err := pool.QueryRow(ctx, db.SQL(`select queue_data_pfx || '_' || queue_cur_table from pgq.queue where queue_name = 'q'`)).Scan(&table); err != nil {
		b.Fatal(err)
	}
	loaded := int64(0)
	load := func(b *testing.B, to int64) {
		start := time.Now()
		for loaded < to {
			k := min(50_000, to-loaded)
			if _, err := pool.Exec(ctx, `insert into `+table+` (ev_time, ev_type, ev_data, ev_extra1)
				select now(), 'FileCreated', '{"path":"/a"}', case when i % 10 = 0 then 'tenant-' || (i % 1000) else 'hot' end
				  from generate_series($1::int8, $2::int8) i`, loaded, loaded+k-1); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, db.SQL(`select pgq.force_tick('q')`)); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, db.SQL(`select pgq.ticker('q')`)); err != nil {
				b.Fatal(err)
			}
			loaded += k
		}
		b.Logf("loaded %d events in %s", loaded, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		for {
			var done int64
			if err := pool.QueryRow(ctx, `select partitionq.census_all($1, 1000000)`, db.Schema).Scan(&done); err != nil {
				b.Fatal(err)
			}
			if done == 0 {
				break
			}
		}
		b.Logf("census of %d events for N = 4, 64, 256 caught up in %s", loaded, time.Since(start).Round(time.Millisecond))
		if _, err := pool.Exec(ctx, "analyze"); err != nil {
			b.Fatal(err)
		}
	}
	status := func(b *testing.B, group string) {
		for range b.N {
			st, err := c.Status(ctx, "q", group)
			if err != nil {
				b.Fatal(err)
			}
			if st.Pending != loaded || st.PendingMax != loaded {
				b.Fatalf("pending %d..%d, want %d exact", st.Pending, st.PendingMax, loaded)
			}
		}
	}
	for _, level := range []struct {
		name string
		n    int64
	}{{"10k", 10_000}, {"1M", 1_000_000}, {"10M", 10_000_000}} {
		if level.n > limit {
			break
		}
		load(b, level.n)
		for _, n := range ns {
			b.Run(fmt.Sprintf("pending=%s/status/slots=%d", level.name, n), func(b *testing.B) { status(b, fmt.Sprintf("g%d", n)) })
		}
		b.Run(fmt.Sprintf("pending=%s/groups", level.name), func(b *testing.B) {
			for range b.N {
				if gs, err := c.Groups(ctx, partitionq.GroupsQuery{}); err != nil || len(gs) != len(ns) {
					b.Fatal(gs, err)
				}
			}
		})
		b.Run(fmt.Sprintf("pending=%s/key/slots=4", level.name), func(b *testing.B) {
			for range b.N {
				if _, err := c.Key(ctx, "q", "g4", "hot"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("pending=%s/hot-keys/slots=4", level.name), func(b *testing.B) {
			for range b.N {
				hk, err := c.HotKeys(ctx, "q", "g4", 10)
				if err != nil || len(hk.Top) == 0 || hk.Top[0].Key != "hot" || hk.Exact != (loaded <= partitionq.HotKeysExactMax) {
					b.Fatal(hk.Top, hk.Exact, err)
				}
				if !hk.Exact && (hk.Top[0].Pending-hk.Top[0].Error > loaded*9/10 || hk.Top[0].Pending+hk.Top[0].Error < loaded*9/10) {
					b.Logf("hot: %d ± %d, true %d", hk.Top[0].Pending, hk.Top[0].Error, loaded*9/10)
				}
			}
		})
		b.Run(fmt.Sprintf("pending=%s/console-refresh/slots=64", level.name), func(b *testing.B) {
			for range b.N {
				if _, err := c.Status(ctx, "q", "g64"); err != nil {
					b.Fatal(err)
				}
				if _, err := c.BlockedKeys(ctx, "q", "g64"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStatusBacklog measures one Status call (its scan of the
// unfinished events counts every slot's pending exactly) with 1,000,000
// events pending, 90% of them on one key, for groups of 4, 64 and 256 slots
// on the same queue, and with nothing pending (docs/operations.md):
//
//	go test -run '^$' -bench StatusBacklog -benchtime 5x ./partitionq/
func BenchmarkStatusBacklog(b *testing.B) {
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 8)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ns := []int{4, 64, 256}
	for _, n := range ns {
		if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: fmt.Sprintf("g%d", n), Slots: n}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "idle", Group: "g", Slots: 64}); err != nil {
		b.Fatal(err)
	}
	const total = 1_000_000
	ms := make([]partitionq.Message, 0, 5000)
	for i := 0; i < total; {
		ms = ms[:0]
		for ; len(ms) < 5000 && i < total; i++ {
			key := "hot"
			if i%10 == 0 {
				key = fmt.Sprintf("tenant-%d", i%1000)
			}
			ms = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(`{"path":"/a"}`)})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := c.SendBatchTx(ctx, tx, "q", ms)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "analyze"); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, queue, group string, want int64) {
		for range b.N {
			st, err := c.Status(ctx, queue, group)
			if err != nil {
				b.Fatal(err)
			}
			if st.Pending != want {
				b.Fatalf("pending %d, want %d", st.Pending, want)
			}
		}
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("pending=1M/slots=%d", n), func(b *testing.B) { run(b, "q", fmt.Sprintf("g%d", n), total) })
	}
	b.Run("pending=0/slots=64", func(b *testing.B) { run(b, "idle", "g", 0) })
}
