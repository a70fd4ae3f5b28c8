// The cross-engine suite: the same behaviour on PgQ and PgQue (batch chunking, table rotation, foreign producers, keyless retries), spanning send, ticker and worker, so it is named for the engines, not one file.

package partitionq_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// One batch of more events than a slot reads from the engine at a time
// (partitionq.ChunkSize, 1000) is read chunk by chunk from the batch cursor, whose
// rows carry the engine's own ev_txid: bigint on PgQ, xid8 on PgQue (which
// a scan into int64 cannot read, so every batch was retried forever).
func TestBatchLargerThanAChunk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	const keys, perKey = 50, 2*partitionq.ChunkSize/50 + 10
	var ms []partitionq.Message
	sent := map[string][]string{}
	for i := range perKey {
		for k := range keys {
			key, p := fmt.Sprintf("tenant-%d", k), fmt.Sprintf(`{"seq":%d}`, i)
			ms = append(ms, partitionq.Message{Key: key, Payload: []byte(p)})
			sent[key] = append(sent[key], p)
		}
	}
	// One transaction, sent before the worker's ticker runs: one batch.
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec, Limits: partitionq.LimitsConfig{Concurrency: 8}})
	rec.waitTotal(t, len(ms))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.total != len(ms) {
		t.Errorf("handled %d events, sent %d", rec.total, len(ms))
	}
	for key, want := range sent {
		if got := rec.byKey[key]; !reflect.DeepEqual(got, want) {
			t.Fatalf("key %s handled %d events out of order or incomplete, sent %d", key, len(got), len(want))
		}
	}
	for id, n := range rec.ids {
		if n != 1 {
			t.Errorf("event %d handled %d times", id, n)
		}
	}
}

// The ticker's maintenance rotates the queue's event tables through the
// engine's own steps (maint_operations: rotate step 1, then step 2 in a
// transaction of its own), on PgQ and PgQue alike, and events keep coming
// through the tables it switches to.
func TestMaintenanceRotatesTheEventTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.set_queue_config('q', 'rotation_period', '1 millisecond')`)); err != nil {
		t.Fatal(err)
	}
	table := func() (cur int, step2Done bool) {
		t.Helper()
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select queue_cur_table, queue_switch_step2 is not null from pgq.queue where queue_name = 'q'`)).Scan(&cur, &step2Done); err != nil {
			t.Fatal(err)
		}
		return cur, step2Done
	}
	first, _ := table()
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec})
	seen := map[int]bool{first: true}
	n := 0
	pgtest.WaitFor(t, 60*time.Second, "the event tables to rotate through all three", func() (bool, error) {
		// A rotation waits until every consumer has passed the last one:
		// events keep the slots' consumers moving.
		n++
		if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: fmt.Sprintf("k%d", n%5), Payload: []byte(fmt.Sprint(n))}); err != nil {
			return false, err
		}
		rec.waitTotal(t, n)
		if err := b.client.TickOnce(b.ctx); err != nil {
			return false, err
		}
		cur, step2 := table()
		seen[cur] = step2
		return len(seen) == 3 && step2, nil
	})
	before := rec.count()
	b.send(t, "after", 1, 2, 3)
	rec.waitTotal(t, before+3)
}

// Events written by other code straight into the queue, with the engine's
// own insert_event from plain SQL (as a producer in any language does), are
// routed and ordered like partitionq's own: each key on its slot, in order
// through a failure that pauses it; events without a key (NULL ev_extra1,
// from insert_event's 3-argument form or a NULL key) all on slot 0, in
// order among themselves, as upstream PgQue routes them.
func TestForeignProducersInPlainSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 4
	b.group(t, n)
	rec := newRecorder(t)
	rec.fail = func(ev *partitionq.Event) error {
		if strings.HasPrefix(string(ev.Payload), "fail-once") && ev.Attempt == 1 {
			return errBoom
		}
		return nil
	}
	b.worker(t, partitionq.WorkerConfig{Handler: rec, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}, Limits: partitionq.LimitsConfig{Concurrency: 4}})
	keyed := b.db.SQL(`select pgq.insert_event('q', 'Foreign', $1, $2, null, null, null)`)
	unkeyed := b.db.SQL(`select pgq.insert_event('q', 'Foreign', $1)`)
	keys := []string{"tenant-1", "tenant-2", "acme", "ключ"}
	sent := map[string][]string{}
	total := 0
	for round := range 6 {
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			for i := range 5 {
				p := fmt.Sprintf("%d-%d", round, i)
				if i == 2 && round%2 == 0 {
					p = "fail-once-" + p
				}
				var err error
				switch {
				case i < len(keys):
					_, err = tx.Exec(b.ctx, keyed, p, keys[(round+i)%len(keys)])
					sent[keys[(round+i)%len(keys)]] = append(sent[keys[(round+i)%len(keys)]], p)
				case round%2 == 0:
					_, err = tx.Exec(b.ctx, keyed, p, nil)
					sent[""] = append(sent[""], p)
				default:
					_, err = tx.Exec(b.ctx, unkeyed, p)
					sent[""] = append(sent[""], p)
				}
				if err != nil {
					return err
				}
				total++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec.waitTotal(t, total)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for key, want := range sent {
		if got := rec.byKey[key]; !reflect.DeepEqual(got, want) {
			t.Errorf("key %q handled %v, sent %v", key, got, want)
		}
		wantSlot := 0
		if key != "" {
			var err error
			if wantSlot, err = b.client.SlotOf(b.ctx, key, n); err != nil {
				t.Fatal(err)
			}
		}
		if got := rec.slotOf[key]; got != wantSlot {
			t.Errorf("key %q handled on slot %d, want %d", key, got, wantSlot)
		}
	}
}

// Under the skip policy a failed event comes back through the engine's
// retry mover, which re-inserts it with the key it was parked with: an
// event without a key must come back without one, or it would route to
// another slot than the one that retries it, and be lost.
func TestEventWithoutKeyRetriedOnItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	rec := newRecorder(t)
	rec.fail = func(ev *partitionq.Event) error {
		if ev.Attempt == 1 {
			return errBoom
		}
		return nil
	}
	b.worker(t, partitionq.WorkerConfig{
		Handler: rec,
		Retry:   partitionq.RetryConfig{Policy: partitionq.PolicyRetryLater, BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond},
	})
	for _, p := range []string{"a", "b"} {
		if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.insert_event('q', 'Foreign', $1)`), p); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitTotal(t, 2)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.byKey[""]; len(got) != 2 || rec.slotOf[""] != 0 {
		t.Fatalf("events without a key handled %v on slot %d, want both on slot 0", got, rec.slotOf[""])
	}
}
