package parked_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/dbtest"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// ---------------------------------------------------------------- one database

// The tests share one database with the engine and partitionq's schema,
// made once: making a database and installing the engine costs more than
// any test here. The first test that needs it makes it and TestMain drops
// it. Each test works on a queue of its own and keeps everything it checks
// in a transaction it rolls back, so the tests do not see each other.
var shared dbtest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Close(m.Run())) }

// sharedDB returns the package's database (with the engine of
// PARTITIONQ_ENGINE and partitionq's schema) and its engine.
func sharedDB(t *testing.T) (*pgxpool.Pool, *engine.Engine) {
	t.Helper()
	return shared.Get(t)
}

// ---------------------------------------------------------------- a slot's batch

const (
	group = "g"
	epoch = 7 // the slot's ownership epoch in the tests
)

var queues atomic.Int64

// fixture is one slot (slot 0 of a group with one slot, on a queue of its
// own) whose engine batch is open in tx, with its events: the state a
// worker is in when it ends a batch. Everything after the batch's events
// were sent happens in tx, which the test's cleanup rolls back.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	eng  *engine.Engine
	tx   pgx.Tx
	slot parked.Slot
	// ev holds the batch's events by key, in ev_id order: ev["a"][0] is
	// key a's first event.
	ev map[string][]engine.Event
}

