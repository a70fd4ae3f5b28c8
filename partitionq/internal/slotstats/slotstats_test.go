package slotstats

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The writes and reads a worker makes in every flush and finish touch the
// rows of the slots they are about, not the group's, on tables the
// planner has no statistics of (a group just set up): the rate write
// deleted old buckets by reading every bucket of the group (a minute of
// 256 slots: 15,360 rows, for every write), and the progress read read
// every progress row of the group for each slot asked about.
func TestSlotWritesReadOnlyTheirSlotsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.New(t), 4)
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// A minute of buckets for every slot, and 10 buckets past Keep for
	// slot 3 (the write deletes them); a progress row for every slot.
	if _, err := pool.Exec(ctx, `
		insert into partitionq.slot_rate (queue, grp, generation, slot, sec, handled, failed)
		select 'q', 'g', 1, s, floor(extract(epoch from now()))::bigint - k, 1, 0 from generate_series(0, 255) s, generate_series(1, 60) k;
		insert into partitionq.slot_rate (queue, grp, generation, slot, sec, handled, failed)
		select 'q', 'g', 1, 3, floor(extract(epoch from now()))::bigint - 200 - k, 1, 0 from generate_series(1, 10) k;
		insert into partitionq.slot_progress (queue, grp, generation, slot, batch_id) select 'q', 'g', 1, s, 1000 + s from generate_series(0, 255) s`); err != nil {
		t.Fatal(err)
	}
	slots := []int32{3, 40, 41, 100, 170, 200, 254, 255}
	ones := []int64{1, 1, 1, 1, 1, 1, 1, 1}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	QueueRecord(b, "q", "g", 1, slots, ones, make([]int64, len(slots)))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	// 10 old buckets found and deleted (read twice), 8 current buckets
	// added to (a conflict each): 36, whatever the other buckets.
	if got, want := pgtest.RowsRead(t, tx, "partitionq.slot_rate"), int64(2*10+2*len(slots)); got > want {
		t.Errorf("a rate write for %d slots read %d bucket rows, want at most %d", len(slots), got, want)
	}
	var old int
	if err := tx.QueryRow(ctx, `select count(*) from partitionq.slot_rate where slot = 3 and sec < floor(extract(epoch from now()))::bigint - 120`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old != 0 {
		t.Errorf("%d buckets older than Keep left after a write", old)
	}
	before := pgtest.RowsRead(t, tx, "partitionq.slot_progress")
	batches := make([]int64, len(slots))
	for i, s := range slots {
		batches[i] = 1000 + int64(s)
	}
	batches[0] = 1 // not slot 3's open batch: no progress of it
	sets, unreadable, err := LoadProgress(ctx, tx, "q", "g", 1, slots, batches)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != len(slots)-1 || len(unreadable) != 0 {
		t.Errorf("progress of %d slots read (%d unreadable), want %d", len(sets), len(unreadable), len(slots)-1)
	}
	if got, want := pgtest.RowsRead(t, tx, "partitionq.slot_progress")-before, int64(len(slots)); got > want {
		t.Errorf("the progress of %d slots read %d progress rows, want at most %d", len(slots), got, want)
	}
}
