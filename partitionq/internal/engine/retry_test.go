package engine_test

import (
	"context"
	"testing"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// Writing an event into a consumer's retry queue again (a write whose
// commit was lost with its connection may have committed) leaves the row
// written first and fails nothing; the other rows of the write go in.
func TestPutRetryAgainLeavesTheRowWrittenFirst(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, consumer = "putretry", "g#0/1"
	sc := eng.Schema()
	newQueue(t, pool, eng, queue, consumer)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'e', 'd', $2, null, null, null)`, queue, k); err != nil {
			t.Fatal(err)
		}
	}
	tx, info := openBatch(t, pool, eng, queue, consumer)
	subs, err := eng.Subscriptions(ctx, tx, queue, consumer)
	if err != nil || len(subs) != 1 {
		t.Fatalf("the consumer's subscription: %v, %v", subs, err)
	}
	_, evs, err := eng.OpenRead(ctx, tx, engine.ReadSpec{Batch: info.ID, Sub: subs[0].SubID, Subs: []int32{subs[0].SubID}, N: 1}, 10)
	if err != nil || len(evs) != 3 {
		t.Fatalf("read %d events: %v", len(evs), err)
	}
	rows := func(retry int32, evs ...engine.SlotEvent) []engine.RetryRow {
		var rs []engine.RetryRow
		for _, ev := range evs {
			rs = append(rs, engine.RetryRow{Event: ev.Event, After: engine.Far, Retry: retry})
		}
		return rs
	}
	if err := eng.PutRetry(ctx, tx, queue, consumer, rows(1, evs[0], evs[1])); err != nil {
		t.Fatal(err)
	}
	if err := eng.PutRetry(ctx, tx, queue, consumer, rows(2, evs...)); err != nil {
		t.Fatalf("the same events written again: %v", err)
	}
	var n, first int
	if err := tx.QueryRow(ctx, `select count(*), count(*) filter (where ev_retry = 1) from `+sc+`.retry_queue where ev_owner = $1`,
		subs[0].SubID).Scan(&n, &first); err != nil {
		t.Fatal(err)
	}
	if n != 3 || first != 2 {
		t.Errorf("the retry queue holds %d rows, %d of them as first written; want 3 and 2", n, first)
	}
}
