package partitionq_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// queueEvents returns the payload of every event of queue, by event id.
func (b *bundle) queueEvents(t *testing.T, queue string) map[int64]string {
	t.Helper()
	var pfx string
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = $1`), queue).Scan(&pfx); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(b.ctx, `select ev_id, coalesce(ev_data, '') from `+pfx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var data string
		if err := rows.Scan(&id, &data); err != nil {
			t.Fatal(err)
		}
		out[id] = data
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expireDedup moves the dedup records of queue past their window, as time
// would.
func (b *bundle) expireDedup(t *testing.T, queue string) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, `update partitionq.dedup set expires_at = now() - interval '1 second' where queue = $1`, queue); err != nil {
		t.Fatal(err)
	}
}

// waitLockWaiters waits until n sessions of the test's database wait for a lock.
func (b *bundle) waitLockWaiters(t *testing.T, n int) {
	t.Helper()
	pgtest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d sessions waiting for a lock", n), func() (bool, error) {
		var got int
		err := b.pool.QueryRow(b.ctx, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).Scan(&got)
		return got >= n, err
	})
}

func dedupMsg(key, id, payload string) partitionq.Message {
	return partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(payload), DedupID: id}
}

// Within the window a second send of a dedup id inserts nothing and names
// the first event (Send and SendTx alike); the id is its queue's only; once
// the record's window is over the id sends again.
func TestSendOnceWithinTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "other", Group: "g", Slots: 1}); err != nil {
		t.Fatal(err)
	}
	first, err := b.client.Send(b.ctx, "q", dedupMsg("tenant-1", "req-1", "first"))
	if err != nil || first.Duplicate || first.ID == 0 {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	again, err := b.client.Send(b.ctx, "q", dedupMsg("tenant-1", "req-1", "retry"))
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("second send: %+v, %v; want a duplicate of event %d", again, err, first.ID)
	}
	var inTx partitionq.SendResult
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		inTx, err = b.client.SendTx(b.ctx, tx, "q", dedupMsg("tenant-1", "req-1", "retry in a transaction"))
		return err
	}); err != nil || !inTx.Duplicate || inTx.ID != first.ID {
		t.Fatalf("SendTx of the id: %+v, %v", inTx, err)
	}
	other, err := b.client.Send(b.ctx, "other", dedupMsg("tenant-1", "req-1", "other queue"))
	if err != nil || other.Duplicate {
		t.Fatalf("the id on another queue: %+v, %v; want a new event", other, err)
	}
	plain, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "tenant-1", Payload: []byte("no dedup id")})
	if err != nil || plain.Duplicate {
		t.Fatalf("a send without a dedup id: %+v, %v", plain, err)
	}
	if evs := b.queueEvents(t, "q"); len(evs) != 2 || evs[first.ID] != "first" || evs[plain.ID] != "no dedup id" {
		t.Fatalf("queue q holds %v, want the first send and the plain one", evs)
	}

	// The record's time moved past its window: the id is free again.
	b.expireDedup(t, "q")
	later, err := b.client.Send(b.ctx, "q", dedupMsg("tenant-1", "req-1", "after the window"))
	if err != nil || later.Duplicate || later.ID <= first.ID {
		t.Fatalf("a send after the window: %+v, %v; want a new event", later, err)
	}
	if dup, err := b.client.Send(b.ctx, "q", dedupMsg("tenant-1", "req-1", "retry")); err != nil || dup.ID != later.ID || !dup.Duplicate {
		t.Fatalf("within the new window: %+v, %v; want a duplicate of %d", dup, err, later.ID)
	}

	// A window of its own, short: it ends on the clock.
	short, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "tenant-2", DedupID: "req-2", DedupWindow: 300 * time.Millisecond})
	if err != nil || short.Duplicate {
		t.Fatalf("send with a short window: %+v, %v", short, err)
	}
	sends := 0
	pgtest.WaitFor(t, 10*time.Second, "the short window to end", func() (bool, error) {
		r, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "tenant-2", DedupID: "req-2"})
		sends++
		if err == nil && r.Duplicate && r.ID != short.ID {
			return false, fmt.Errorf("duplicate of %d, want %d", r.ID, short.ID)
		}
		return err == nil && !r.Duplicate, err
	})
	if sends < 2 {
		t.Errorf("the send right after the first was not a duplicate (%d sends)", sends)
	}
	var hits int64
	if err := b.pool.QueryRow(b.ctx, `select hits from partitionq.dedup where queue = 'q' and dedup_id = 'req-1'`).Scan(&hits); err != nil || hits != 1 {
		t.Errorf("hits of req-1 in its second window: %d, %v; want 1", hits, err)
	}
}

// The queue's window comes from setup (GroupSpec.DedupWindow), 1 hour
// until set; a record's expiry is its send's time plus its window.
func TestSendOnceQueueWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1})
	if err != nil || res.DedupWindow != partitionq.DedupWindowDefault {
		t.Fatalf("setup: window %s, %v; want the default %s", res.DedupWindow, err, partitionq.DedupWindowDefault)
	}
	window := func(id string) time.Duration {
		t.Helper()
		var us int64
		if err := b.pool.QueryRow(b.ctx, `select (extract(epoch from expires_at - sent_at) * 1000000)::bigint from partitionq.dedup where dedup_id = $1`, id).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	if _, err := b.client.Send(b.ctx, "q", dedupMsg("k", "a", "")); err != nil {
		t.Fatal(err)
	}
	if res, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g2", Slots: 1, DedupWindow: 2 * time.Hour}); err != nil || res.DedupWindow != 2*time.Hour {
		t.Fatalf("setup with a window: %s, %v", res.DedupWindow, err)
	}
	if res, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1}); err != nil || res.DedupWindow != 2*time.Hour {
		t.Fatalf("setup of another group without a window: %s, %v; want the queue's 2h", res.DedupWindow, err)
	}
	if _, err := b.client.Send(b.ctx, "q", dedupMsg("k", "b", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", DedupID: "c", DedupWindow: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]time.Duration{"a": time.Hour, "b": 2 * time.Hour, "c": 90 * time.Second} {
		if got := window(id); got != want {
			t.Errorf("record %s: window %s, want %s", id, got, want)
		}
	}
	for _, w := range []time.Duration{-time.Second, partitionq.MaxDedupWindow + time.Second} {
		_, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1, DedupWindow: w})
		var ve *partitionq.ValidationError
		if !errors.As(err, &ve) || ve.Field != "GroupSpec.DedupWindow" || !strings.Contains(err.Error(), "7 days") {
			t.Errorf("setup with window %s: %v; want a *ValidationError naming GroupSpec.DedupWindow and the maximum", w, err)
		}
	}
}

// A dedup id names one message: a duplicate with another key is refused,
// naming both keys, and nothing is sent; in a batch, by its index; in the
// caller's transaction, which stays usable (the send ran in a savepoint).
func TestSendOnceRefusesAnotherKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	first, err := b.client.Send(b.ctx, "q", dedupMsg("tenant-1", "req-1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, index int, firstEvent int64) {
		t.Helper()
		var ke *partitionq.DedupKeyError
		if !errors.As(err, &ke) || ke.Key != "tenant-2" || ke.FirstKey != "tenant-1" || ke.DedupID != "req-1" || ke.FirstEventID != firstEvent {
			t.Fatalf("%s: %v; want a *DedupKeyError of tenant-2 against tenant-1", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, `key "tenant-1"`) || !strings.Contains(msg, `key "tenant-2"`) {
			t.Errorf("%s: the error does not name both keys: %s", what, msg)
		}
		var be *partitionq.BatchError
		if index >= 0 && (!errors.As(err, &be) || be.Index != index) {
			t.Errorf("%s: %v; want a *BatchError of message %d", what, err, index)
		}
	}
	_, err = b.client.Send(b.ctx, "q", dedupMsg("tenant-2", "req-1", "y"))
	check("Send", err, -1, first.ID)
	_, err = b.client.SendBatch(b.ctx, "q", []partitionq.Message{dedupMsg("tenant-2", "new-1", ""), dedupMsg("tenant-2", "req-1", "y")})
	check("SendBatch", err, 1, first.ID)
	_, err = b.client.SendBatch(b.ctx, "q", []partitionq.Message{dedupMsg("tenant-1", "req-1", ""), dedupMsg("tenant-1", "new-2", ""), dedupMsg("tenant-2", "req-1", "")})
	check("SendBatch, the same id twice in it", err, 2, 0)

	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.client.SendTx(b.ctx, tx, "q", dedupMsg("tenant-2", "req-1", "y"))
		check("SendTx", err, -1, first.ID)
		// The caller's transaction goes on.
		_, err = b.client.SendTx(b.ctx, tx, "q", dedupMsg("tenant-2", "req-2", "after the refusal"))
		return err
	})
	if err != nil {
		t.Fatalf("the caller's transaction after a refused SendTx: %v", err)
	}
	evs := b.queueEvents(t, "q")
	if len(evs) != 2 || evs[first.ID] != "x" {
		t.Errorf("queue holds %v, want the first event and the one sent after the refusal", evs)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from partitionq.dedup where dedup_id like 'new-%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("refused batches left %d dedup records, %v", n, err)
	}
}

// Invalid dedup ids and windows are refused before anything is sent, each
// with a *ValidationError naming the field.
func TestSendOnceInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	cases := []struct {
		m     partitionq.Message
		field string
		says  string
	}{
		{partitionq.Message{Key: "k", DedupID: "a\x00b"}, "dedup id", "NUL"},
		{partitionq.Message{Key: "k", DedupID: "\xff"}, "dedup id", "not valid UTF-8"},
		{partitionq.Message{Key: "k", DedupID: "\xed\xa0\x80"}, "dedup id", "surrogate"},
		{partitionq.Message{Key: "k", DedupID: strings.Repeat("d", partitionq.MaxDedupIDLen+1)}, "dedup id", "513 bytes"},
		{partitionq.Message{Key: "k", DedupWindow: time.Minute}, "dedup window", "without a dedup id"},
		{partitionq.Message{Key: "k", DedupID: "a", DedupWindow: -time.Minute}, "dedup window", "7 days"},
		{partitionq.Message{Key: "k", DedupID: "a", DedupWindow: time.Microsecond}, "dedup window", "from 1ms"},
		{partitionq.Message{Key: "k", DedupID: "a", DedupWindow: partitionq.MaxDedupWindow + time.Nanosecond}, "dedup window", "7 days"},
	}
	for _, c := range cases {
		_, err := b.client.Send(b.ctx, "q", c.m)
		var ve *partitionq.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Send(%+q, %s): %v; want a *ValidationError of the %s saying %q", c.m.DedupID, c.m.DedupWindow, err, c.field, c.says)
		}
		_, err = b.client.SendBatch(b.ctx, "q", []partitionq.Message{{Key: "k", DedupID: "fine"}, c.m})
		var be *partitionq.BatchError
		if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, partitionq.ErrInvalid) {
			t.Errorf("SendBatch with %+q: %v; want a *BatchError of message 1", c.m.DedupID, err)
		}
	}
	if n := len(b.queueEvents(t, "q")); n != 0 {
		t.Errorf("invalid sends wrote %d events", n)
	}
	// No such queue: nothing claimed either.
	if _, err := b.client.Send(b.ctx, "nosuch", partitionq.Message{Key: "k", DedupID: "a"}); !errors.Is(err, partitionq.ErrNoSuchQueue) {
		t.Errorf("a send with a dedup id to a missing queue: %v; want ErrNoSuchQueue", err)
	}
	var records int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from partitionq.dedup`).Scan(&records); err != nil || records != 0 {
		t.Errorf("refused sends left %d dedup records, %v", records, err)
	}
	longest := strings.Repeat("d", partitionq.MaxDedupIDLen)
	for _, m := range []partitionq.Message{{Key: "k", DedupID: longest}, {Key: "k", DedupID: "w", DedupWindow: partitionq.MaxDedupWindow},
		{Key: "k", DedupID: "тенант/файл\n\t😀"}} {
		if r, err := b.client.Send(b.ctx, "q", m); err != nil || r.Duplicate {
			t.Errorf("Send at the limits (%d bytes, window %s): %+v, %v", len(m.DedupID), m.DedupWindow, r, err)
		}
	}
	// The function checks again what it is given by hand.
	for _, args := range []string{
		`array['x'], array['k'], array[1], array[7 * 86400 * 1000000::bigint + 1]`,
		`array[''], array['k'], array[1], array[null::bigint]`,
		`array['x', 'x'], array['k', 'k'], array[1, 1], array[null::bigint, null]`,
		`array['x'], array['k'], array[1, 2], array[null::bigint]`,
	} {
		_, err := b.pool.Exec(b.ctx, `select * from partitionq.dedup_claim('q', `+args+`)`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" {
			t.Errorf("dedup_claim(%s): %v; want SQLSTATE 22023", args, err)
		}
	}
}

