package slotstats

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/progress"
)

// The recorded progress of slots, which this package alone queries:
// partitionq.slot_progress (a row per slot: its open batch, the watermark
// and the ids above it, its counters, its last finish) and
// partitionq.slot_done (the events an exactly-once handler committed, per
// batch, and the events drains of blocked keys handled, as batch 0). The
// runner records and reads them through these functions, the parked
// package's drains the batch-0 records, Read reads them back for Status.

// Progress is the progress of the open batches of slots to record: a row
// per slot, the counts to add, and Keep false for a slot that is not owned
// any more (left out).
type Progress struct {
	Slots           []int32
	Batches, Belows []int64
	Dones           [][]byte // progress.Set.Encode of each
	Handled, Failed []int64
	Keep            []bool
}

// QueueProgress queues in b the statement that records p, in slot order
// (as Finish: a flush and a finish never deadlock). b is sent in the
// transaction that checked the slots are owned.
func QueueProgress(b *pgx.Batch, queue, group string, generation int, p Progress) {
	b.Queue(`
		insert into partitionq.slot_progress as p (queue, grp, generation, slot, batch_id, done_below, done, handled, failed, updated_at)
		select $1, $2, $10, u.slot, u.batch, u.below, u.done, u.h, u.f, clock_timestamp()
		  from unnest($3::int4[], $4::int8[], $5::int8[], $6::bytea[], $7::int8[], $8::int8[], $9::bool[]) u(slot, batch, below, done, h, f, keep)
		 where u.keep
		 order by u.slot -- in slot order, as the finish's reset: a flush and a finish never deadlock
		on conflict (queue, grp, generation, slot) do update
		   set batch_id = excluded.batch_id, done_below = excluded.done_below, done = excluded.done,
		       handled = p.handled + excluded.handled, failed = p.failed + excluded.failed, updated_at = excluded.updated_at`,
		queue, group, p.Slots, p.Batches, p.Belows, p.Dones, p.Handled, p.Failed, p.Keep, generation)
}

// QueueDrained queues in b the records of events that drains of blocked
// keys handled (slot_done, batch 0): ids[i] of slots[i]. Nothing with none.
func QueueDrained(b *pgx.Batch, queue, group string, generation int, slots []int32, ids []int64) {
	if len(ids) == 0 {
		return
	}
	b.Queue(`insert into partitionq.slot_done (queue, grp, generation, slot, batch_id, ev_id)
		select $1, $2, $3, u.slot, 0, u.id from unnest($4::int4[], $5::int8[]) u(slot, id)
		on conflict do nothing`, queue, group, generation, slots, ids)
}

// Finish clears the progress of finished batches (batches[i] of
// slots[i]) in their finishing transaction tx, records when they
// finished, drops their exactly-once records and adds their last counts to
// the slots' counters and rate buckets: one round trip.
func Finish(ctx context.Context, tx pgx.Tx, queue, group string, generation int, slots []int32, batches, handled, failed []int64) error {
	if len(slots) == 0 {
		return nil
	}
	batch := &pgx.Batch{}
	batch.Queue(`
		insert into partitionq.slot_progress as p (queue, grp, generation, slot, batch_id, done_below, done, handled, failed, updated_at, finished_at)
		select $1, $2, $6, u.slot, null, 0, '', u.h, u.f, clock_timestamp(), clock_timestamp() from unnest($3::int4[], $4::int8[], $5::int8[]) u(slot, h, f)
		 order by u.slot -- rows locked in slot order, as every write of several slots' rows does: no deadlock
		on conflict (queue, grp, generation, slot) do update
		   set batch_id = null, done_below = 0, done = '', handled = p.handled + excluded.handled,
		       failed = p.failed + excluded.failed, updated_at = excluded.updated_at, finished_at = excluded.finished_at`, queue, group, slots, handled, failed, generation)
	batch.Queue(`delete from partitionq.slot_done d using unnest($3::int4[], $4::int8[]) u(slot, batch)
		where d.queue = $1 and d.grp = $2 and d.generation = $5 and d.slot = u.slot and d.batch_id = u.batch`, queue, group, slots, batches, generation)
	QueueRecord(batch, queue, group, generation, slots, handled, failed)
	return tx.SendBatch(ctx, batch).Close()
}