// newFixture sends one event per key given, in that order (an event's
// data is its key and its place among the key's events: "a1", "a2"),
// ticks, and opens the slot's batch in a transaction, where the slot is
// owned at epoch. The queue, the consumer and the events are committed
// before: a batch holds only what a tick saw committed.
func newFixture(t *testing.T, keys ...string) *fixture {
	t.Helper()
	pool, eng := sharedDB(t)
	ctx := context.Background()
	queue := fmt.Sprintf("parked_%d", queues.Add(1))
	consumer := group + "#0/1" // the slot consumer's name: "<group>#<slot>/<N>"
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		// The engine's ticker ticks a queue with events waiting once its
		// max lag has passed since the last tick: here at once (PgQue
		// refuses 0).
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		if _, err := eng.RegisterConsumer(ctx, tx, queue, consumer); err != nil {
			return err
		}
		return store.EnsureGeneration(ctx, tx, eng.Schema(), queue, group)
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]engine.NewEvent, len(keys))
	count := map[string]int{}
	for i, k := range keys {
		count[k]++
		evs[i] = engine.NewEvent{Key: k, Type: "T", Data: fmt.Sprintf("%s%d", k, count[k])}
	}
	if _, err := eng.InsertMany(ctx, pool, queue, evs); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TickAndAnnounce(ctx, pool); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	infos, err := eng.NextBatches(ctx, tx, queue, []string{consumer}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID == 0 {
		t.Fatalf("no batch for the slot after a tick: %+v", infos)
	}
	subs, err := eng.Subscriptions(ctx, tx, queue, consumer)
	if err != nil || len(subs) != 1 {
		t.Fatalf("the slot consumer's subscription: %v, %v", subs, err)
	}
	sub := subs[0].SubID
	_, read, err := eng.OpenRead(ctx, tx, engine.ReadSpec{Batch: infos[0].ID, Sub: sub, Subs: []int32{sub}, N: 1}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(keys) {
		t.Fatalf("the batch has %d events, %d were sent", len(read), len(keys))
	}
	f := &fixture{t: t, ctx: ctx, eng: eng, tx: tx, ev: map[string][]engine.Event{},
		slot: parked.Slot{Queue: queue, Group: group, Consumer: consumer, N: 1, Generation: 1, Slot: 0, SubID: sub, Epoch: epoch}}
	for _, ev := range read {
		f.ev[ev.Key] = append(f.ev[ev.Key], ev.Event)
	}
	// A worker's claim (package lease) in short: the dead letters a worker
	// writes are fenced by the slot's epoch.
	if _, err := tx.Exec(ctx, `with w as (insert into partitionq.worker (identity, lease_until, schema_version)
		                               values ('parked_test', now() + interval '1 hour', $1) returning id)
		update partitionq.slot s set worker_id = w.id, epoch = $2, since = now() from w
		 where s.queue = $3 and s.grp = $4 and s.generation = 1 and s.slot = 0`, store.Latest(), epoch, queue, group); err != nil {
		t.Fatal(err)
	}
	return f
}

// write writes an outcome of the slot's batch, as the worker's finishing
// transaction does.
func (f *fixture) write(build func(o *parked.Outcome)) {
	f.t.Helper()
	o := parked.NewOutcome(f.slot)
	build(o)
	if err := o.Write(f.ctx, f.tx, f.eng); err != nil {
		f.t.Fatal(err)
	}
}

// heads returns the slot's heads (of key only, when it is not "").
func (f *fixture) heads(key string) []parked.Head {
	f.t.Helper()
	var k *string
	if key != "" {
		k = &key
	}
	hs, err := parked.Heads(f.ctx, f.tx, f.eng, []parked.Slot{f.slot}, k)
	if err != nil {
		f.t.Fatal(err)
	}
	return hs
}

// head returns key's head, failing the test when the key has none.
func (f *fixture) head(key string) parked.Head {
	f.t.Helper()
	hs := f.heads(key)
	if len(hs) != 1 {
		f.t.Fatalf("key %s has %d heads, want 1: %+v", key, len(hs), hs)
	}
	return hs[0]
}

// parkedIDs returns the ids of key's parked events, in the order they run.
func (f *fixture) parkedIDs(key string) []int64 {
	f.t.Helper()
	evs, err := parked.Events(f.ctx, f.tx, f.eng, f.slot, key, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	return idsOf(evs)
}

func (f *fixture) deadLetters() []store.DeadLetter {
	f.t.Helper()
	dls, err := store.ListDeadLetters(f.ctx, f.tx, store.DeadLetterFilter{Queue: f.slot.Queue, Group: f.slot.Group})
	if err != nil {
		f.t.Fatal(err)
	}
	return dls
}

// count counts the rows of a partitionq table of the slot's queue.
func (f *fixture) count(table string) int {
	f.t.Helper()
	var n int
	if err := f.tx.QueryRow(f.ctx, `select count(*) from partitionq.`+table+` where queue = $1`, f.slot.Queue).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// fence is a worker's ownership check of the slot (package lease).
func (f *fixture) fence(ctx context.Context, tx pgx.Tx) error {
	return lease.Fence(ctx, tx, f.slot.Queue, f.slot.Group, f.slot.Generation, []int{f.slot.Slot}, []int64{f.slot.Epoch})
}

// call is one handler call of a drain.
type call struct {
	id      int64
	attempt int
}

// drain runs one drain of key from its head headID, whose handler answers
// with answer; it returns what the drain did, the handler's calls and the
// events given to Settle.
func (f *fixture) drain(key string, headID int64, lim parked.Limits, answer func(ev engine.Event, attempt int) parked.Handled) (parked.DrainResult, []call, []int64) {
	f.t.Helper()
	var calls []call
	var settled []int64
	res, err := parked.Drain(f.ctx, f.tx, f.eng, f.slot, key, headID, lim, parked.DrainHooks{
		Handle: func(ev engine.Event, attempt int) parked.Handled {
			calls = append(calls, call{ev.ID, attempt})
			return answer(ev, attempt)
		},
		Settle: func(done []int64) { settled = append(settled, done...) },
		Fence:  f.fence,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return res, calls, settled
}

// act runs an operator action on the slot; audited lists the results the
// audit hook was called with.
func (f *fixture) act(a parked.Action) (res parked.ActionResult, audited []parked.ActionResult, err error) {
	if a.LockTimeout == 0 {
		a.LockTimeout = time.Second
	}
	res, err = parked.Act(f.ctx, f.tx, f.eng, f.slot, a, func(_ context.Context, _ pgx.Tx, r parked.ActionResult) error {
		audited = append(audited, r)
		return nil
	})
	return res, audited, err
}

func idsOf(evs []engine.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

var (
	ok        = func(engine.Event, int) parked.Handled { return parked.Handled{OK: true} }
	unlimited = parked.Limits{Events: 100, Time: time.Minute}
)

// ---------------------------------------------------------------- a batch's outcome

// A head that failed is parked with its failure record and the events of
// its key behind it, which keep their ev_retry (waiting is not failing,
// H1); the key is blocked, the other keys of the batch are not.
func TestWriteParksAFailedHeadAndTheEventsBehindIt(t *testing.T) {
	f := newFixture(t, "a", "b", "a", "a")
	a := f.ev["a"]
	o := parked.NewOutcome(f.slot)
	o.Fail(a[0], 1, "boom", time.Hour)
	o.Wait(a[1])
	o.Wait(a[2])
	if retry, dead := o.Counts(); retry != 3 || dead != 0 {
		t.Errorf("Counts = %d parked, %d dead; want 3, 0", retry, dead)
	}
	if keys := o.ParkedKeys(); !slices.Equal(keys, []string{"a"}) {
		t.Errorf("the outcome parks the keys %q, want [a]", keys)
	}
	if err := o.Write(f.ctx, f.tx, f.eng); err != nil {
		t.Fatal(err)
	}

	hs := f.heads("")
	if len(hs) != 1 {
		t.Fatalf("%d heads, want key a's alone: %+v", len(hs), hs)
	}
	h := hs[0]
	if h.Key != "a" || h.ID != a[0].ID || h.Waiting != 2 || h.Retry != 1 || h.Slot != 0 || h.N != 1 || h.Queue != f.slot.Queue || h.Group != group {
		t.Errorf("head = key %s, event %d, %d waiting, ev_retry %d, slot %d of %d on %s/%s; want a, %d, 2, 1, 0 of 1 on %s/%s",
			h.Key, h.ID, h.Waiting, h.Retry, h.Slot, h.N, h.Queue, h.Group, a[0].ID, f.slot.Queue, group)
	}
	if !h.Parked() || h.Draining() {
		t.Errorf("head parked %v, draining %v; want parked and not draining", h.Parked(), h.Draining())
	}
	if h.Failure == nil {
		t.Fatal("the failed head has no failure record")
	}
	if fl := h.Failure; fl.EvID != a[0].ID || fl.Attempts != 1 || fl.LastError != "boom" || fl.Due || fl.Wait < 59*time.Minute || fl.Wait > time.Hour {
		t.Errorf("failure = event %d, %d attempts, last error %q, due %v, wait %s; want %d, 1, boom, not due, about 1h",
			fl.EvID, fl.Attempts, fl.LastError, fl.Due, fl.Wait, a[0].ID)
	}

	keys, err := parked.ParkedKeys(f.ctx, f.tx, f.eng, []parked.Slot{f.slot})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || len(keys[0]) != 1 || !keys[0]["a"] {
		t.Errorf("ParkedKeys = %v, want slot 0: key a", keys)
	}
	evs, err := parked.Events(f.ctx, f.tx, f.eng, f.slot, "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%d:%s:retry=%d", ev.ID, ev.Data, ev.Retry))
	}
	want := []string{fmt.Sprintf("%d:a1:retry=1", a[0].ID), fmt.Sprintf("%d:a2:retry=0", a[1].ID), fmt.Sprintf("%d:a3:retry=0", a[2].ID)}
	if !slices.Equal(got, want) {
		t.Errorf("key a's parked events = %v, want %v", got, want)
	}
	if hs := f.heads("b"); len(hs) != 0 {
		t.Errorf("key b, handled in the batch, has parked events: %+v", hs)
	}
}

// A dead letter of a batch's event is written by the batch's finishing
// transaction, fenced by the slot's epoch: a worker that lost the slot
// (another epoch) writes none.
func TestWriteGivesAnEventUpOnlyUnderTheSlotsEpoch(t *testing.T) {
	f := newFixture(t, "a", "b")
	a := f.ev["a"][0]
	dl := parked.DeadLetter(f.slot, a, 3, "bad payload", "max_attempts", "worker")

	stale := f.slot
	stale.Epoch = epoch - 1
	sp, err := f.tx.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := parked.NewOutcome(stale)
	o.Dead(dl)
	if err := o.Write(f.ctx, sp, f.eng); db.Code(err) != "PQ001" {
		t.Errorf("a write at a stale epoch: %v, want SQLSTATE PQ001 (not the owner)", err)
	}
	_ = sp.Rollback(f.ctx)

	f.write(func(o *parked.Outcome) {
		o.Dead(dl)
		if retry, dead := o.Counts(); retry != 0 || dead != 1 {
			t.Errorf("Counts = %d parked, %d dead; want 0, 1", retry, dead)
		}
	})
	dls := f.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(dls), dls)
	}
	d := dls[0]
	if d.EvID != a.ID || d.Key != "a" || d.Data != "a1" || d.Type != "T" || d.Slot != 0 || d.Attempts != 3 ||
		d.LastError != "bad payload" || d.Reason != "max_attempts" || d.Actor != "worker" {
		t.Errorf("dead letter = %+v; want event %d of key a (a1, T), slot 0, 3 attempts, bad payload, max_attempts, by worker", d, a.ID)
	}
	if hs := f.heads(""); len(hs) != 0 {
		t.Errorf("a dead letter parked something: %+v", hs)
	}
}

// ---------------------------------------------------------------- drains

// A drain runs the failed head (its next attempt), then the events that
// waited behind it (their first), in ev_id order, settles them, resolves
// them with their failure records, and reports the key empty: not blocked.
func TestDrainHandlesTheHeadThenTheWaitingEventsInOrder(t *testing.T) {
	f := newFixture(t, "a", "b", "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "boom", 0) // due at once
		o.Wait(a[1])
		o.Wait(a[2])
	})
	res, calls, settled := f.drain("a", a[0].ID, unlimited, ok)
	want := []call{{a[0].ID, 2}, {a[1].ID, 1}, {a[2].ID, 1}}
	if !slices.Equal(calls, want) {
		t.Errorf("handler calls (event, attempt) = %v, want %v", calls, want)
	}
	if !slices.Equal(settled, idsOf(a)) {
		t.Errorf("settled %v, want %v", settled, idsOf(a))
	}
	if res != (parked.DrainResult{Handled: 3, Empty: true}) {
		t.Errorf("drain = %+v, want 3 handled and the key empty", res)
	}
	if hs := f.heads(""); len(hs) != 0 {
		t.Errorf("heads left after the drain: %+v", hs)
	}
	if n := f.count("failure"); n != 0 {
		t.Errorf("%d failure records left after the drain, want 0", n)
	}
}

// A drain stops at its event limit and names the key's next head, due at
// once since it never failed, for the caller to drain next.
func TestDrainStopsAtItsLimitAndNamesTheKeysNextHead(t *testing.T) {
	f := newFixture(t, "a", "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "boom", 0)
		o.Wait(a[1])
		o.Wait(a[2])
	})
	res, calls, _ := f.drain("a", a[0].ID, parked.Limits{Events: 2, Time: time.Minute}, ok)
	if len(calls) != 2 {
		t.Errorf("%d handler calls, want 2 (the limit)", len(calls))
	}
	if res != (parked.DrainResult{Handled: 2, Next: a[2].ID}) {
		t.Errorf("drain = %+v, want 2 handled and next %d", res, a[2].ID)
	}
	if got := f.parkedIDs("a"); !slices.Equal(got, []int64{a[2].ID}) {
		t.Errorf("parked after the drain: %v, want [%d]", got, a[2].ID)
	}
	if h := f.head("a"); !h.Draining() {
		t.Errorf("the new head (never failed) is not draining: %+v", h)
	}
}

