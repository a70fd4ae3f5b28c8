package ticker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/partitionq/internal/ticker"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Expired dedup records are removed by maintenance in bounded work: one
// maintenance round removes store.ExpireDedupBatch of them at most, and
// Run, while a round found a full batch, removes another batch each tick
// round until none is left; records within their window stay.
func TestMaintenanceExpiresDedupRecordsInBoundedBatches(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	const expired, live = 2*store.ExpireDedupBatch + 2000, 10
	if _, err := pool.Exec(ctx, `insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at)
		select 'q', 'old-' || g, 'k', g, now() - interval '2 hours', now() - interval '1 hour' from generate_series(1, $1) g
		union all
		select 'q', 'live-' || g, 'k', g, now(), now() + interval '1 hour' from generate_series(1, $2) g`, expired, live); err != nil {
		t.Fatal(err)
	}
	count := func() (old, fresh int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `select count(*) filter (where expires_at <= now()), count(*) filter (where expires_at > now())
			from partitionq.dedup`).Scan(&old, &fresh); err != nil {
			t.Fatal(err)
		}
		return old, fresh
	}
	if err := ticker.Maintain(ctx, eng, pool); err != nil {
		t.Fatal(err)
	}
	if old, fresh := count(); old != expired-store.ExpireDedupBatch || fresh != live {
		t.Fatalf("after one maintenance round: %d expired and %d live records, want %d and %d", old, fresh, expired-store.ExpireDedupBatch, live)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker.Run(runCtx, ticker.Config{Eng: eng, Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Interval: 10 * time.Millisecond, MaintInterval: time.Hour})
	}()
	pgtest.WaitFor(t, 30*time.Second, "every expired record removed", func() (bool, error) {
		old, _ := count()
		return old == 0, nil
	})
	stop()
	<-done
	if _, fresh := count(); fresh != live {
		t.Errorf("%d live records left, want %d", fresh, live)
	}
}

// lockRetryQueue locks the engine's retry queue in exclusive mode (reads go
// on; maint_retry_events, which deletes from it, waits) until the returned
// transaction ends (at the latest when the test does).
func lockRetryQueue(t *testing.T, pool *pgxpool.Pool, db pgtest.DB) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback(ctx) }) // only a lock
	if _, err := lock.Exec(ctx, "lock table "+db.Schema+".retry_queue in exclusive mode"); err != nil {
		t.Fatal(err)
	}
	return lock
}

func migrated(t *testing.T) (pgtest.DB, *pgxpool.Pool, *engine.Engine) {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 6)
	if err := store.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	return db, pool, eng
}

// Maintenance never holds up the ticks: while a table it must change is
// locked (an operator's lock, a long transaction), its rounds fail after
// their lock timeout and are tried again, and the ticks go on all along.
// (They stopped: a round ran between two ticks and waited for the lock
// with no timeout, and no tick was made until it was released.)
func TestTicksGoOnWhileMaintenanceWaitsForALock(t *testing.T) {
	t.Parallel()
	db, pool, eng := migrated(t)
	ctx := context.Background()
	if _, err := eng.CreateQueue(ctx, pool, "q"); err != nil {
		t.Fatal(err)
	}
	if err := eng.SetQueueConfig(ctx, pool, "q", "ticker_max_count", "1"); err != nil {
		t.Fatal(err)
	}
	// A tick round's look for due retries goes on; maintenance waits.
	lock := lockRetryQueue(t, pool, db)
	ticks := func() (n int64, err error) {
		err = pool.QueryRow(ctx, db.SQL(`select count(*) from pgq.tick t join pgq.queue q on q.queue_id = t.tick_queue where q.queue_name = 'q'`)).Scan(&n)
		return n, err
	}
	before, err := ticks()
	if err != nil {
		t.Fatal(err)
	}
	var log pgtest.SyncBuffer
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker.Run(runCtx, ticker.Config{Eng: eng, Pool: pool, Log: slog.New(slog.NewTextHandler(&log, nil)),
			Interval: 20 * time.Millisecond, MaintInterval: 50 * time.Millisecond})
	}()
	defer func() { stop(); <-done }()
	pgtest.WaitFor(t, 30*time.Second, "a maintenance round to give up waiting for the lock", func() (bool, error) {
		// An event for each tick (ticker_max_count 1).
		_, err := pool.Exec(ctx, db.SQL(`select pgq.insert_event('q', 't', 'd')`))
		return strings.Contains(log.String(), "lock timeout"), err
	})
	after, err := ticks()
	if err != nil {
		t.Fatal(err)
	}
	// A round waits 5 s for the lock; a tick every 20 ms makes many more.
	if after-before < 10 {
		t.Fatalf("%d ticks made while maintenance waited for the lock, want the ticks to go on (10 or more)", after-before)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "moving retry events back") {
		t.Errorf("the warning does not name the step that waited:\n%s", log.String())
	}
}

// A maintenance round whose session ends in the middle (terminated, a
// failover) gives its turn back at once: the next round, on any ticker,
// runs. (It held the turn for the lease, 5 minutes then: giving it back
// used the dead session.) A round whose process died holds it only for
// the lease (a minute), renewed before each step.
func TestMaintenanceTurnOfARoundKilledMidway(t *testing.T) {
	db, pool, eng := migrated(t)
	ctx := context.Background()
	defer ticker.SetMaintLease(3 * time.Second)()
	expiredRecords := func(n int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at)
			select 'q', 'old-' || clock_timestamp() || '-' || g, 'k', g, now() - interval '2 hours', now() - interval '1 hour' from generate_series(1, $1) g`, n); err != nil {
			t.Fatal(err)
		}
	}
	left := func() (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `select count(*) from partitionq.dedup`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	expiredRecords(5)

	// A round waits for a lock; its session is terminated.
	lock := lockRetryQueue(t, pool, db)
	res := make(chan error, 1)
	go func() { res <- ticker.Maintain(ctx, eng, pool) }()
	var pid int32
	pgtest.WaitFor(t, 30*time.Second, "the maintenance round waiting for the lock", func() (bool, error) {
		err := pool.QueryRow(ctx, `select pid from pg_stat_activity where datname = current_database()
			and wait_event_type = 'Lock' and query like '%maint_retry_events%'`).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if _, err := pool.Exec(ctx, `select pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err == nil {
		t.Fatal("the round whose session was terminated reported no error")
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ticker.Maintain(ctx, eng, pool); err != nil {
		t.Fatal(err)
	}
	if n := left(); n != 0 {
		t.Fatalf("%d expired records left after the round that followed a terminated one: the turn was not given back", n)
	}

	// A round that died without a word (its process killed) holds the turn
	// until its lease runs out, then the next round runs.
	expiredRecords(5)
	if _, err := pool.Exec(ctx, `update partitionq.ticker_turn set holder = 'dead', until = clock_timestamp() + interval '3 seconds' where name = 'maint'`); err != nil {
		t.Fatal(err)
	}
	if err := ticker.Maintain(ctx, eng, pool); err != nil {
		t.Fatal(err)
	}
	if n := left(); n != 5 {
		t.Fatalf("%d expired records left, want 5: a round ran while another held the turn", n)
	}
	pgtest.WaitFor(t, 30*time.Second, "a round once the dead round's lease ran out", func() (bool, error) {
		err := ticker.Maintain(ctx, eng, pool)
		return left() == 0, err
	})
}