// LoadProgress returns what earlier owners recorded of the open batches
// batches[i] of slots[i]: per slot, the progress row's set with the
// exactly-once completions added; unreadable lists the slots whose
// progress row cannot be decoded (their batches run whole). q should be a
// transaction, so that the two reads agree.
func LoadProgress(ctx context.Context, q db.DB, queue, group string, generation int, slots []int32, batches []int64) (sets map[int]progress.Set, unreadable []int, err error) {
	sets = map[int]progress.Set{}
	// Each slot's row by the primary key (offset 0: not joined by the
	// planner, which scanned the group's rows for each slot on a table
	// without statistics).
	rows, err := q.Query(ctx, `select u.slot, p.done_below, p.done from unnest($3::int4[], $4::int8[]) u(slot, batch),
		lateral (select p.done_below, p.done from partitionq.slot_progress p
		          where p.queue = $1 and p.grp = $2 and p.generation = $5 and p.slot = u.slot and p.batch_id = u.batch offset 0) p`,
		queue, group, slots, batches, generation)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var s int
		var below int64
		var enc []byte
		if err := rows.Scan(&s, &below, &enc); err != nil {
			rows.Close()
			return nil, nil, err
		}
		set, err := progress.Decode(below, enc)
		if err != nil {
			unreadable = append(unreadable, s)
			continue
		}
		sets[s] = set
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	drows, err := q.Query(ctx, `select d.slot, d.ev_id from partitionq.slot_done d
		join unnest($3::int4[], $4::int8[]) u(slot, batch) on u.slot = d.slot and u.batch = d.batch_id
		where d.queue = $1 and d.grp = $2 and d.generation = $5 order by 1, 2`, queue, group, slots, batches, generation)
	if err != nil {
		return nil, nil, err
	}
	for drows.Next() {
		var s int
		var id int64
		if err := drows.Scan(&s, &id); err != nil {
			drows.Close()
			return nil, nil, err
		}
		set := sets[s]
		set.Add(id)
		sets[s] = set
	}
	return sets, unreadable, drows.Err()
}

// DrainedDone returns which of ids, parked events of slot of the
// generation with that number, an exactly-once handler committed in an earlier
// drain that did not commit (slot_done, batch 0).
func DrainedDone(ctx context.Context, q db.DB, queue, group string, generation, slot int, ids []int64) (map[int64]bool, error) {
	rows, err := q.Query(ctx, `select ev_id from partitionq.slot_done where queue = $1 and grp = $2 and generation = $5 and slot = $3 and batch_id = 0
		and ev_id = any($4::int8[])`, queue, group, slot, ids, generation)
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// ForgetDrained deletes the drains' records (batch 0) of ids, events of
// slot that are resolved, in the transaction that resolves them.
func ForgetDrained(ctx context.Context, tx db.DB, queue, group string, generation, slot int, ids []int64) error {
	_, err := tx.Exec(ctx, `delete from partitionq.slot_done where queue = $1 and grp = $2 and generation = $5 and slot = $3 and batch_id = 0
		and ev_id = any($4::int8[])`, queue, group, slot, ids, generation)
	return err
}

// RecordDone records, in the exactly-once handler's transaction tx, that
// the event id of batch is done (partitionq.record_done, which checks
// that the slot is still owned at epoch: SQLSTATE PQ001 if not).
func RecordDone(ctx context.Context, tx db.DB, queue, group string, n, slot int, epoch, batch, id int64) error {
	_, err := tx.Exec(ctx, `select partitionq.record_done($1, $2, $3, $4, $5, $6, $7)`, queue, group, n, slot, epoch, batch, id)
	return err
}

// RecordDoneAll is RecordDone for the events ids of one batch (a run):
// one ownership check and one insert (partitionq.record_done_all).
func RecordDoneAll(ctx context.Context, tx db.DB, queue, group string, n, slot int, epoch, batch int64, ids []int64) error {
	_, err := tx.Exec(ctx, `select partitionq.record_done_all($1, $2, $3, $4, $5, $6, $7)`, queue, group, n, slot, epoch, batch, ids)
	return err
}
