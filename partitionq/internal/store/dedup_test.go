package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// dedupTx runs fn in a transaction (rolled back) of a database with the
// engine, partitionq's schema and a queue "q".
func dedupTx(t *testing.T, fn func(ctx context.Context, tx pgx.Tx, db pgtest.DB)) {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, db.SQL(`select pgq.create_queue('q')`)); err != nil {
			t.Fatal(err)
		}
		fn(ctx, tx, db)
	})
}

// insertEvent inserts an event with key into q in tx, as a producer does.
func insertEvent(t *testing.T, ctx context.Context, tx pgx.Tx, db pgtest.DB, key string) int64 {
	t.Helper()
	var id int64
	if err := tx.QueryRow(ctx, db.SQL(`select pgq.insert_event('q', 'T', 'data', $1, null, null, null)`), key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// inSavepoint runs fn in a savepoint of tx and rolls it back, returning fn's error.
func inSavepoint(t *testing.T, ctx context.Context, tx pgx.Tx, fn func(tx pgx.Tx) error) error {
	t.Helper()
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Rollback(ctx)
	return fn(sp)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A claim of new ids owns them; recorded, a claim of them again is a
// duplicate naming the event and key and counting the hits (on the ON
// CONFLICT path: the fast path's plain insert refuses it); an id repeated
// in one send counts its repeats as hits.
func TestClaimAndRecord(t *testing.T) {
	dedupTx(t, func(ctx context.Context, tx pgx.Tx, db pgtest.DB) {
		got, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "a", Key: "k1", Count: 1}, {ID: "b", Key: "k2", Count: 3}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !got["a"].Claimed || !got["b"].Claimed {
			t.Fatalf("claim of new ids: %+v", got)
		}
		ea, eb := insertEvent(t, ctx, tx, db, "k1"), insertEvent(t, ctx, tx, db, "k2")
		if err := store.RecordDedup(ctx, tx, db.Schema, "q", []string{"a", "b"}, []int64{ea, eb}); err != nil {
			t.Fatal(err)
		}
		// The fast path (a plain insert) refuses an id with a record.
		if err := inSavepoint(t, ctx, tx, func(tx pgx.Tx) error {
			_, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "a", Key: "other", Count: 2}, {ID: "c", Key: "k3", Count: 1}}, false)
			return err
		}); !errors.Is(err, store.ErrClaimRace) {
			t.Fatalf("fast claim of a recorded id: %v; want ErrClaimRace", err)
		}
		got, err = store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "a", Key: "other", Count: 2}, {ID: "c", Key: "k3", Count: 1}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if a := got["a"]; a.Claimed || a.EvID != ea || a.Key != "k1" || !got["c"].Claimed {
			t.Fatalf("claim of a recorded id: %+v", got)
		}
		hits, total, err := store.DedupHits(ctx, tx, "q", "k1", 10)
		if err != nil || len(hits) != 1 || hits[0].Hits != 2 || total != 2 || hits[0].EvID != ea {
			t.Fatalf("hits of k1: %+v, %d, %v; want a with 2", hits, total, err)
		}
		if hits, total, err = store.DedupHits(ctx, tx, "q", "k2", 10); err != nil || len(hits) != 1 || hits[0].Hits != 2 || total != 2 {
			t.Fatalf("hits of k2 (its id three times in one send): %+v, %d, %v", hits, total, err)
		}
		// c is claimed, not recorded: this transaction may record it (below);
		// the records refuse what is not the truth first.
		other := insertEvent(t, ctx, tx, db, "not-k3")
		for what, rec := range map[string]struct {
			id string
			ev int64
		}{
			"an id not claimed":            {"zzz", other},
			"an id recorded already":       {"a", ea},
			"an event with another key":    {"c", other},
			"an event that does not exist": {"c", 1 << 40},
		} {
			err := inSavepoint(t, ctx, tx, func(tx pgx.Tx) error {
				return store.RecordDedup(ctx, tx, db.Schema, "q", []string{rec.id}, []int64{rec.ev})
			})
			if sqlState(err) != store.CodeNotTrue {
				t.Errorf("record %s: %v; want %s", what, err, store.CodeNotTrue)
			}
		}
		if err := store.RecordDedup(ctx, tx, db.Schema, "q", []string{"c"}, []int64{insertEvent(t, ctx, tx, db, "k3")}); err != nil {
			t.Fatalf("record c: %v", err)
		}
	})
}

