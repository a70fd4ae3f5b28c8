package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Status counts each slot's unfinished events exactly under skew: 90% of
// the events on one key. Before any worker runs every event is pending on
// its key's slot; while the hot key's handler is held after 300 of its
// events, its slot's pending is exactly what is left of it (the recorded
// progress of the open batch: a watermark stopped at the held event, and
// the other keys' events resolved above it), and the other slots are at 0.
func TestStatusPendingExactUnderSkew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, hotEvents, coldKeys, coldEach = 4, 900, 50, 2
	b.group(t, n)
	want := make([]int64, n)
	hotSlot, err := b.client.SlotOf(b.ctx, "hot", n)
	if err != nil {
		t.Fatal(err)
	}
	var ms []partitionq.Message
	for i := range hotEvents {
		ms = append(ms, partitionq.Message{Key: "hot", Type: "T", Payload: []byte(fmt.Sprint(i))})
		if i%(hotEvents/(coldKeys*coldEach)) == 0 { // the cold keys' events interleaved with the hot ones
			k := fmt.Sprintf("cold-%d", len(ms)%coldKeys)
			ms = append(ms, partitionq.Message{Key: k, Type: "T", Payload: []byte("c")})
		}
	}
	for _, m := range ms {
		s, err := b.client.SlotOf(b.ctx, m.Key, n)
		if err != nil {
			t.Fatal(err)
		}
		want[s]++
	}
	sentAt := time.Now()
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, s := range st.SlotStatus {
		if s.Pending != want[i] {
			t.Errorf("before any worker: slot %d pending %d, want %d", i, s.Pending, want[i])
		}
		if (s.Pending > 0) != (s.Oldest > 0) {
			t.Errorf("slot %d: pending %d but oldest %s", i, s.Pending, s.Oldest)
		}
		total += s.Pending
	}
	if st.Pending != total || total != int64(len(ms)) {
		t.Errorf("group pending %d, slots' sum %d, sent %d", st.Pending, total, len(ms))
	}

	const handleFirst = 300
	release := make(chan struct{})
	var released sync.Once
	unhold := func() { released.Do(func() { close(release) }) }
	var hotDone atomic.Int64
	var once sync.Once
	held := make(chan struct{})
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key != "hot" {
			return nil
		}
		if hotDone.Load() == handleFirst {
			once.Do(func() { close(held) })
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		hotDone.Add(1)
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Limits: partitionq.LimitsConfig{Concurrency: 8}})
	t.Cleanup(unhold) // before the worker's stop, which waits for the handler
	<-held
	wantHot := want[hotSlot] - handleFirst - (want[hotSlot] - hotEvents) // the hot slot's cold keys are done too
	var last partitionq.GroupStatus
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("slot %d pending %d, the others 0", hotSlot, wantHot), func() (bool, error) {
		last, err = b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for i, s := range last.SlotStatus {
			if (i == hotSlot && s.Pending != wantHot) || (i != hotSlot && s.Pending != 0) {
				return false, nil
			}
			if i != hotSlot && want[i] > 0 && s.SinceFinish < 0 { // its batch is done: its finish follows
				return false, nil
			}
		}
		return true, nil
	})
	hs := last.SlotStatus[hotSlot]
	if !hs.InBatch || hs.Oldest < time.Since(sentAt)-time.Second || hs.Oldest <= 0 {
		t.Errorf("held hot slot: in batch %v, oldest unfinished %s (sent %s ago)", hs.InBatch, hs.Oldest, time.Since(sentAt))
	}
	for i, s := range last.SlotStatus {
		if i != hotSlot && want[i] > 0 && (s.SinceFinish < 0 || s.SinceFinish > time.Minute || s.Oldest != 0) {
			t.Errorf("slot %d done: since last finish %s, oldest %s", i, s.SinceFinish, s.Oldest)
		}
	}
	// The minute's rate counts whole seconds: once the current one passed,
	// it holds every event the hot slot handled.
	doneHot := float64(want[hotSlot] - wantHot)
	pgtest.WaitFor(t, 10*time.Second, fmt.Sprintf("slot %d: %v handled in the minute", hotSlot, doneHot), func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && math.Abs(st.SlotStatus[hotSlot].Rates.Handled1m*60-doneHot) < 1e-6, err
	})
	unhold()
	pgtest.WaitFor(t, 30*time.Second, "nothing pending", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && st.Pending == 0, err
	})
}

