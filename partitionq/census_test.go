package partitionq_test

import (
	"fmt"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

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
}