// An event of another transaction is not this one's to record.
func TestRecordRefusesAnotherTransactionsEvent(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var ev int64
	if err := pool.QueryRow(ctx, db.SQL(`select pgq.create_queue('q'), pgq.insert_event('q', 'T', 'd', 'k', null, null, null)`)).Scan(new(int), &ev); err != nil {
		t.Fatal(err)
	}
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if _, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "a", Key: "k", Count: 1}}, false); err != nil {
			t.Fatal(err)
		}
		err := store.RecordDedup(ctx, tx, db.Schema, "q", []string{"a"}, []int64{ev})
		if sqlState(err) != store.CodeNotTrue {
			t.Fatalf("record of a committed event of another transaction: %v; want %s", err, store.CodeNotTrue)
		}
	})
}

// A record past its window is claimed again (with the new key and
// window); one left without an event is claimed again too.
func TestClaimAfterTheWindow(t *testing.T) {
	dedupTx(t, func(ctx context.Context, tx pgx.Tx, db pgtest.DB) {
		if _, err := tx.Exec(ctx, `insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at, hits, last_hit_at)
			values ('q', 'old', 'k1', 7, now() - interval '2 hours', now() - interval '1 hour', 4, now() - interval '90 minutes'),
			       ('q', 'orphan', 'k1', null, now(), now() + interval '1 hour', 0, null)`); err != nil {
			t.Fatal(err)
		}
		got, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "old", Key: "k2", Count: 1, Window: time.Minute}, {ID: "orphan", Key: "k3", Count: 1}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !got["old"].Claimed || !got["orphan"].Claimed {
			t.Fatalf("claims of an expired record and of one without an event: %+v", got)
		}
		var key string
		var hits, us int64
		if err := tx.QueryRow(ctx, `select key, hits, (extract(epoch from expires_at - sent_at) * 1e6)::bigint
			from partitionq.dedup where dedup_id = 'old'`).Scan(&key, &hits, &us); err != nil {
			t.Fatal(err)
		}
		if window := time.Duration(us) * time.Microsecond; key != "k2" || hits != 0 || window != time.Minute {
			t.Errorf("the expired record claimed again: key %q, hits %d, window %s; want k2, 0, 1m", key, hits, window)
		}
	})
}

// expire_dedup deletes at most its limit, oldest first, and only expired
// records; called again it goes on.
func TestExpireDedupIsBounded(t *testing.T) {
	dedupTx(t, func(ctx context.Context, tx pgx.Tx, _ pgtest.DB) {
		if _, err := tx.Exec(ctx, `insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at)
			select 'q', 'old-' || g, 'k', g, now() - interval '2 hours', now() - interval '1 hour' + g * interval '1 second' from generate_series(1, 7) g
			union all
			select 'q', 'live-' || g, 'k', g, now(), now() + interval '1 hour' from generate_series(1, 3) g`); err != nil {
			t.Fatal(err)
		}
		for _, want := range []int{5, 2, 0} {
			n, err := store.ExpireDedup(ctx, tx, 5)
			if err != nil || n != want {
				t.Fatalf("expire: %d, %v; want %d", n, err, want)
			}
		}
		var left []string
		rows, err := tx.Query(ctx, `select dedup_id from partitionq.dedup order by 1`)
		if err != nil {
			t.Fatal(err)
		}
		if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(left) != 3 || left[0] != "live-1" {
			t.Fatalf("left after expiry: %v, %v", left, err)
		}
		if err := inSavepoint(t, ctx, tx, func(tx pgx.Tx) error { _, err := store.ExpireDedup(ctx, tx, 0); return err }); sqlState(err) != "22023" {
			t.Errorf("expire with a limit of 0: %v", err)
		}
	})
}