// The rates Status reports come from the database and match a steady load:
// 100 events a second for 11 seconds, one in ten failing (dead-lettered at
// its first attempt). The truth is what the handler did: its calls are
// timed, and Status's rates over the last 10 s and minute (whole seconds
// before the current one) must be within 10% of the calls in those seconds.
func TestStatusRatesSteadyLoad(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	var mu sync.Mutex
	var okAt, failAt []time.Time
	errBad := errors.New("bad event")
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Type == "Bad" {
			failAt = append(failAt, time.Now())
			return errBad
		}
		okAt = append(okAt, time.Now())
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{MaxAttempts: 1}})
	const perTick, every, seconds = 5, 50 * time.Millisecond, 11
	tk := time.NewTicker(every)
	defer tk.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < seconds*time.Second {
		<-tk.C
		ms := make([]partitionq.Message, perTick)
		for i := range ms {
			typ := "Good"
			if (sent+i)%10 == 0 {
				typ = "Bad"
			}
			ms[i] = partitionq.Message{Key: fmt.Sprintf("k%d", (sent+i)%37), Type: typ, Payload: []byte("{}")}
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		sent += perTick
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	now := st.At.Truncate(time.Second)
	mu.Lock()
	in := func(ts []time.Time, w time.Duration) float64 {
		n := 0
		for _, at := range ts {
			if !at.Before(now.Add(-w)) && at.Before(now) {
				n++
			}
		}
		return float64(n) / w.Seconds()
	}
	truth := partitionq.Rates{Handled10s: in(okAt, 10*time.Second), Failed10s: in(failAt, 10*time.Second),
		Handled1m: in(okAt, time.Minute), Failed1m: in(failAt, time.Minute)}
	mu.Unlock()
	t.Logf("sent %.0f/s; handler: %+v; status: %+v", float64(perTick)/every.Seconds(), truth, st.Rates)
	within := func(what string, got, want float64) {
		if want <= 0 || math.Abs(got-want) > 0.1*want {
			t.Errorf("%s: %.2f/s, the handler did %.2f/s: not within 10%%", what, got, want)
		}
	}
	within("handled over 10 s", st.Rates.Handled10s, truth.Handled10s)
	within("failed over 10 s", st.Rates.Failed10s, truth.Failed10s)
	within("handled over 1 min", st.Rates.Handled1m, truth.Handled1m)
	within("failed over 1 min", st.Rates.Failed1m, truth.Failed1m)
	var sum partitionq.Rates
	for _, s := range st.SlotStatus {
		if s.Rates.Handled10s <= 0 {
			t.Errorf("slot %d: no handled rate", s.Slot)
		}
		sum.Handled10s += s.Rates.Handled10s
		sum.Failed1m += s.Rates.Failed1m
	}
	if math.Abs(sum.Handled10s-st.Rates.Handled10s) > 1e-9 || math.Abs(sum.Failed1m-st.Rates.Failed1m) > 1e-9 {
		t.Errorf("group rates %+v are not the sum of the slots' %+v", st.Rates, sum)
	}
}

// An event the engine's retry mover puts back into the stream belongs to
// the consumer that retried it (ev_owner): it counts for that slot only,
// never for another group reading the same queue, whose pending stays the
// number of events sent.
func TestStatusPendingCountsOnlyOwnRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "other", Slots: 3}); err != nil {
		t.Fatal(err)
	}
	var calls sync.Map // event id -> *atomic.Int32
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		n, _ := calls.LoadOrStore(ev.ID, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 && ev.Key == "retried" {
			return errors.New("first attempt fails")
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{Policy: partitionq.PolicyRetryLater, BackoffMin: 50 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	var ms []partitionq.Message
	for i := range 19 {
		ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte("{}")})
	}
	ms = append(ms, partitionq.Message{Key: "retried", Type: "T", Payload: []byte("{}")})
	ids, err := b.client.SendBatch(b.ctx, "q", ms)
	if err != nil {
		t.Fatal(err)
	}
	retried := ids[len(ids)-1].ID
	pgtest.WaitFor(t, 30*time.Second, "the retried event handled again, and group g done", func() (bool, error) {
		n, ok := calls.Load(retried)
		if !ok || n.(*atomic.Int32).Load() < 2 {
			return false, nil
		}
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && st.Pending == 0, err
	})
	st, err := b.client.Status(b.ctx, "q", "other")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != int64(len(ms)) {
		t.Errorf("group other: %d pending, want the %d events sent (the retried copy is g's)", st.Pending, len(ms))
	}
}

