// Package slotstats owns what a group's slots have done, as the database
// records it for every worker, and is the one package that queries its
// tables: per slot and second, how many handler calls succeeded and failed
// (partitionq.slot_rate, added to by the slot's owner in the transactions
// that record its progress and finish its batches); the progress of each
// slot's open batch (partitionq.slot_progress), with the events an
// exactly-once handler or a drain recorded as done (partitionq.slot_done),
// which the runner records and reads back through it (progress.go). Status
// reads it all for a group in one statement, whatever the number of slots.
//
// The functions are safe for concurrent use; each runs on the DB it is given.
package slotstats

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/progress"
)

// Windows over which rates are reported, and how long buckets are kept.
const (
	ShortWindow = 10 * time.Second
	LongWindow  = time.Minute
	// Keep is how far back buckets are kept: older ones are deleted by the
	// writes that add new ones.
	Keep = 2 * time.Minute
)

// QueueRecord queues in b the statement that adds handler outcomes of slots
// to the current second's bucket of each and deletes the slots' buckets
// older than Keep. b is sent in the transaction that records the slots'
// progress or finishes their batches, after it checked they are owned, with
// that transaction's other writes in one round trip. Slots with nothing to
// add are left out; with none, nothing is queued.
func QueueRecord(b *pgx.Batch, queue, group string, generation int, slots []int32, handled, failed []int64) {
	if sql, args, ok := recordStmt(queue, group, generation, slots, handled, failed); ok {
		b.Queue(sql, args...)
	}
}

func recordStmt(queue, group string, generation int, slots []int32, handled, failed []int64) (string, []any, bool) {
	var ss []int32
	var hs, fs []int64
	for i, s := range slots {
		if handled[i] != 0 || failed[i] != 0 {
			ss, hs, fs = append(ss, s), append(hs, handled[i]), append(fs, failed[i])
		}
	}
	if len(ss) == 0 {
		return "", nil, false
	}
	// The old buckets are found slot by slot, each by a range of the
	// primary key (offset 0 keeps the planner from joining the slots with
	// the table instead: without statistics, on a group just set up, it
	// scanned all the group's buckets, some thirty thousand at N = 256,
	// for every write).
	return `
		with now as (select floor(extract(epoch from clock_timestamp()))::bigint as sec),
		     gone as (delete from partitionq.slot_rate r where r.ctid = any(array(
		               select x.ctid from unnest($3::int4[]) u(slot),
		                 lateral (select x.ctid from partitionq.slot_rate x
		                           where x.queue = $1 and x.grp = $2 and x.generation = $7 and x.slot = u.slot
		                             and x.sec < floor(extract(epoch from now()))::bigint - $6
		                          offset 0) x)))
		insert into partitionq.slot_rate as r (queue, grp, generation, slot, sec, handled, failed)
		select $1, $2, $7, u.slot, now.sec, u.h, u.f from now, unnest($3::int4[], $4::int8[], $5::int8[]) u(slot, h, f)
		 order by u.slot -- in slot order: two writers never deadlock
		on conflict (queue, grp, generation, slot, sec) do update set handled = r.handled + excluded.handled, failed = r.failed + excluded.failed`,
		[]any{queue, group, ss, hs, fs, int64(Keep / time.Second), generation}, true
}

// Rates are handler calls per second over the last ShortWindow and
// LongWindow, counted over whole seconds before the current one.
type Rates struct {
	Handled10s, Failed10s float64
	Handled1m, Failed1m   float64
}

// Add returns the sum of two rates.
func (r Rates) Add(o Rates) Rates {
	return Rates{Handled10s: r.Handled10s + o.Handled10s, Failed10s: r.Failed10s + o.Failed10s,
		Handled1m: r.Handled1m + o.Handled1m, Failed1m: r.Failed1m + o.Failed1m}
}

// Slot is what the database records of one slot of a group.
type Slot struct {
	Slot int
	// Batch is the open batch the recorded progress is of (0: none), and
	// Done what of its share is resolved: the watermark and the ids above
	// it, with the exactly-once completions (partitionq.slot_done) merged in.
	Batch int64
	Done  progress.Set
	// SinceFinish is how long ago the slot's owner last finished a batch;
	// negative when it never did since partitionq recorded it.
	SinceFinish time.Duration
	Rates       Rates
}

// Read returns slots (of the generation with that number) of a group, in
// slot order: their recorded progress, last finish and rates, in one
// statement, and the database's time the rates end at (now() of q's
// transaction; zero when slots is empty). A progress row that cannot be
// decoded reads as no progress.
func Read(ctx context.Context, q db.DB, queue, group string, generation int, slots []int32) ([]Slot, time.Time, error) {
	rows, err := q.Query(ctx, `
		with now as (select floor(extract(epoch from now()))::bigint as sec)
		select s.slot, coalesce(p.batch_id, 0), coalesce(p.done_below, 0), coalesce(p.done, ''::bytea),
		       coalesce(now() - p.finished_at, interval '-1 second'),
		       (select coalesce(array_agg(d.ev_id order by d.ev_id), '{}') from partitionq.slot_done d
		         where d.queue = s.queue and d.grp = s.grp and d.generation = s.generation and d.slot = s.slot and d.batch_id = p.batch_id),
		       coalesce(r.h10, 0), coalesce(r.f10, 0), coalesce(r.h60, 0), coalesce(r.f60, 0), now()
		  from (select $1::text as queue, $2::text as grp, $5::int as generation, u.slot from unnest($6::int4[]) u(slot)) s
		  left join partitionq.slot_progress p on p.queue = s.queue and p.grp = s.grp and p.generation = s.generation and p.slot = s.slot
		  left join lateral (
		        select sum(x.handled) filter (where x.sec >= now.sec - $3) as h10, sum(x.failed) filter (where x.sec >= now.sec - $3) as f10,
		               sum(x.handled) as h60, sum(x.failed) as f60
		          from partitionq.slot_rate x, now
		         where x.queue = s.queue and x.grp = s.grp and x.generation = s.generation and x.slot = s.slot and x.sec >= now.sec - $4 and x.sec < now.sec) r on true
		 order by s.slot`, queue, group, int64(ShortWindow/time.Second), int64(LongWindow/time.Second), generation, slots)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read slot statistics: %w", err)
	}
	short, long := ShortWindow.Seconds(), LongWindow.Seconds()
	var at time.Time
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Slot, error) {
		var (
			s              Slot
			below          int64
			enc            []byte
			done           []int64
			h10, f10, h60  int64
			f60            int64
			sinceFinishRaw time.Duration
		)
		if err := r.Scan(&s.Slot, &s.Batch, &below, &enc, &sinceFinishRaw, &done, &h10, &f10, &h60, &f60, &at); err != nil {
			return Slot{}, err
		}
		s.SinceFinish = sinceFinishRaw
		s.Rates = Rates{Handled10s: float64(h10) / short, Failed10s: float64(f10) / short,
			Handled1m: float64(h60) / long, Failed1m: float64(f60) / long}
		if s.Batch == 0 {
			return s, nil
		}
		set, err := progress.Decode(below, enc)
		if err != nil {
			return s, nil // as the next owner would: the batch runs whole
		}
		for _, id := range done {
			set.Add(id)
		}
		s.Done = set
		return s, nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return got, at, nil
}