func TestDedupWindowOfAQueue(t *testing.T) {
	dedupTx(t, func(ctx context.Context, tx pgx.Tx, _ pgtest.DB) {
		if w, err := store.DedupWindow(ctx, tx, "q"); err != nil || w != store.DedupWindowDefault {
			t.Fatalf("window before one is set: %s, %v", w, err)
		}
		for _, w := range []time.Duration{90 * time.Minute, 1500 * time.Millisecond} {
			if err := store.SetDedupWindow(ctx, tx, "q", w); err != nil {
				t.Fatal(err)
			}
			if got, err := store.DedupWindow(ctx, tx, "q"); err != nil || got != w {
				t.Fatalf("window: %s, %v; want %s", got, err, w)
			}
		}
		got, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "a", Key: "k", Count: 1}}, false)
		if err != nil || !got["a"].Claimed {
			t.Fatal(got, err)
		}
		var us int64
		if err := tx.QueryRow(ctx, `select (extract(epoch from expires_at - sent_at) * 1e6)::bigint from partitionq.dedup`).Scan(&us); err != nil || us != 1500000 {
			t.Errorf("a claim's window: %dµs, %v; want the queue's 1.5s", us, err)
		}
	})
}

// The claim's fast path (a plain insert when no id has a record) meets a
// concurrent send of the same id: it waits for it, and when that send
// commits it fails with ErrClaimRace; claimed again with upsert, the id is
// a duplicate. When the concurrent send rolls back, the fast path claims.
func TestClaimRace(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 4)
	ctx := context.Background()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, db.SQL(`select pgq.create_queue('q')`)); err != nil {
		t.Fatal(err)
	}
	claimX := func(tx pgx.Tx, upsert bool) (store.DedupOutcome, error) {
		got, err := store.ClaimDedup(ctx, tx, "q", []store.DedupClaim{{ID: "x", Key: "k", Count: 1}}, upsert)
		return got["x"], err
	}
	for _, commit := range []bool{true, false} {
		if _, err := pool.Exec(ctx, `delete from partitionq.dedup`); err != nil {
			t.Fatal(err)
		}
		t1, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o, err := claimX(t1, false); err != nil || !o.Claimed {
			t.Fatalf("first claim: %+v, %v", o, err)
		}
		ev := insertEvent(t, ctx, t1, db, "k")
		if err := store.RecordDedup(ctx, t1, db.Schema, "q", []string{"x"}, []int64{ev}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			o   store.DedupOutcome
			err error
		}
		done := make(chan result, 1)
		t2, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			o, err := claimX(t2, false)
			done <- result{o, err}
		}()
		pgtest.WaitFor(t, 20*time.Second, "the second claim to wait", func() (bool, error) {
			var n int
			err := pool.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).Scan(&n)
			return n == 1, err
		})
		if commit {
			err = t1.Commit(ctx)
		} else {
			err = t1.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		_ = t2.Rollback(ctx)
		if !commit {
			if r.err != nil || !r.o.Claimed {
				t.Fatalf("the waiting claim after the first rolled back: %+v, %v; want it claimed", r.o, r.err)
			}
			continue
		}
		if !errors.Is(r.err, store.ErrClaimRace) {
			t.Fatalf("the waiting fast claim after the first committed: %+v, %v; want ErrClaimRace", r.o, r.err)
		}
		t3, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o, err := claimX(t3, true)
		_ = t3.Rollback(ctx)
		if err != nil || o.Claimed || o.EvID != ev {
			t.Fatalf("the claim with upsert: %+v, %v; want a duplicate of %d", o, err, ev)
		}
	}
}