// oraclePending counts each slot's pending events of group g the plain
// way: every event of the queue's tables not in the slot's last finished
// tick, keyless or its own, by the routing expression (no open batch: no
// worker runs). One full scan: the census must say the same.
func (b *bundle) oraclePending(t *testing.T, n int) []int64 {
	t.Helper()
	var table string
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = 'q'`)).Scan(&table); err != nil {
		t.Fatal(err)
	}
	vis := "txid_visible_in_snapshot"
	if b.db.Schema == "pgque" {
		vis = "pg_visible_in_snapshot"
	}
	rows, err := b.pool.Query(b.ctx, b.db.SQL(fmt.Sprintf(`
		select (substring(c.co_name from '#([0-9]+)/'))::int, count(e.ev_id)
		  from pgq.subscription s join pgq.consumer c on c.co_id = s.sub_consumer
		  join pgq.queue q on q.queue_id = s.sub_queue and q.queue_name = 'q'
		  join pgq.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
		  left join %[1]s e on (case when e.ev_extra1 is null then 0 else (hashtextextended(e.ev_extra1, 0) %% %[2]d + %[2]d) %% %[2]d end)
		                       = (substring(c.co_name from '#([0-9]+)/'))::int
		                   and (e.ev_owner is null or e.ev_owner = s.sub_id) and not %[3]s(e.ev_txid, t.tick_snapshot)
		 where c.co_name like 'g#%%' group by 1 order by 1`, table, n, vis)))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := make([]int64, n)
	for rows.Next() {
		var s int
		var c int64
		if err := rows.Scan(&s, &c); err != nil {
			t.Fatal(err)
		}
		out[s] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// backlog reads group g's backlog straight from partitionq.group_backlog
// with a scan budget (no progress recorded: no worker runs).
func (b *bundle) backlog(t *testing.T, n int, budget int64) (lo, hi []int64) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select slot, pending, pending_max from partitionq.group_backlog($1, 'q', 'g', $4, $2, $2, '{}', '{}', $3)`,
		b.db.Schema, make([]int64, n), budget, n)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	lo, hi = make([]int64, n), make([]int64, n)
	for rows.Next() {
		var s int
		var l, h int64
		if err := rows.Scan(&s, &l, &h); err != nil {
			t.Fatal(err)
		}
		lo[s], hi[s] = l, h
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return lo, hi
}

