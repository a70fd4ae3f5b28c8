package ticker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

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