// A head that fails again stays the key's head, parked with one attempt
// more, its new error and its new next attempt; the events behind it do
// not run; and a drain before that next attempt runs nothing.
func TestAFailingHeadKeepsTheKeyBlockedWithOneMoreAttempt(t *testing.T) {
	f := newFixture(t, "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "first", 0)
		o.Wait(a[1])
	})
	res, calls, settled := f.drain("a", a[0].ID, unlimited, func(engine.Event, int) parked.Handled {
		return parked.Handled{Err: "second", Delay: time.Hour}
	})
	if !slices.Equal(calls, []call{{a[0].ID, 2}}) {
		t.Errorf("handler calls = %v, want the head's second attempt alone", calls)
	}
	if len(settled) != 0 {
		t.Errorf("settled %v, want nothing", settled)
	}
	if res != (parked.DrainResult{Rescan: true}) {
		t.Errorf("drain = %+v, want a rescan (the head's next attempt to schedule) and nothing handled", res)
	}
	h := f.head("a")
	if h.ID != a[0].ID || h.Retry != 2 || h.Waiting != 1 || h.Failure == nil {
		t.Fatalf("head = %+v; want event %d, ev_retry 2, 1 waiting, with its failure", h, a[0].ID)
	}
	if fl := h.Failure; fl.Attempts != 2 || fl.LastError != "second" || fl.Due || fl.Wait < 59*time.Minute {
		t.Errorf("failure = %d attempts, %q, due %v, wait %s; want 2, second, not due, about 1h", fl.Attempts, fl.LastError, fl.Due, fl.Wait)
	}

	res, calls, _ = f.drain("a", a[0].ID, unlimited, ok)
	if len(calls) != 0 || res != (parked.DrainResult{Rescan: true}) {
		t.Errorf("a drain before the head's next attempt: calls %v, result %+v; want none, a rescan", calls, res)
	}
}

