package partitionq_test

import (
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// A queue Setup creates ticks whenever the ticker runs and events wait
// (ticker_max_lag TickMaxLagDefault, against PgQ's 3s); an existing queue
// keeps its own setting unless TickMaxLag is given.
func TestSetupGivesANewQueueShortTicks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	maxLag := func() time.Duration {
		t.Helper()
		var ms float64
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select extract(epoch from queue_ticker_max_lag) * 1000 from pgq.queue where queue_name = 'q'`)).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	res, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := maxLag(); got != partitionq.TickMaxLagDefault || res.TickMaxLag != partitionq.TickMaxLagDefault {
		t.Fatalf("a new queue's ticker_max_lag: %s (result %s), want %s", got, res.TickMaxLag, partitionq.TickMaxLagDefault)
	}
	if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.set_queue_config('q', 'ticker_max_lag', '2 seconds')`)); err != nil {
		t.Fatal(err)
	}
	if res, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "h", Slots: 2}); err != nil {
		t.Fatal(err)
	}
	if got := maxLag(); got != 2*time.Second || res.TickMaxLag != 0 {
		t.Fatalf("an existing queue's ticker_max_lag after a setup: %s (result %s), want its own 2s kept", got, res.TickMaxLag)
	}
	if res, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "h", Slots: 2, TickMaxLag: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := maxLag(); got != 50*time.Millisecond || res.TickMaxLag != 50*time.Millisecond {
		t.Fatalf("ticker_max_lag given: %s (result %s), want 50ms", got, res.TickMaxLag)
	}
}
