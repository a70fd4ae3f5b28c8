package engine_test

import (
	"context"
	"testing"

	"github.com/partitionq/partitionq/test/pgtest"
)

// Moving idle consumers ahead (what a worker does for its idle slots
// about once a second, and before each batch of a skipped slot) reads the
// moved consumers' rows, not every consumer of the queue: idle slots all
// stand at the same tick, and a join of the consumers asked about with
// the subscriptions at their ticks read all of them for each (2,325 rows
// here, for 8 consumers of 256).
func TestAdvanceReadsOnlyTheMovedConsumers(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, n = "advance", 256
	sc := eng.Schema()
	all := slotConsumers(n)
	newQueue(t, pool, eng, queue, all...)
	from, err := eng.LastTick(ctx, pool, queue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'e', 'd', 'k', null, null, null)`, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Ticker(ctx, pool); err != nil {
		t.Fatal(err)
	}
	to, err := eng.LastTick(ctx, pool, queue)
	if err != nil || to <= from {
		t.Fatalf("no new tick after %d: %d, %v", from, to, err)
	}
	moved := []string{all[3], all[40], all[41], all[100], all[170], all[200], all[254], all[255]}
	froms, tos := make([]int64, len(moved)), make([]int64, len(moved))
	for i := range moved {
		froms[i], tos[i] = from, to
	}
	froms[7] = to - 100 // not where it stands: left alone

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ok, err := eng.Advance(ctx, tx, queue, moved, froms, tos)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range ok {
		if o != (i != 7) {
			t.Errorf("consumer %s moved: %v", moved[i], o)
		}
	}
	read := pgtest.RowsRead(t, tx, sc+".subscription", sc+".consumer")
	// At most one pass over the queue's consumers (the planner may find
	// a scan of a small table cheaper than its index) and a few rows for
	// each consumer moved.
	if want := int64(n + 8*len(moved)); read > want {
		t.Errorf("moving %d consumers of %d read %d consumer and subscription rows, want at most %d", len(moved), n, read, want)
	}
	pos, err := eng.Positions(ctx, tx, queue, moved)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pos {
		if want := map[bool]int64{true: to, false: from}[i != 7]; p != want {
			t.Errorf("consumer %s stands at tick %d, want %d", moved[i], p, want)
		}
	}
}