// A handler that gives the head up makes a dead letter of it, committed
// before the key's next event runs: the drain stops there and names that
// event, now the head of a draining key.
func TestADrainThatGivesTheHeadUpWritesItsDeadLetterAndStops(t *testing.T) {
	f := newFixture(t, "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "first", 0)
		o.Wait(a[1])
	})
	res, calls, settled := f.drain("a", a[0].ID, unlimited, func(engine.Event, int) parked.Handled {
		return parked.Handled{Dead: true, Reason: "max_attempts", Err: "still bad"}
	})
	if len(calls) != 1 || !slices.Equal(settled, []int64{a[0].ID}) {
		t.Errorf("handler calls %v, settled %v; want the head alone", calls, settled)
	}
	if res != (parked.DrainResult{Dead: 1, Next: a[1].ID}) {
		t.Errorf("drain = %+v, want 1 dead and next %d", res, a[1].ID)
	}
	dls := f.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if d := dls[0]; d.EvID != a[0].ID || d.Attempts != 2 || d.LastError != "still bad" || d.Reason != "max_attempts" || d.Actor != "worker" {
		t.Errorf("dead letter = %+v; want event %d, 2 attempts, still bad, max_attempts, by worker", d, a[0].ID)
	}
	if h := f.head("a"); h.ID != a[1].ID || !h.Draining() {
		t.Errorf("head = %+v; want event %d, draining", h, a[1].ID)
	}
	if n := f.count("failure"); n != 0 {
		t.Errorf("%d failure records left, want 0", n)
	}
}

