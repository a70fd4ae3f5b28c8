package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/pgtest"
)

// evID returns the event id of key's event seq.
func (e *env) evID(t *testing.T, key string, seq int) int64 {
	t.Helper()
	var id int64
	err := e.pool.QueryRow(e.ctx, e.db.SQL(`select ev_id from pgq.event_template where ev_extra1 = $1 and (ev_data::json->>'s')::int = $2`), key, seq).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// okCount is how many times key's event seq was handled successfully.
func (e *env) okCount(t *testing.T, key string, seq int) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, `select count(*) from pq_run_log where key = $1 and seq = $2 and ok`, key, seq).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// primeProgress runs one event through a worker, so that the slot's
// progress row exists (a test can then hold its lock), and stops it.
func (e *env) primeProgress(t *testing.T) {
	t.Helper()
	w := e.start(t)
	e.send(t, []sentEvent{{key: "prime", seq: 0}})
	pgtest.WaitFor(t, 30*time.Second, "the priming batch finished", func() (bool, error) {
		var n int
		err := e.pool.QueryRow(e.ctx, `select count(*) from partitionq.slot_progress where batch_id is null and handled >= 1`).Scan(&n)
		return n == 1, err
	})
	w.stop(t)
}

// A worker killed after a handler returned but before its progress was
// recorded: only that event runs again. Its flush is held back by a lock on
// the slot's progress row (as a slow or cut connection would), after the
// nine events before it were recorded.
func TestKillBetweenHandlerAndFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.primeProgress(t)
	var evs []sentEvent
	for s := range 10 {
		ev := sentEvent{key: "k", seq: s}
		if s == 9 {
			ev.gate = "last"
		}
		evs = append(evs, ev)
	}
	w := e.start(t)
	e.send(t, evs) // one batch
	eight := e.evID(t, "k", 8)
	pgtest.WaitFor(t, 30*time.Second, "events 0-8 recorded as done", func() (bool, error) {
		var below int64
		err := e.pool.QueryRow(e.ctx, `select done_below from partitionq.slot_progress where slot = 0`).Scan(&below)
		return below >= eight, err
	})
	lock, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(e.ctx, `select * from partitionq.slot_progress where slot = 0 for update`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `insert into pq_gate values ('last')`); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "event 9 handled", func() (bool, error) { return e.okCount(t, "k", 9) == 1, nil })
	w.kill() // its flush of event 9, and the batch's finish, wait on the lock
	if err := lock.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	pgtest.WaitFor(t, 30*time.Second, "event 9 handled again, and the batch finished", func() (bool, error) {
		var open bool
		err := e.pool.QueryRow(e.ctx, e.db.SQL(`select sub_batch is not null from pgq.subscription`)).Scan(&open)
		return e.okCount(t, "k", 9) == 2 && !open, err
	})
	r := e.check(t, map[string]int{"k": 10, "prime": 1})
	if !r.OK() || r.Repeats != 1 {
		t.Fatalf("%s (want exactly 1 repeat: event 9): %v", r, r.Examples)
	}
}

