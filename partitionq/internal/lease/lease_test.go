package lease

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// newHolder registers a holder of slots 0 to n-1 of the generation with n
// slots and the given number, whose claims the test makes itself.
func newHolder(t *testing.T, pool *pgxpool.Pool, identity string, n, generation int) *Holder {
	t.Helper()
	slots := make([]int, n)
	for i := range slots {
		slots[i] = i
	}
	h := New(Config{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Queue: "q", Group: "g", N: n, Generation: generation,
		Slots: slots, Identity: identity, SchemaVersion: store.Latest(), TTL: 5 * time.Second, Renew: time.Second, Margin: time.Second,
		Poll: time.Second, OnGain: func(int, int64) {}, OnLose: func(int, string) {}})
	if err := h.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func owned(h *Holder) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.owned)
}

// A worker takes a slot only while the group's generation with the slot's
// N is the one it runs: a run of an earlier generation with the same N (4
// slots, then 8, then 4 again), still stopping, must not take the new
// generation's slots, whose parents it does not wait for. The control:
// the same claim takes them while its generation is the current one.
func TestClaimTakesOnlyTheSlotsOfItsGeneration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Generation 1 of the group: 4 slots, their rows free.
	if _, err := pool.Exec(ctx, `insert into partitionq.generation (queue, grp, slots, number) values ('q', 'g', 4, 1);
		insert into partitionq.slot (queue, grp, n, slot) select 'q', 'g', 4, s from generate_series(0, 3) s`); err != nil {
		t.Fatal(err)
	}
	first := newHolder(t, pool, "first", 4, 1)
	first.claim(ctx)
	if got := owned(first); got != 4 {
		t.Fatalf("a run of the current generation took %d of its 4 slots", got)
	}
	if err := first.Release(ctx, []int{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	first.owned = map[int]int64{}
	first.mu.Unlock()

	// The group is generation 3 now (4 to 8, then 8 to 4): its slot rows
	// are new, at the epochs of generation 3.
	if _, err := pool.Exec(ctx, `delete from partitionq.slot where queue = 'q' and grp = 'g';
		update partitionq.generation set number = 3 where queue = 'q' and grp = 'g' and slots = 4;
		insert into partitionq.slot (queue, grp, n, slot, epoch) select 'q', 'g', 4, s, 3::bigint << 32 from generate_series(0, 3) s`); err != nil {
		t.Fatal(err)
	}
	first.claim(ctx)
	if got := owned(first); got != 0 {
		t.Fatalf("a run of generation 1 took %d slots of generation 3 (same N)", got)
	}
	third := newHolder(t, pool, "third", 4, 3)
	third.claim(ctx)
	if got := owned(third); got != 4 {
		t.Fatalf("a run of generation 3 took %d of its 4 slots", got)
	}
	if e, _ := third.Epoch(0); e>>32 != 3 {
		t.Errorf("generation 3's slot 0 at epoch %d, want one of generation 3's (3 << 32 and up)", e)
	}
}