// An event an earlier drain recorded as done (its run cut short before it
// committed) is resolved without running it again.
func TestDrainDoesNotRunAgainWhatAnEarlierDrainRecordedDone(t *testing.T) {
	f := newFixture(t, "a", "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "boom", 0)
		o.Wait(a[1])
		o.Wait(a[2])
	})
	// How a worker records a drained event as done (batch 0).
	if _, err := f.tx.Exec(f.ctx, `select partitionq.record_done($1, $2, $3, $4, $5, 0, $6)`,
		f.slot.Queue, group, f.slot.N, f.slot.Slot, f.slot.Epoch, a[1].ID); err != nil {
		t.Fatal(err)
	}
	res, calls, settled := f.drain("a", a[0].ID, unlimited, ok)
	if want := []call{{a[0].ID, 2}, {a[2].ID, 1}}; !slices.Equal(calls, want) {
		t.Errorf("handler calls = %v, want %v (not the event done before)", calls, want)
	}
	if !slices.Equal(settled, idsOf(a)) {
		t.Errorf("settled %v, want all three %v", settled, idsOf(a))
	}
	if !res.Empty || res.Handled != 3 {
		t.Errorf("drain = %+v, want 3 resolved and the key empty", res)
	}
	if n := f.count("slot_done"); n != 0 {
		t.Errorf("%d completion records left, want 0 (resolved with their events)", n)
	}
}

// A head blocked too long is given up with the reason max_blocked and its
// failure record's attempts and error; the key's next event is returned.
func TestExpireGivesTheHeadUpAsBlockedTooLong(t *testing.T) {
	f := newFixture(t, "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 4, "slow", time.Hour)
		o.Wait(a[1])
	})
	next, err := parked.Expire(f.ctx, f.tx, f.eng, f.slot, "a", a[0].ID, f.fence)
	if err != nil {
		t.Fatal(err)
	}
	if next != a[1].ID {
		t.Errorf("Expire named %d next, want %d", next, a[1].ID)
	}
	dls := f.deadLetters()
	if len(dls) != 1 || dls[0].EvID != a[0].ID || dls[0].Reason != "max_blocked" || dls[0].Attempts != 4 || dls[0].LastError != "slow" {
		t.Errorf("dead letters = %+v; want event %d, max_blocked, 4 attempts, slow", dls, a[0].ID)
	}
	if got := f.parkedIDs("a"); !slices.Equal(got, []int64{a[1].ID}) {
		t.Errorf("parked = %v, want [%d]", got, a[1].ID)
	}
}