// The census counts each tick range's events by slot once; the backlog of
// every slot read through it equals a full scan's at every stage: the
// census at its start, one range counted a call, all counted, events after
// the newest tick, keyless events. A scan stopped at its budget gives a
// range that holds the true count, never a guess.
func TestCensusBacklogEqualsAFullScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 5
	b.group(t, n)
	send := func(round int) {
		var ms []partitionq.Message
		for i := range 40 {
			key := "hot"
			if i%3 == 0 {
				key = fmt.Sprintf("tenant-%d-%d", round, i)
			}
			ms = append(ms, partitionq.Message{Key: key, Payload: []byte("x")})
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.insert_event('q', 'T', 'keyless')`)); err != nil {
			t.Fatal(err)
		}
	}
	tick := func() {
		if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.force_tick('q')`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.ticker('q')`)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, status bool) {
		t.Helper()
		want := b.oraclePending(t, n)
		lo, hi := b.backlog(t, n, 1_000_000)
		for s := range n {
			if lo[s] != want[s] || hi[s] != want[s] {
				t.Errorf("%s: slot %d backlog %d..%d, a full scan counts %d", what, s, lo[s], hi[s], want[s])
			}
		}
		lo, hi = b.backlog(t, n, 7) // stops early: a range around the count
		for s := range n {
			if lo[s] > want[s] || hi[s] < want[s] {
				t.Errorf("%s, a scan of 7 events: slot %d backlog %d..%d does not hold the count %d", what, s, lo[s], hi[s], want[s])
			}
		}
		if !status { // Status brings the census up to date
			return
		}
		st, err := b.client.Status(b.ctx, "q", "g")
		if err != nil {
			t.Fatal(err)
		}
		for s, ss := range st.SlotStatus {
			if ss.Pending != want[s] || ss.PendingMax != want[s] {
				t.Errorf("%s: Status slot %d pending %d..%d, a full scan counts %d", what, s, ss.Pending, ss.PendingMax, want[s])
			}
		}
	}
	check("nothing sent", false)
	for r := range 6 {
		send(r)
		tick()
	}
	send(99) // after the newest tick
	// One range a call: the census is behind, then level.
	for i := range 8 {
		if _, err := b.pool.Exec(b.ctx, `select partitionq.census($1, 'q', $2, 1)`, b.db.Schema, n); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("census call %d", i+1), false)
	}
	var behind int64
	if err := b.pool.QueryRow(b.ctx, `select count(*) from partitionq.census where queue = 'q' and n = $1`, n).Scan(&behind); err != nil || behind != 7 {
		t.Fatalf("the census has %d rows (%v), want 7: the base and 6 ticks", behind, err)
	}
	check("through Status", true)
	// Many ranges in one call (read in one statement since schema version 13):
	// each tick still gets its row, each range's counts its own.
	for r := 10; r < 16; r++ {
		send(r)
		tick()
	}
	var counted int64
	if err := b.pool.QueryRow(b.ctx, `select partitionq.census($1, 'q', $2, 1000000)`, b.db.Schema, n).Scan(&counted); err != nil || counted != 7*41 {
		// (the first range also holds what was sent after the 6th tick)
		t.Fatalf("one census call over 6 ranges counted %d events (%v), want %d", counted, err, 7*41)
	}
	if err := b.pool.QueryRow(b.ctx, `select count(*) from partitionq.census where queue = 'q' and n = $1`, n).Scan(&behind); err != nil || behind != 13 {
		t.Fatalf("the census has %d rows (%v), want 13: the base and 12 ticks", behind, err)
	}
	check("six ranges in one call", false)
	// Each tick's row is what one range a call writes.
	rows := func() string {
		var s string
		if err := b.pool.QueryRow(b.ctx, `select string_agg(format('%s %s %s %s', tick_id, counts, firsts, owned), E'\n' order by tick_id)
			  from partitionq.census where queue = 'q' and n = $1`, n).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	many := rows()
	if _, err := b.pool.Exec(b.ctx, `with s as (delete from partitionq.census_state where queue = 'q' and n = $1)
		delete from partitionq.census where queue = 'q' and n = $1`, n); err != nil {
		t.Fatal(err)
	}
	for range 13 {
		if _, err := b.pool.Exec(b.ctx, `select partitionq.census($1, 'q', $2, 1)`, b.db.Schema, n); err != nil {
			t.Fatal(err)
		}
	}
	if one := rows(); one != many {
		t.Errorf("the census's rows from one call over many ranges:\n%s\nfrom one range a call:\n%s", many, one)
	}
}

// The ticker's census looks only at queues with a tick it has not counted
// (since schema version 12): in a database of idle groups a round counts nothing and
// runs no queue's census; a tick on one queue runs the census of that
// queue's numbers of slots, and of no other queue's.
func TestTheTickersCensusPassesOverIdleQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, q := range []string{"q1", "q2", "q3"} {
		for _, n := range []int{2, 4} {
			if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: q, Group: fmt.Sprintf("g%d", n), Slots: n}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One round of the ticker's census, in a transaction that counts the
	// census calls it makes (track_functions, for this transaction only;
	// the session's counts not yet reported to the server's statistics
	// are read before and after, so earlier rounds do not count).
	round := func() (counted, calls int64) {
		t.Helper()
		const censusCalls = `select coalesce(sum(calls), 0) from pg_stat_xact_user_functions
			where schemaname = 'partitionq' and funcname = 'census'`
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `set local track_functions = 'pl'`); err != nil {
				return err
			}
			var before int64
			if err := tx.QueryRow(b.ctx, censusCalls).Scan(&before); err != nil {
				return err
			}
			if err := tx.QueryRow(b.ctx, `select partitionq.census_all($1, 1000000)`, b.db.Schema).Scan(&counted); err != nil {
				return err
			}
			if err := tx.QueryRow(b.ctx, censusCalls).Scan(&calls); err != nil {
				return err
			}
			calls -= before
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return counted, calls
	}
	if _, calls := round(); calls != 6 {
		t.Fatalf("the first round ran %d censuses, want 6 (3 queues x 2 numbers of slots, none counted yet)", calls)
	}
	if counted, calls := round(); calls != 0 || counted != 0 {
		t.Fatalf("a round with no new tick counted %d events in %d censuses, want none", counted, calls)
	}
	for i := range 3 {
		if _, err := b.client.Send(b.ctx, "q2", partitionq.Message{Key: fmt.Sprint("k", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.force_tick('q2')`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, b.db.SQL(`select pgq.ticker('q2')`)); err != nil {
		t.Fatal(err)
	}
	counted, calls := round()
	if calls != 2 || counted != 6 {
		t.Fatalf("after a tick of q2 with 3 events the round counted %d events in %d censuses, want 6 in 2 (q2's groups of 2 and 4 slots, 3 events each)", counted, calls)
	}
	if counted, calls := round(); calls != 0 || counted != 0 {
		t.Fatalf("a round after everything was counted counted %d events in %d censuses, want none", counted, calls)
	}
}