// A worker killed after its progress was recorded but before the batch
// finished: nothing runs again. The finish is held back by a lock on the
// slot consumer's subscription row (finish_batch updates it).
func TestKillBetweenFlushAndFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var evs []sentEvent
	for s := range 10 {
		ev := sentEvent{key: "k", seq: s}
		if s == 0 {
			ev.gate = "go"
		}
		evs = append(evs, ev)
	}
	w := e.start(t)
	e.send(t, evs)
	// The batch that holds event 0 is open (its handler waits at its gate,
	// so the batch cannot finish). Any open batch would not do: an empty
	// one that is finishing at that moment ends while the lock below waits
	// for it, and the lock then keeps the events' batch from opening.
	first := e.evID(t, "k", 0)
	pgtest.WaitFor(t, 30*time.Second, "the batch of event 0 open", func() (bool, error) {
		var open bool
		err := e.pool.QueryRow(e.ctx, e.db.SQL(`select coalesce(bool_or(exists (select 1 from pgq.get_batch_events(sub_batch) where ev_id = $1)), false)
			from pgq.subscription where sub_batch is not null`), first).Scan(&open)
		return open && err == nil, nil // a batch that ended between the two reads: look again
	})
	lock, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(e.ctx, e.db.SQL(`select * from pgq.subscription for update`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `insert into pq_gate values ('go')`); err != nil {
		t.Fatal(err)
	}
	last := e.evID(t, "k", 9)
	pgtest.WaitFor(t, 30*time.Second, "all 10 recorded as done", func() (bool, error) {
		var below int64
		err := e.pool.QueryRow(e.ctx, `select coalesce(max(done_below), 0) from partitionq.slot_progress where slot = 0`).Scan(&below)
		return below >= last, err
	})
	w.kill()
	if err := lock.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	pgtest.WaitFor(t, 30*time.Second, "the batch finished by the next owner", func() (bool, error) {
		var open bool
		err := e.pool.QueryRow(e.ctx, e.db.SQL(`select sub_batch is not null from pgq.subscription`)).Scan(&open)
		return !open, err
	})
	if r := e.check(t, map[string]int{"k": 10}); !r.OK() || r.Repeats != 0 {
		t.Fatalf("%s (want no repeat): %v", r, r.Examples)
	}
}

// Exactly-once effects in the same database: with a TxHandler the handler's
// write (its pq_run_log row, in the worker's transaction) commits with the
// event's completion or not at all, so under kill -9 at random every event's
// effect is there exactly once, in per-key order.
func TestExactlyOnceUnderKills(t *testing.T) {
	t.Parallel()
	keys, perKey, kills := 40, 30, 12
	if testing.Short() {
		keys, perKey, kills = 20, 20, 6
	}
	e := newEnv(t, 4)
	rng := rand.New(rand.NewPCG(3, 4))
	var evs []sentEvent
	sent := map[string]int{}
	for s := range perKey {
		for k := range keys {
			key := fmt.Sprintf("tenant-%d", k)
			f := 0
			if rng.IntN(50) == 0 {
				f = 1 // fails once, then succeeds: the failed attempt's row rolls back
			}
			evs = append(evs, sentEvent{key: key, seq: s, f: f})
			sent[key] = perKey
		}
	}
	args := [][]string{{"-tx", "-slots", "0,1"}, {"-tx", "-slots", "2,3"}, {"-tx", "-slots", "all"}}
	procs := make([]*proc, len(args))
	for i, a := range args {
		procs[i] = e.start(t, append(a, "-jitter", "5ms")...)
	}
	next := 0
	for k := 0; k < kills || next < len(evs); k++ {
		if next < len(evs) {
			end := min(next+200, len(evs))
			e.send(t, evs[next:end])
			next = end
		}
		time.Sleep(time.Duration(100+rng.IntN(250)) * time.Millisecond) // let work happen between kills
		i := rng.IntN(len(procs))
		procs[i].kill()
		procs[i] = e.start(t, append(args[i], "-jitter", "5ms")...)
	}
	total := keys * perKey
	pgtest.WaitFor(t, 3*time.Minute, fmt.Sprintf("all %d events handled", total), func() (bool, error) { return e.resolved(t) >= total, nil })
	var twice int
	if err := e.pool.QueryRow(e.ctx, `select count(*) from (select key, seq from pq_run_log where ok group by 1, 2 having count(*) > 1) d`).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	r := e.check(t, sent)
	t.Logf("%d kills: %s; events whose effect committed more than once: %d", kills, r, twice)
	if !r.OK() || twice != 0 || r.Repeats != 0 {
		t.Fatalf("exactly once broken: %s, %d effects twice: %v", r, twice, r.Examples)
	}
}