// A blocked head is flagged once: the second flag is not new.
func TestFlagMarksABlockedHeadOnce(t *testing.T) {
	f := newFixture(t, "a")
	a := f.ev["a"][0]
	f.write(func(o *parked.Outcome) { o.Fail(a, 1, "boom", time.Hour) })
	for i, want := range []bool{true, false} {
		isNew, err := parked.Flag(f.ctx, f.tx, f.slot, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if isNew != want {
			t.Errorf("flag %d: new = %v, want %v", i+1, isNew, want)
		}
	}
	if h := f.head("a"); h.Failure == nil || h.Failure.FlaggedAt == nil {
		t.Errorf("the flagged head's failure has no flag: %+v", h.Failure)
	}
}

// ---------------------------------------------------------------- operator actions

// An action that names an event which is not the key's head does nothing
// and says which event is the head.
func TestActOnAnEventThatIsNotTheHeadFailsNamingTheRealHead(t *testing.T) {
	f := newFixture(t, "a", "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "boom", time.Hour)
		o.Wait(a[1])
		o.Wait(a[2])
	})
	for _, kind := range []parked.Kind{parked.Skip, parked.RetryNow, parked.Quarantine} {
		_, audited, err := f.act(parked.Action{Kind: kind, Key: "a", HeadID: a[1].ID, Reason: "r", Actor: "alice"})
		var nh *parked.NotHeadError
		if !errors.As(err, &nh) {
			t.Errorf("%s of a waiting event: %v, want a NotHeadError", kind, err)
			continue
		}
		if nh.Key != "a" || nh.EventID != a[1].ID || nh.Head == nil || nh.Head.ID != a[0].ID {
			t.Errorf("%s: NotHeadError = key %s, event %d, head %+v; want a, %d, head %d", kind, nh.Key, nh.EventID, nh.Head, a[1].ID, a[0].ID)
		}
		if len(audited) != 0 {
			t.Errorf("%s: audited %+v, want nothing", kind, audited)
		}
	}
	if got := f.parkedIDs("a"); !slices.Equal(got, idsOf(a)) {
		t.Errorf("parked after the refused actions: %v, want %v", got, idsOf(a))
	}
	if h := f.head("a"); h.Failure == nil || h.Failure.Due {
		t.Errorf("the head's next attempt moved: %+v", h.Failure)
	}
	if n, m := len(f.deadLetters()), f.count("audit"); n != 0 || m != 0 {
		t.Errorf("%d dead letters, %d audit entries; want none", n, m)
	}
}

