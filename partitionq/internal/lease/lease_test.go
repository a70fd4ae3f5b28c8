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
		Poll: time.Second, OnGain: func(int, int64, string) {}, OnLose: func(int, string) {}})
	if err := h.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// migrated returns a pool on a new database with partitionq's schema.
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.New(t), 8)
	if err := store.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

func owned(h *Holder) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.owned)
}

// A worker takes only the slot rows of the generation it runs, by number:
// a run of an earlier generation with the same N (4 slots, then 8, then 4
// again), still stopping, must not take the new generation's slots, whose
// parents it does not wait for. The control: the same claim takes them
// while its generation is the current one.
func TestClaimTakesOnlyTheSlotsOfItsGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migrated(t)
	// Generation 1 of the group: 4 slots, their rows free.
	if _, err := pool.Exec(ctx, `insert into partitionq.generation (queue, grp, slots, number) values ('q', 'g', 4, 1);
		insert into partitionq.slot (queue, grp, generation, n, slot) select 'q', 'g', 1, 4, s from generate_series(0, 3) s`); err != nil {
		t.Fatal(err)
	}
	first := newHolder(t, pool, "first", 4, 1)
	first.step(ctx)
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
		insert into partitionq.slot (queue, grp, generation, n, slot, epoch) select 'q', 'g', 3, 4, s, 3::bigint << 32 from generate_series(0, 3) s`); err != nil {
		t.Fatal(err)
	}
	first.step(ctx)
	if got := owned(first); got != 0 {
		t.Fatalf("a run of generation 1 took %d slots of generation 3 (same N)", got)
	}
	third := newHolder(t, pool, "third", 4, 3)
	third.step(ctx)
	if got := owned(third); got != 4 {
		t.Fatalf("a run of generation 3 took %d of its 4 slots", got)
	}
	if e, _ := third.Epoch(0); e>>32 != 3 {
		t.Errorf("generation 3's slot 0 at epoch %d, want one of generation 3's (3 << 32 and up)", e)
	}
}

// Two workers register and claim the same free slots at once, as every
// worker does at a resize's cutover (each generation's run registers a
// worker row of its own, then claims at once). The claim that waits on the
// slot rows of the other must see, once they are free, that they now
// belong to a worker it had not seen registered when its statement began:
// it must not take them from it. Here the other worker registers and takes
// slot 0 in a transaction held open until the claim waits on the row; a
// claim that judged the new owner by its statement's first snapshot found
// no such worker and took the slot (two owners at once; CI saw it once as
// an overlap in TestResizeUnderFaults).
func TestAClaimDoesNotTakeASlotFromAWorkerThatRegisteredWhileItWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migrated(t)
	if _, err := pool.Exec(ctx, `insert into partitionq.generation (queue, grp, slots, number) values ('q', 'g', 1, 1);
		insert into partitionq.slot (queue, grp, generation, n, slot, epoch) values ('q', 'g', 1, 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	late := newHolder(t, pool, "late", 1, 1)

	// The other worker: registered and taking slot 0, not committed yet.
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	var otherID, otherPid int64
	if err := other.QueryRow(ctx, `insert into partitionq.worker (identity, host, os_pid, backend_pid, backend_start, lease_until, schema_version)
		select 'other', 'h', 1, a.pid, a.backend_start, clock_timestamp() + interval '1 minute', $1
		  from pg_stat_activity a where a.pid = pg_backend_pid()
		returning id, backend_pid`, store.Latest()).Scan(&otherID, &otherPid); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `update partitionq.slot set worker_id = $1, epoch = epoch + 1 where queue = 'q' and grp = 'g'`, otherID); err != nil {
		t.Fatal(err)
	}

	claimed := make(chan struct{})
	go func() { defer close(claimed); late.step(ctx) }()
	// Wait until the claim waits on the other's lock, then let it go.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `select exists (select 1 from pg_locks l join pg_stat_activity a on a.pid = l.pid
			where not l.granted and l.pid <> $1 and a.datname = current_database())`, otherPid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case <-claimed:
			t.Fatal("the claim ended before waiting on the slot the other worker holds")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-claimed

	if got := owned(late); got != 0 {
		t.Errorf("the late claim took the slot the other worker had just taken")
	}
	var owner int64
	if err := pool.QueryRow(ctx, `select worker_id from partitionq.slot where queue = 'q' and grp = 'g'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != otherID {
		t.Errorf("slot 0 names worker %d, want the other worker %d", owner, otherID)
	}
}

// The ownership checks a worker makes in every flush and finish read the
// rows of the slots they check, not the group's: on a table the planner
// has no statistics of yet (a group just set up), a join with the slots
// asked about read every slot row of the group for each of them (2,048
// rows for 8 slots at N = 256, ten times the time).
func TestOwnershipChecksReadOnlyTheirSlotsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migrated(t)
	const n = 256
	if _, err := pool.Exec(ctx, `insert into partitionq.generation (queue, grp, slots, number) values ('q', 'g', 256, 1);
		insert into partitionq.slot (queue, grp, generation, n, slot, epoch) select 'q', 'g', 1, 256, s, 0 from generate_series(0, 255) s`); err != nil {
		t.Fatal(err)
	}
	h := newHolder(t, pool, "w", n, 1)
	h.step(ctx)
	slots, epochs := []int{3, 40, 41, 100, 170, 200, 254, 255}, make([]int64, 8)
	for i, s := range slots {
		e, ok := h.Epoch(s)
		if !ok {
			t.Fatalf("slot %d not taken", s)
		}
		epochs[i] = e
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	owned, err := Owned(ctx, tx, "q", "g", 1, slots, epochs)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != len(slots) {
		t.Fatalf("Owned found %d of the %d slots owned", len(owned), len(slots))
	}
	if err := Fence(ctx, tx, "q", "g", 1, slots, epochs); err != nil {
		t.Fatal(err)
	}
	if read, want := pgtest.RowsRead(t, tx, "partitionq.slot"), int64(2*len(slots)); read > want {
		t.Errorf("Owned and Fence of %d slots read %d rows of partitionq.slot, want at most %d", len(slots), read, want)
	}
	// The control: a stale epoch is refused.
	epochs[0]--
	if err := Fence(ctx, tx, "q", "g", 1, slots, epochs); err != ErrNotOwner {
		t.Errorf("Fence with a stale epoch: %v, want ErrNotOwner", err)
	}
}
