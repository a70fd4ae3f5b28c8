package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// What became of a queue's very first event, when the queue ticked before
// it was sent: those ticks record the event sequence's start (the engine
// reads its last_value before any id is handed out), which is the first
// event's id. event_fate took the first of them, made before the event's
// transaction, as the upper bound of its lookup, found nothing, and an
// operator's skip of that event, once handled, said "the queue has no
// event 1" (until schema version 10, whose event_fate also looks again
// without an upper bound when the event is not below it).
func TestEventFateOfAQueuesFirstEventAfterEmptyTicks(t *testing.T) {
	testEventFate(t, false)
}

// What became of an event that had its id before a tick and its txid
// after it (an event takes its id, then its transaction a txid with its
// first write): the tick records the id as handed out, and its snapshot
// is below the event's txid. event_fate took it as the upper bound of its
// lookup and said no_event; it now looks again without a bound.
func TestEventFateOfAnEventWhoseTxidCameAfterATick(t *testing.T) {
	testEventFate(t, true)
}

// testEventFate sends an event to a queue of its own that ticked before,
// and wants event_fate to find it before and after a consumer reads it;
// late: its id is taken, the queue ticks, then it is inserted with it.
func testEventFate(t *testing.T, late bool) {
	pool, eng := sharedDB(t)
	ctx := context.Background()
	queue := fmt.Sprintf("fate_%d", resizeQueues.Add(1))
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_idle_period", "1 millisecond"); err != nil {
			return err
		}
		_, err := eng.RegisterConsumer(ctx, tx, queue, "c")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ticks := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, fmt.Sprintf(`select count(*) from %[1]s.tick t join %[1]s.queue q on q.queue_id = t.tick_queue
			where q.queue_name = $1`, eng.Schema()), queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// tick runs the ticker until the queue has a new tick (the idle
	// period is a millisecond: a run within it does not tick).
	tick := func() {
		t.Helper()
		n := ticks()
		deadline := time.Now().Add(10 * time.Second)
		for ticks() == n {
			if time.Now().After(deadline) {
				t.Fatalf("the queue did not tick in 10 s")
			}
			if _, err := eng.Ticker(ctx, pool); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick() // an empty tick, made before the event's transaction
	tick()
	var id int64
	if late {
		if _, err := eng.Insert(ctx, pool, queue, engine.NewEvent{Key: "first", Type: "t", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
		tick()
		var seq string
		if err := pool.QueryRow(ctx, fmt.Sprintf(`select queue_event_seq from %s.queue where queue_name = $1`, eng.Schema()), queue).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `select nextval($1::regclass)`, seq).Scan(&id); err != nil { // no txid: a sequence is not transactional
			t.Fatal(err)
		}
		tick() // records the id as handed out, with a snapshot below the event's txid
		if _, err := pool.Exec(ctx, fmt.Sprintf(`select %s.insert_event_raw($1, $2, now(), null, null, 't', '{}', 'k', null, null, null)`, eng.Schema()),
			queue, id); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if id, err = eng.Insert(ctx, pool, queue, engine.NewEvent{Key: "k", Type: "t", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	if fate, err := store.EventFate(ctx, pool, eng.Schema(), queue, "c", "k", id); err != nil || fate != store.FateUnfinished {
		t.Fatalf("the fate of event %d, not yet read: %q, %v; want %q", id, fate, err, store.FateUnfinished)
	}
	tick() // the tick that holds the event
	// The consumer reads and finishes its batches up to the tick that
	// holds the event (the first may be the empty ticks').
	for done := false; !done; {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			bs, err := eng.NextBatches(ctx, tx, queue, []string{"c"}, 0)
			if err != nil {
				return err
			}
			if len(bs) != 1 || bs[0].ID == 0 {
				done = true
				return nil
			}
			_, err = eng.FinishBatches(ctx, tx, []int64{bs[0].ID})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fate, err := store.EventFate(ctx, pool, eng.Schema(), queue, "c", "k", id); err != nil || fate != store.FateFinished {
		t.Fatalf("the fate of event %d, handled: %q, %v; want %q", id, fate, err, store.FateFinished)
	}
	if fate, err := store.EventFate(ctx, pool, eng.Schema(), queue, "c", "other", id); err != nil || fate != store.FateOtherKey {
		t.Fatalf("the fate of event %d asked as another key's: %q, %v; want %q", id, fate, err, store.FateOtherKey)
	}
}
