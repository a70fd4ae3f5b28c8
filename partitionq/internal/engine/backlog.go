package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BacklogSpec says whose backlog Backlog counts: the slots of one group.
type BacklogSpec struct {
	Queue string
	// Subs is the subscription of each slot, by slot: len(Subs) is N.
	Subs []int32
	// Batch, Below and Done are, per slot, the open batch whose progress is
	// recorded (0: none), the recorded watermark in it, and the resolved
	// ids above the watermark (DoneSlots[i] is the slot of DoneIDs[i]).
	// Progress of a batch that is no longer the slot's open one is ignored.
	Batch     []int64
	Below     []int64
	DoneSlots []int32
	DoneIDs   []int64
}

// SlotBacklog is one slot's unfinished events in the stream.
type SlotBacklog struct {
	// Pending counts the events of the slot's share that it has not
	// finished: committed after its last finished tick (read or not yet),
	// not recorded as resolved in its open batch.
	Pending int64
	// Oldest is the age of the oldest of them (by ev_time); 0 when none.
	Oldest time.Duration
}

// Backlog counts, for every slot of a group, its unfinished events in the
// stream, in one statement: one scan of the queue's event tables from the
// oldest slot's position on (and a second over the slots' open batches
// only), each event's slot computed by the server (SlotExpr). An event
// counts for its slot when the slot's last finished tick does not include
// it, it is not another consumer's retried event, and the recorded progress
// of the slot's open batch does not mark it resolved.
// Events set aside in the retry queue are not in the stream: RetryCountsOf
// counts them. Only integers and the queue's own table name (read from the
// engine's catalog) are pasted into the statement.
func (e *Engine) Backlog(ctx context.Context, db DB, spec BacklogSpec) ([]SlotBacklog, error) {
	n := len(spec.Subs)
	out := make([]SlotBacklog, n)
	if n == 0 {
		return out, nil
	}
	var table string
	err := db.QueryRow(ctx, e.f(`select queue_data_pfx from pgq.queue where queue_name = $1`), spec.Queue).Scan(&table)
	if err != nil {
		return nil, fmt.Errorf("backlog of queue %q: %w", spec.Queue, err)
	}
	batch, below := spec.Batch, spec.Below
	if batch == nil {
		batch, below = make([]int64, n), make([]int64, n)
	}
	visible, xmin, xmax := "txid_visible_in_snapshot", "txid_snapshot_xmin", "txid_snapshot_xmax"
	if e.schema == SchemaPgQue {
		visible, xmin, xmax = "pg_visible_in_snapshot", "pg_snapshot_xmin", "pg_snapshot_xmax"
	}
	slot := SlotExpr("e.ev_extra1", n)
	from := quoteQualified(table)
	// agg: one pass over every event after the slowest slot's position,
	// grouped by slot, transaction and owner (a few groups per batch of
	// each slot), so that the visibility tests run per group, not per
	// event. pend: the groups each slot has not finished; those inside a
	// slot's open batch are counted by open instead, event by event, less
	// what its recorded progress marks resolved: a second pass over the
	// open batches' range only.
	rows, err := db.Query(ctx, e.f(`
		with s as materialized (
		    select (u.o - 1)::int as slot, u.sub, t.tick_snapshot as snap,
		           case when sb.sub_batch = u.batch then nt.tick_snapshot end as open_snap,
		           case when sb.sub_batch = u.batch then u.below else 0 end as below
		      from unnest($1::int4[], $2::int8[], $3::int8[]) with ordinality u(sub, batch, below, o)
		      join pgq.subscription sb on sb.sub_id = u.sub
		      join pgq.tick t on t.tick_queue = sb.sub_queue and t.tick_id = sb.sub_last_tick
		      left join pgq.tick nt on nt.tick_queue = sb.sub_queue and nt.tick_id = sb.sub_next_tick),
		     done as materialized (select * from unnest($4::int4[], $5::int8[]) d(slot, id)),
		     agg as (
		    select `+slot+`::int as slot, e.ev_txid, e.ev_owner, count(*) as n, min(e.ev_time) as t
		      from `+from+` e
		     where e.ev_txid >= (select min(`+xmin+`(snap)) from s)
		     group by 1, 2, 3),
		     pend as (
		    select s.slot, agg.n, agg.t, s.open_snap is not null and `+visible+`(agg.ev_txid, s.open_snap) as in_open
		      from agg join s on s.slot = agg.slot
		     where (agg.ev_owner is null or agg.ev_owner = s.sub) and not `+visible+`(agg.ev_txid, s.snap)),
		     open as (
		    select s.slot, count(*) as n, min(e.ev_time) as t
		      from `+from+` e join s on s.slot = `+slot+`
		     where e.ev_txid >= (select min(`+xmin+`(snap)) from s where open_snap is not null)
		       and e.ev_txid < (select max(`+xmax+`(open_snap)) from s)
		       and s.open_snap is not null
		       and (e.ev_owner is null or e.ev_owner = s.sub)
		       and `+visible+`(e.ev_txid, s.open_snap) and not `+visible+`(e.ev_txid, s.snap)
		       and e.ev_id > s.below and (s.slot, e.ev_id) not in (select slot, id from done)
		     group by s.slot)
		select slot, sum(n)::int8, now() - min(t)
		  from (select slot, n, t from pend where not in_open union all select slot, n, t from open) x
		 group by slot`), spec.Subs, batch, below, spec.DoneSlots, spec.DoneIDs)
	if err != nil {
		return nil, fmt.Errorf("backlog of queue %q: %w", spec.Queue, err)
	}
	type row struct {
		slot   int
		n      int64
		oldest time.Duration
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.slot, &x.n, &x.oldest)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("backlog of queue %q: %w", spec.Queue, err)
	}
	for _, x := range got {
		if x.slot >= 0 && x.slot < n {
			out[x.slot] = SlotBacklog{Pending: x.n, Oldest: max(x.oldest, 0)}
		}
	}
	return out, nil
}
