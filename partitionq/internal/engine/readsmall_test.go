package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// A small batch read in one statement, outside a transaction, gives the
// events the cursor gives, in the same order, with the same slots; and
// one with more events than its bound gives none (the caller reads it
// with the cursor).
func TestReadSmallReadsWhatTheCursorReads(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, n = "readsmall", 4
	sc := eng.Schema()
	var consumers []string
	for s := range n {
		consumers = append(consumers, fmt.Sprintf("g#%d/%d", s, n))
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		for _, c := range consumers {
			if _, err := eng.RegisterConsumer(ctx, tx, queue, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		var key any = fmt.Sprintf("tenant-%d", i%5)
		if i == 7 {
			key = nil // keyless: slot 0
		}
		if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'FileCreated', $2, $3, 'x2', null, null)`, queue, fmt.Sprintf(`{"i":%d}`, i), key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eng.Ticker(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	infos, err := eng.NextBatches(ctx, tx, queue, consumers, 0)
	if err != nil || len(infos) != n {
		t.Fatalf("batches: %+v, %v", infos, err)
	}
	all, err := eng.Subscriptions(ctx, tx, queue, "g#")
	if err != nil || len(all) != n {
		t.Fatalf("subscriptions: %v, %v", all, err)
	}
	subs := map[int]engine.Subscription{}
	for _, s := range all {
		for i, c := range consumers {
			if s.Consumer == c {
				subs[i] = s
			}
		}
	}
	// Slots 1 and 2, read together, as a shared read does.
	spec := engine.ReadSpec{Batch: infos[1].ID, Sub: subs[1].SubID, Subs: []int32{subs[1].SubID, subs[2].SubID}, Slots: []int{1, 2}, N: n}
	cur, want, err := eng.OpenRead(ctx, tx, spec, 100)
	if err != nil {
		t.Fatal(err)
	}
	if more, err := cur.Next(ctx, 100); err != nil || len(more) != 0 {
		t.Fatalf("the cursor read more: %d, %v", len(more), err)
	}
	if len(want) == 0 {
		t.Fatal("slots 1 and 2 have no events: the test reads nothing")
	}
	if err := tx.Commit(ctx); err != nil { // the batches stay open
		t.Fatal(err)
	}
	got, ok, err := eng.ReadSmall(ctx, pool, spec, len(want))
	if err != nil || !ok {
		t.Fatalf("ReadSmall of %d events with a bound of %d: ok %v, %v", len(want), len(want), ok, err)
	}
	if len(got) != len(want) {
		t.Fatalf("ReadSmall read %d events, the cursor %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.ID != w.ID || g.Slot != w.Slot || g.Key != w.Key || g.NoKey != w.NoKey || g.Data != w.Data || g.Type != w.Type ||
			!g.Time.Equal(w.Time) || *g.Extra2 != *w.Extra2 || g.Extra3 != nil || g.Retry != w.Retry {
			t.Errorf("event %d: ReadSmall %+v, the cursor %+v", i, g, w)
		}
	}
	if evs, ok, err := eng.ReadSmall(ctx, pool, spec, len(want)-1); err != nil || ok || evs != nil {
		t.Errorf("ReadSmall of %d events with a bound of %d: %d events, ok %v, %v; want none, not ok", len(want), len(want)-1, len(evs), ok, err)
	}
}

// A batch whose ticks say it is small but is not (its events were sent in
// a transaction that spanned its first tick, as a backlog sent in one
// transaction is) costs ReadSmall about its bound in rows, not a scan of
// the batch, and is left to the cursor. (The engine's query sorted the
// batch: read with a bound, it read every event, twice in the counters.)
func TestReadSmallOfABatchLargerThanItsTicksSay(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, consumer, sent, bound = "readsmall_large", "g#0/1", 1000, 10
	sc := eng.Schema()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		_, err := eng.RegisterConsumer(ctx, tx, queue, consumer)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The events take their ids, then a tick comes, then they commit.
	long, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	if _, err := long.Exec(ctx, `select `+sc+`.insert_event($1, 'T', 'd', 'k' || i, null, null, null) from generate_series(1, $2) i`, queue, sent); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Ticker(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'T', 'd', 'last', null, null, null)`, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Ticker(ctx, pool); err != nil {
		t.Fatal(err)
	}
	subs, err := eng.Subscriptions(ctx, pool, queue, "g#")
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	spec := engine.ReadSpec{Sub: subs[0].SubID, Subs: []int32{subs[0].SubID}, N: 1}
	// The first batch ends at the tick the events missed; the second has
	// them all, and a queue's worth of one event by its ticks.
	for range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := eng.NextBatches(ctx, tx, queue, []string{consumer}, 0)
		if err != nil || len(infos) != 1 || infos[0].ID == 0 {
			t.Fatalf("no batch: %+v, %v", infos, err)
		}
		spec.Batch = infos[0].ID
		if seq := infos[0].CurSeq - infos[0].PrevSeq; seq > bound {
			if _, err := eng.FinishBatches(ctx, tx, []int64{spec.Batch}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		evs, ok, err := eng.ReadSmall(ctx, tx, spec, bound)
		if err != nil || ok || evs != nil {
			t.Fatalf("ReadSmall with a bound of %d: %d events, ok %v, %v; want none, not ok", bound, len(evs), ok, err)
		}
		var read int64
		if err := tx.QueryRow(ctx, `select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) from pg_stat_xact_user_tables
			where schemaname = $1 and relname like 'event\_%'`, sc).Scan(&read); err != nil {
			t.Fatal(err)
		}
		// Its bound, and the rest of the heap page it stopped in (a page
		// holds fewer than 100 of these events); the whole batch read
		// twice over (the engine's query sorted it) before.
		if want := int64(bound + 1 + 100); read > want {
			t.Errorf("ReadSmall of a batch of %d events with a bound of %d read %d event rows, want at most %d", sent+1, bound, read, want)
		}
		tx.Rollback(ctx)
		return
	}
	t.Fatal("no batch its ticks say is small: the test checks nothing")
}