// A key whose head never failed (its failed head was resolved, its
// waiting events run next) is acted on only when the action names that
// head; a key with nothing parked is not blocked.
func TestActOnAKeyWhoseHeadNeverFailedNeedsTheHeadNamed(t *testing.T) {
	f := newFixture(t, "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Wait(a[0])
		o.Wait(a[1])
	})
	for _, kind := range []parked.Kind{parked.Skip, parked.RetryNow, parked.Quarantine} {
		_, _, err := f.act(parked.Action{Kind: kind, Key: "a"})
		var nf *parked.NeverFailedError
		if !errors.Is(err, parked.ErrNeverFailed) || !errors.As(err, &nf) || nf.EventID != a[0].ID || nf.Key != "a" {
			t.Errorf("%s of a draining key: %v, want a NeverFailedError naming event %d", kind, err, a[0].ID)
		}
	}
	if got := f.parkedIDs("a"); !slices.Equal(got, idsOf(a)) {
		t.Errorf("parked after the refused actions: %v, want %v", got, idsOf(a))
	}

	res, _, err := f.act(parked.Action{Kind: parked.Skip, Key: "a", HeadID: a[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != parked.OutcomeSkipped || res.EventID != a[0].ID || !slices.Equal(res.NextIDs, []int64{a[1].ID}) {
		t.Errorf("skip naming the head = %+v; want skipped, event %d, next [%d]", res, a[0].ID, a[1].ID)
	}

	if _, _, err := f.act(parked.Action{Kind: parked.Skip, Key: "nobody"}); !errors.Is(err, parked.ErrNotBlocked) {
		t.Errorf("skip of a key with nothing parked: %v, want ErrNotBlocked", err)
	}
}

// A skip dead-letters the failed head with its attempts and last error,
// records the action with the dead letter (not through the caller's audit
// hook), and leaves the waiting events next, the key draining.
func TestSkipDeadLettersTheHeadAndTheWaitingEventsRunNext(t *testing.T) {
	f := newFixture(t, "a", "a", "a")
	a := f.ev["a"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 2, "boom", time.Hour)
		o.Wait(a[1])
		o.Wait(a[2])
	})
	res, audited, err := f.act(parked.Action{Kind: parked.Skip, Key: "a", Reason: "bad data", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != parked.OutcomeSkipped || res.EventID != a[0].ID || res.Count != 1 || !slices.Equal(res.NextIDs, idsOf(a[1:])) {
		t.Errorf("skip = %+v; want skipped, event %d, 1, next %v", res, a[0].ID, idsOf(a[1:]))
	}
	if len(audited) != 0 {
		t.Errorf("the audit hook ran for a skip: %+v", audited)
	}
	dls := f.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if d := dls[0]; d.EvID != a[0].ID || d.Reason != "skip: bad data" || d.Actor != "alice" || d.Attempts != 2 || d.LastError != "boom" {
		t.Errorf("dead letter = %+v; want event %d, skip: bad data, by alice, 2 attempts, boom", d, a[0].ID)
	}
	entries, err := store.ListAudit(f.ctx, f.tx, f.slot.Queue, group, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Action != "skip" || entries[0].Outcome != "skipped" || entries[0].EvID == nil || *entries[0].EvID != a[0].ID {
		t.Errorf("audit = %+v; want one skip of event %d, skipped", entries, a[0].ID)
	}
	if h := f.head("a"); h.ID != a[1].ID || !h.Draining() || h.Waiting != 1 {
		t.Errorf("head = %+v; want event %d, draining, 1 waiting", h, a[1].ID)
	}
	if n := f.count("failure"); n != 0 {
		t.Errorf("%d failure records left, want 0", n)
	}
}

// Retry now makes the head's next attempt due without counting an attempt,
// through the caller's audit hook; the next drain runs it.
func TestRetryNowMakesTheHeadsNextAttemptDue(t *testing.T) {
	f := newFixture(t, "a")
	a := f.ev["a"][0]
	f.write(func(o *parked.Outcome) { o.Fail(a, 3, "boom", time.Hour) })
	res, audited, err := f.act(parked.Action{Kind: parked.RetryNow, Key: "a", HeadID: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := parked.ActionResult{Outcome: parked.OutcomeRetryScheduled, EventID: a.ID, Count: 1}
	if res.Outcome != want.Outcome || res.EventID != want.EventID || res.Count != want.Count {
		t.Errorf("retry = %+v, want %+v", res, want)
	}
	if len(audited) != 1 || audited[0].Outcome != parked.OutcomeRetryScheduled {
		t.Errorf("audited %+v, want the retry once", audited)
	}
	if h := f.head("a"); h.Failure == nil || !h.Failure.Due || h.Failure.Attempts != 3 {
		t.Errorf("failure = %+v; want due now, still 3 attempts", h.Failure)
	}
	_, calls, _ := f.drain("a", a.ID, unlimited, ok)
	if !slices.Equal(calls, []call{{a.ID, 4}}) {
		t.Errorf("drain calls = %v, want the head's fourth attempt", calls)
	}
}

// Quarantine dead-letters the head and every event waiting behind it, in
// ev_id order; another blocked key is left alone.
func TestQuarantineDeadLettersTheHeadAndEveryWaitingEvent(t *testing.T) {
	f := newFixture(t, "a", "b", "a", "a")
	a, b := f.ev["a"], f.ev["b"]
	f.write(func(o *parked.Outcome) {
		o.Fail(a[0], 1, "boom", time.Hour)
		o.Wait(a[1])
		o.Wait(a[2])
		o.Fail(b[0], 1, "other", time.Hour)
	})
	res, _, err := f.act(parked.Action{Kind: parked.Quarantine, Key: "a", Reason: "tenant gone", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != parked.OutcomeQuarantined || res.EventID != a[0].ID || res.Count != 3 {
		t.Errorf("quarantine = %+v; want quarantined, event %d, 3", res, a[0].ID)
	}
	var got []int64
	for _, d := range f.deadLetters() {
		if d.Reason != "quarantine: tenant gone" {
			t.Errorf("dead letter of event %d: reason %q, want quarantine: tenant gone", d.EvID, d.Reason)
		}
		got = append(got, d.EvID)
	}
	if !slices.Equal(got, idsOf(a)) {
		t.Errorf("dead letters of events %v, want %v", got, idsOf(a))
	}
	hs := f.heads("")
	if len(hs) != 1 || hs[0].Key != "b" || hs[0].ID != b[0].ID {
		t.Errorf("heads = %+v; want key b's alone", hs)
	}
}