// SendBatch: a dedup id twice in one batch is sent once (the later
// messages are duplicates of the first); across batches, an id sent
// before is a duplicate; the new events' ids rise in input order, on the
// COPY path of large batches too; the records count the hits.
func TestSendBatchOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	res, err := b.client.SendBatch(b.ctx, "q", []partitionq.Message{
		dedupMsg("k1", "a", "a1"), dedupMsg("k2", "b", "b1"), dedupMsg("k1", "a", "a2"),
		{Key: "k3", Payload: []byte("plain")}, dedupMsg("k1", "a", "a3"), dedupMsg("k4", "c", "c1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 || res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate || res[3].Duplicate || !res[4].Duplicate || res[5].Duplicate ||
		res[2].ID != res[0].ID || res[4].ID != res[0].ID || !(res[0].ID < res[1].ID && res[1].ID < res[3].ID && res[3].ID < res[5].ID) {
		t.Fatalf("results %+v", res)
	}
	res2, err := b.client.SendBatch(b.ctx, "q", []partitionq.Message{dedupMsg("k1", "a", "a4"), dedupMsg("k5", "d", "d1"), dedupMsg("k2", "b", "b2")})
	if err != nil {
		t.Fatal(err)
	}
	if !res2[0].Duplicate || res2[0].ID != res[0].ID || res2[1].Duplicate || !res2[2].Duplicate || res2[2].ID != res[1].ID {
		t.Fatalf("second batch: %+v", res2)
	}
	evs := b.queueEvents(t, "q")
	want := map[int64]string{res[0].ID: "a1", res[1].ID: "b1", res[3].ID: "plain", res[5].ID: "c1", res2[1].ID: "d1"}
	if fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Fatalf("queue holds %v, want %v", evs, want)
	}
	var hits int64
	if err := b.pool.QueryRow(b.ctx, `select hits from partitionq.dedup where dedup_id = 'a'`).Scan(&hits); err != nil || hits != 3 {
		t.Errorf("hits of a: %d, %v; want 3 (two in its batch, one after)", hits, err)
	}

	// A batch large enough for COPY, half of it sent before.
	var big []partitionq.Message
	for i := range 400 {
		big = append(big, dedupMsg(fmt.Sprintf("t%d", i%200%13), fmt.Sprintf("big-%d", i%200), fmt.Sprint(i)))
	}
	half, err := b.client.SendBatch(b.ctx, "q", big[:100])
	if err != nil {
		t.Fatal(err)
	}
	all, err := b.client.SendBatch(b.ctx, "q", big)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i, r := range all {
		switch {
		case i < 100:
			if !r.Duplicate || r.ID != half[i].ID {
				t.Fatalf("message %d: %+v, want a duplicate of %d", i, r, half[i].ID)
			}
		case i < 200:
			if r.Duplicate || r.ID <= last {
				t.Fatalf("message %d: %+v, want a new event after %d", i, r, last)
			}
			last = r.ID
		default:
			if !r.Duplicate || r.ID != all[i-200].ID {
				t.Fatalf("message %d: %+v, want a duplicate of message %d's %d", i, r, i-200, all[i-200].ID)
			}
		}
	}
	if n := len(b.queueEvents(t, "q")); n != len(want)+200 {
		t.Errorf("%d events in the queue, want %d", n, len(want)+200)
	}

	// More than one statement's worth (SendBatch's chunks of 5,000), in one
	// transaction: sent once, and the same again all duplicates.
	var huge []partitionq.Message
	for i := range 6000 {
		huge = append(huge, dedupMsg(fmt.Sprintf("t%d", i%17), fmt.Sprintf("huge-%d", i), ""))
	}
	first, err := b.client.SendBatch(b.ctx, "q", huge)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.client.SendBatch(b.ctx, "q", huge)
	if err != nil {
		t.Fatal(err)
	}
	for i := range huge {
		if first[i].Duplicate || !again[i].Duplicate || again[i].ID != first[i].ID || (i > 0 && first[i].ID <= first[i-1].ID) {
			t.Fatalf("message %d of 6,000: first %+v, again %+v", i, first[i], again[i])
		}
	}
}

// A send whose transaction rolls back leaves no record: the id sends
// again. A concurrent send of the same id waits for the first's outcome:
// a new event when it rolled back, a duplicate of its event when it
// committed.
func TestSendOnceRollbackAndWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", "req-1", "rolled back"))
	if err != nil || rolled.Duplicate {
		t.Fatalf("SendTx: %+v, %v", rolled, err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from partitionq.dedup`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d dedup records after the rollback, %v", n, err)
	}
	r, err := b.client.Send(b.ctx, "q", dedupMsg("k", "req-1", "after the rollback"))
	if err != nil || r.Duplicate || r.ID == rolled.ID {
		t.Fatalf("send after the rollback: %+v, %v; want a new event", r, err)
	}

	for _, commit := range []bool{false, true} {
		id := fmt.Sprintf("req-wait-%t", commit)
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", id, "held"))
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			r   partitionq.SendResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			r, err := b.client.Send(b.ctx, "q", dedupMsg("k", id, "waiting"))
			done <- outcome{r, err}
		}()
		b.waitLockWaiters(t, 1)
		select {
		case o := <-done:
			t.Fatalf("the concurrent send returned before the first's outcome: %+v, %v", o.r, o.err)
		default:
		}
		if commit {
			err = tx.Commit(b.ctx)
		} else {
			err = tx.Rollback(b.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		o := <-done
		switch {
		case o.err != nil:
			t.Fatalf("concurrent send (first committed: %t): %v", commit, o.err)
		case commit && (!o.r.Duplicate || o.r.ID != held.ID):
			t.Errorf("after the first committed: %+v, want a duplicate of %d", o.r, held.ID)
		case !commit && (o.r.Duplicate || o.r.ID == held.ID):
			t.Errorf("after the first rolled back: %+v, want a new event", o.r)
		}
	}
	evs := b.queueEvents(t, "q")
	if len(evs) != 3 {
		t.Errorf("queue holds %v, want 3 events (after the rollback, the waiter's, the committed one)", evs)
	}
}

// Eight producers race the same 1,000 dedup ids, each in its own order,
// half of them one Send at a time and half in SendBatch calls of 100 (the
// claim's plain insert, which meets the ids sent before and claims again
// on the ON CONFLICT path): each id is sent exactly once, and every
// duplicate names that id's event.
func TestSendOnceRace(t *testing.T) {
	t.Parallel()
	b := setupPool(t, 16)
	b.group(t, 4)
	const producers, ids = 8, 1000
	type sent struct {
		id  string
		res partitionq.SendResult
	}
	results := make([][]sent, producers)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := make(chan struct{})
	began := time.Now()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(ids)
			msg := func(i int) partitionq.Message {
				return dedupMsg(fmt.Sprintf("tenant-%d", i%37), fmt.Sprintf("req-%d", i), fmt.Sprintf("producer %d", p))
			}
			<-start
			if p%2 == 0 {
				for _, i := range order {
					r, err := b.client.Send(b.ctx, "q", msg(i))
					if err != nil {
						errs <- fmt.Errorf("producer %d: %w", p, err)
						return
					}
					results[p] = append(results[p], sent{msg(i).DedupID, r})
				}
				return
			}
			for len(order) > 0 {
				n := min(100, len(order))
				var ms []partitionq.Message
				for _, i := range order[:n] {
					ms = append(ms, msg(i))
				}
				rs, err := b.client.SendBatch(b.ctx, "q", ms)
				if err != nil {
					errs <- fmt.Errorf("producer %d: %w", p, err)
					return
				}
				for k, r := range rs {
					results[p] = append(results[p], sent{ms[k].DedupID, r})
				}
				order = order[n:]
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	eventOf := map[string]int64{}
	news, dups := 0, 0
	for _, rs := range results {
		for _, s := range rs {
			if !s.res.Duplicate {
				news++
				if prev, ok := eventOf[s.id]; ok {
					t.Fatalf("%s sent twice: events %d and %d", s.id, prev, s.res.ID)
				}
				eventOf[s.id] = s.res.ID
			}
		}
	}
	for _, rs := range results {
		for _, s := range rs {
			if s.res.Duplicate {
				dups++
				if s.res.ID != eventOf[s.id] {
					t.Fatalf("a duplicate of %s names event %d, the id's event is %d", s.id, s.res.ID, eventOf[s.id])
				}
			}
		}
	}
	evs := b.queueEvents(t, "q")
	if len(evs) != ids || len(eventOf) != ids || news != ids || dups != (producers-1)*ids {
		t.Fatalf("%d events in the queue, %d ids with an event, %d new sends, %d duplicates; want %d, %d, %d, %d",
			len(evs), len(eventOf), news, dups, ids, ids, ids, (producers-1)*ids)
	}
	for id, ev := range eventOf {
		if _, ok := evs[ev]; !ok {
			t.Fatalf("%s: event %d is not in the queue", id, ev)
		}
	}
	var hits int64
	if err := b.pool.QueryRow(b.ctx, `select sum(hits) from partitionq.dedup where queue = 'q'`).Scan(&hits); err != nil || hits != int64(dups) {
		t.Errorf("the records count %d hits, %v; want %d", hits, err, dups)
	}
	t.Logf("%d producers x %d dedup ids: %d sends in %s, %d events inserted, %d duplicates refused, 0 ids sent twice",
		producers, ids, producers*ids, elapsed.Round(time.Millisecond), len(evs), dups)
}

// A producer process killed (SIGKILL) between its send and its commit
// leaves nothing: the server rolls its transaction back, and a send of the
// same id that was waiting for it then sends the event. A producer that
// commits makes the later send a duplicate.
func TestSendOnceProducerKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	bin := buildDedupSend(t)
	start := func(id string, extra ...string) (*exec.Cmd, partitionq.SendResult) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-url", b.db.URL, "-key", "k", "-dedup-id", id, "-payload", "from the process"}, extra...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		var r partitionq.SendResult
		if _, serr := fmt.Sscanf(line, "sent %d duplicate=%t", &r.ID, &r.Duplicate); err != nil || serr != nil {
			t.Fatalf("dedupsend: %q, %v, %v\n%s", line, err, serr, stderr.String())
		}
		return cmd, r
	}

	cmd, inFlight := start("req-killed")
	if inFlight.Duplicate {
		t.Fatalf("the process's send: %+v", inFlight)
	}
	done := make(chan partitionq.SendResult, 1)
	go func() {
		r, err := b.client.Send(b.ctx, "q", dedupMsg("k", "req-killed", "from the test"))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	b.waitLockWaiters(t, 1)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var r partitionq.SendResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting send did not return after the producer was killed")
	}
	if r.Duplicate || r.ID == inFlight.ID {
		t.Fatalf("send after the kill: %+v; want a new event (the killed one's %d never committed)", r, inFlight.ID)
	}
	evs := b.queueEvents(t, "q")
	if len(evs) != 1 || evs[r.ID] != "from the test" {
		t.Fatalf("queue holds %v, want only the test's event %d", evs, r.ID)
	}

	// Killed before anyone waits: nothing left either.
	cmd, inFlight = start("req-killed-2")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	pgtest.WaitFor(t, 20*time.Second, "the killed producer's session to end", func() (bool, error) {
		var n int
		err := b.pool.QueryRow(b.ctx, `select count(*) from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`).Scan(&n)
		return n == 0, err
	})
	if r, err := b.client.Send(b.ctx, "q", dedupMsg("k", "req-killed-2", "after")); err != nil || r.Duplicate {
		t.Fatalf("send after the second kill: %+v, %v", r, err)
	}

	// The control: a producer that commits.
	_, committed := start("req-committed", "-commit")
	if r, err := b.client.Send(b.ctx, "q", dedupMsg("k", "req-committed", "retry")); err != nil || !r.Duplicate || r.ID != committed.ID {
		t.Fatalf("send after a committed producer: %+v, %v; want a duplicate of %d", r, err, committed.ID)
	}
}

// buildDedupSend builds test/cmd/dedupsend.
func buildDedupSend(t *testing.T) string {
	t.Helper()
	goBin := "go" // found on PATH, where go test and make put the go that runs them
	bin := filepath.Join(t.TempDir(), "dedupsend")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/partitionq/partitionq/test/cmd/dedupsend").CombinedOutput(); err != nil {
		t.Fatalf("go build test/cmd/dedupsend: %v\n%s", err, out)
	}
	return bin
}

// In the caller's REPEATABLE READ or SERIALIZABLE transaction: a dedup id
// committed before the transaction's snapshot is a duplicate as usual; one
// committed by another transaction after the snapshot was taken is a
// serialization failure (SQLSTATE 40001), whose retry sees the duplicate;
// a concurrent uncommitted send of it is waited for, then the same.
func TestSendOnceRepeatableRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			id := func(s string) string { return string(iso) + "/" + s }
			before, err := b.client.Send(b.ctx, "q", dedupMsg("k", id("before"), "x"))
			if err != nil {
				t.Fatal(err)
			}
			tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			// The transaction's snapshot, taken by its first statement.
			if _, err := tx.Exec(b.ctx, `select 1`); err != nil {
				t.Fatal(err)
			}
			if r, err := b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", id("before"), "y")); err != nil || !r.Duplicate || r.ID != before.ID {
				t.Fatalf("an id committed before the snapshot: %+v, %v; want a duplicate of %d", r, err, before.ID)
			}
			after, err := b.client.Send(b.ctx, "q", dedupMsg("k", id("after"), "x"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", id("after"), "y"))
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "40001" {
				t.Fatalf("an id committed after the snapshot: %v; want a serialization failure (40001)", err)
			}
			_ = tx.Rollback(b.ctx)
			var retried partitionq.SendResult
			if err := pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				retried, err = b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", id("after"), "y"))
				return err
			}); err != nil || !retried.Duplicate || retried.ID != after.ID {
				t.Fatalf("the retry: %+v, %v; want a duplicate of %d", retried, err, after.ID)
			}

			// Two of them at once: the second waits for the first, then fails to serialize.
			t1, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			defer t1.Rollback(context.Background())
			first, err := b.client.SendTx(b.ctx, t1, "q", dedupMsg("k", id("race"), "first"))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
					_, err := b.client.SendTx(b.ctx, tx, "q", dedupMsg("k", id("race"), "second"))
					return err
				})
			}()
			b.waitLockWaiters(t, 1)
			if err := t1.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.As(err, &pe) || pe.Code != "40001" {
				t.Fatalf("the concurrent send after the first committed: %v; want 40001", err)
			}
			if r, err := b.client.Send(b.ctx, "q", dedupMsg("k", id("race"), "third")); err != nil || !r.Duplicate || r.ID != first.ID {
				t.Fatalf("after the race: %+v, %v; want a duplicate of %d", r, err, first.ID)
			}
		})
	}
}
