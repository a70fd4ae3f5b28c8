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

// A queue dropped with the engine's own drop_queue leaves its group's
// records behind; setting the group up again on the new queue, with another
// N, starts afresh (FuzzSetup found it: "engine consumers for 16 slots,
// which is none of its generations").
func TestSetupAfterTheQueueWasDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "d", Group: "g", Slots: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.drop_queue('d', true)`)); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "d", Group: "g", Slots: 5})
	if err != nil {
		t.Fatalf("setup after drop_queue: %v", err)
	}
	if !res.QueueCreated || res.Slots != 5 || res.Registered != 5 || res.Group.Generation != 1 {
		t.Fatalf("setup after drop_queue made %+v, want a new queue with generation 1 of 5 slots, all registered", res)
	}
	g, err := b.client.Group(b.ctx, "d", "g")
	if err != nil || g.Slots != 5 || g.Resize != nil {
		t.Fatalf("the group after drop_queue and setup: %+v, %v", g, err)
	}
}

func TestSlotOfPinned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Pinned so that a change of hash function or of sign handling cannot
	// pass unnoticed: hashtextextended('tenant-1', 0) = -5960342201233910903,
	// whose remainder by 4 is -3 in SQL, normalized to 1.
	cases := []struct {
		key  string
		n    int
		want int
	}{
		{"tenant-1", 1, 0}, {"tenant-1", 4, 1}, {"tenant-1", 8, 1}, {"tenant-2", 4, 3}, {"acme", 16, 14},
	}
	for _, c := range cases {
		got, err := b.client.SlotOf(b.ctx, c.key, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("SlotOf(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}
