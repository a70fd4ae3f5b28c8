package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// BatchInfo is the open batch of one slot consumer.
type BatchInfo struct {
	Consumer string
	// ID is the batch id; 0 when the consumer has no new tick to read.
	ID int64
	// PrevTick and CurTick bound the batch: the events committed between
	// the two ticks. Consumers whose batches have the same bounds read the
	// same events (each keeps its own share).
	PrevTick, CurTick int64
	// PrevSeq and CurSeq are the queue's event sequence at the two ticks:
	// CurSeq - PrevSeq bounds the number of events in the batch (all slots).
	PrevSeq, CurSeq int64
}

// NextBatches opens the next batch of every consumer (or returns the one
// that is open), in one statement for all of them (the engine's
// next_batch_custom returns a batch already open as it is). A consumer
// behind the queue's newest tick takes every tick it is behind by as one
// batch, judged by its own lag (min_interval = the time from its last tick
// to the newest), up to about maxEvents events of the queue (min_count:
// counted queue-wide, every slot's events; the engine's find_tick_helper
// may take up to twice that when the newest tick is within twice of it, or
// the first tick past it otherwise, so a merged batch spans at most
// max(2 x maxEvents, maxEvents + one tick's events) events of the queue).
// A consumer level with the newest tick gets no batch (ID 0). maxEvents <=
// 0 takes one tick per batch. Consumers with equal starting ticks get
// equal batches, so they can be read together (OpenRead).
func (e *Engine) NextBatches(ctx context.Context, tx pgx.Tx, queue string, consumers []string, maxEvents int) ([]BatchInfo, error) {
	if len(consumers) == 0 {
		return nil, nil
	}
	var count *int
	if maxEvents > 0 {
		count = &maxEvents
	}
	// The consumers' own last ticks are looked up one by one (a scalar
	// subquery per consumer, by name), not joined: the planner, short of
	// statistics on the engine's tables, would read every subscription of
	// the queue on every call.
	rows, err := tx.Query(ctx, e.f(`
		select u.c, coalesce(b.batch_id, 0), coalesce(b.prev_tick_id, 0), coalesce(b.cur_tick_id, 0),
		       coalesce(b.prev_tick_event_seq, 0), coalesce(b.cur_tick_event_seq, 0)
		  from unnest($2::text[]) with ordinality u(c, o)
		  left join (select queue_id from pgq.queue where queue_name = $1) q on true
		  left join lateral (select n.tick_time from pgq.tick n where n.tick_queue = q.queue_id
		                      order by n.tick_queue desc, n.tick_id desc limit 1) newest on true,
		  lateral pgq.next_batch_custom($1, u.c, null, $3::int4,
		       case when $3::int4 is not null then greatest(newest.tick_time - (
		           select t.tick_time from pgq.consumer c
		             join pgq.subscription s on s.sub_queue = q.queue_id and s.sub_consumer = c.co_id
		             join pgq.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
		            where c.co_name = u.c), '1 microsecond'::interval) end) b
		 order by u.o`), queue, consumers, count)
	if err != nil {
		return nil, fmt.Errorf("open batches: %w", err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BatchInfo, error) {
		var b BatchInfo
		err := r.Scan(&b.Consumer, &b.ID, &b.PrevTick, &b.CurTick, &b.PrevSeq, &b.CurSeq)
		return b, err
	})
	if err == nil && len(infos) != len(consumers) {
		err = fmt.Errorf("open batches: %d of %d consumers answered", len(infos), len(consumers))
	}
	return infos, err
}

// undo moves consumers whose batch was just opened in tx (nothing of it
// read) back to its start, with the engine's register_consumer_at, which
// drops the batch. Only for batches of this transaction: on a batch being
// read, it would skip or replay its events (register_consumer_at moves a
// consumer that exists to the tick it is given).
func (e *Engine) undo(ctx context.Context, tx pgx.Tx, queue string, consumers []string, at []int64) error {
	_, err := tx.Exec(ctx, e.f(`select count(pgq.register_consumer_at($1, u.c, u.t)) from unnest($2::text[], $3::int8[]) u(c, t)`),
		queue, consumers, at)
	if err != nil {
		return fmt.Errorf("undo %d batches: %w", len(consumers), err)
	}
	return nil
}

// Advance moves idle consumers ahead, from tick from[i] to tick to[i],
// with the engine's register_consumer_at, for a caller that owns them
// (fenced in tx) and knows they have no event of their own in between
// (the shared read saw none): the engine position of a slot skipped by
// the reads catches up with it without a batch. A consumer not standing
// at from[i] with no batch open is left alone (moving it would skip or
// replay events); ok[i] reports which were moved.
func (e *Engine) Advance(ctx context.Context, tx pgx.Tx, queue string, consumers []string, from, to []int64) (ok []bool, err error) {
	if len(consumers) == 0 {
		return nil, nil
	}
	// Each consumer's subscription is looked up alone (offset 0: not
	// joined by the planner, which joined every subscription standing at
	// the same tick, as idle slots do, with every consumer asked about).
	rows, err := tx.Query(ctx, e.f(`
		select u.o, pgq.register_consumer_at($1, u.c, u.t) is not null
		  from unnest($2::text[], $3::int8[], $4::int8[]) with ordinality u(c, f, t, o),
		  lateral (select c.co_id from pgq.consumer c where c.co_name = u.c offset 0) c,
		  lateral (select 1 from pgq.subscription s
		            where s.sub_queue = (select queue_id from pgq.queue where queue_name = $1) and s.sub_consumer = c.co_id
		              and s.sub_batch is null and s.sub_last_tick = u.f offset 0) s
		 where u.t > u.f
		 order by u.o`), queue, consumers, from, to)
	if err != nil {
		return nil, fmt.Errorf("advance %d consumers: %w", len(consumers), err)
	}
	ok = make([]bool, len(consumers))
	for rows.Next() {
		var o int
		var moved bool
		if err := rows.Scan(&o, &moved); err != nil {
			return nil, err
		}
		ok[o-1] = moved
	}
	return ok, rows.Err()
}

// BoundBatches keeps the batches just opened in tx (infos, as NextBatches
// returned them) at or before tick bound: a batch that would end past it
// is undone (moved back to its start) and, when its start is before bound,
// opened again one tick at a time, which ends at or before bound (the next
// tick after a tick before bound). A consumer standing at bound gets no
// batch. It returns the infos as they are now.
func (e *Engine) BoundBatches(ctx context.Context, tx pgx.Tx, queue string, infos []BatchInfo, bound int64) ([]BatchInfo, error) {
	var undo []string
	var at []int64
	var again []int
	for i, b := range infos {
		if b.ID == 0 || b.CurTick <= bound {
			continue
		}
		undo, at = append(undo, b.Consumer), append(at, b.PrevTick)
		if b.PrevTick < bound {
			again = append(again, i)
		}
	}
	if len(undo) == 0 {
		return infos, nil
	}
	if err := e.undo(ctx, tx, queue, undo, at); err != nil {
		return nil, err
	}
	out := append([]BatchInfo(nil), infos...)
	for i, b := range out {
		if b.ID != 0 && b.CurTick > bound {
			out[i] = BatchInfo{Consumer: b.Consumer}
		}
	}
	if len(again) == 0 {
		return out, nil
	}
	cs := make([]string, len(again))
	for j, i := range again {
		cs[j] = out[i].Consumer
	}
	one, err := e.NextBatches(ctx, tx, queue, cs, 0)
	if err != nil {
		return nil, err
	}
	for j, i := range again {
		if one[j].CurTick > bound { // cannot be: the next tick after one before bound
			return nil, fmt.Errorf("open batches: consumer %s would pass tick %d", one[j].Consumer, bound)
		}
		out[i] = one[j]
	}
	return out, nil
}

// FinishBatches closes batches in one statement; it returns how many were open.
func (e *Engine) FinishBatches(ctx context.Context, db DB, batches []int64) (int, error) {
	if len(batches) == 0 {
		return 0, nil
	}
	var n int
	err := db.QueryRow(ctx, e.f(`select coalesce(sum(pgq.finish_batch(b)), 0) from unnest($1::int8[]) b`), batches).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("finish %d batches: %w", len(batches), err)
	}
	return n, nil
}

// OpenBatches reports which of the batches are still open (a finish whose
// commit was not confirmed is known to have committed when its batch is gone).
func (e *Engine) OpenBatches(ctx context.Context, db DB, batches []int64) (map[int64]bool, error) {
	rows, err := db.Query(ctx, e.f(`select sub_batch from pgq.subscription where sub_batch = any($1::int8[])`), batches)
	if err != nil {
		return nil, err
	}
	out := map[int64]bool{}
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out[b] = true
	}
	return out, rows.Err()
}

// LastTick returns the queue's newest tick id (0 when it has none).
func (e *Engine) LastTick(ctx context.Context, db DB, queue string) (int64, error) {
	var t int64
	err := db.QueryRow(ctx, e.f(`select coalesce(max(t.tick_id), 0) from pgq.tick t join pgq.queue q on q.queue_id = t.tick_queue
		where q.queue_name = $1`), queue).Scan(&t)
	return t, err
}

// TickChannels are the notification channels on which a tick of queue is
// announced: partitionq's ticker announces on PgQ (payload: the queue's
// name), and PgQue's own ticker announces every tick (whoever calls it).
func (e *Engine) TickChannels(queue string) []string {
	if e.schema == SchemaPgQue {
		return []string{"pgque_" + queue}
	}
	return []string{TickChannel}
}

// IsTickNotice reports whether a notification announces a tick of queue.
func (e *Engine) IsTickNotice(queue, channel, payload string) bool {
	if e.schema == SchemaPgQue {
		return channel == "pgque_"+queue
	}
	return channel == TickChannel && payload == queue
}

// TickChannel is the channel partitionq's ticker announces ticks on.
const TickChannel = "partitionq_tick"

// ReadSpec says what OpenRead reads: the events of one tick range that
// belong to some slots of a group.
type ReadSpec struct {
	// Batch is the open batch of one of the slots; every slot read must
	// have a batch with the same ticks.
	Batch int64
	// Sub is the subscription of Batch's consumer; Subs are the
	// subscriptions of all the slots read (their own retried events belong
	// in the read).
	Sub  int32
	Subs []int32
	// Owners are further subscriptions whose retried events belong in the
	// read: a new generation's reads take the timed retries of its parent
	// slots that the engine's mover re-delivers after the cutover.
	Owners []int32
	// Slots are the slots read, of N. Nil (or all N) reads every slot.
	Slots []int
	N     int
	// AfterID, when not zero, resumes a read after an interrupted one.
	AfterID int64
	// SQL is the engine's query of Batch (BatchSQL) when the caller has
	// it already; empty, it is asked for.
	SQL string
}

// SlotEvent is an event with the slot of its key.
type SlotEvent struct {
	Event
	Slot int
}

// ErrBatchSQL reports a batch query whose shape this package does not know,
// so it cannot be read for several slots at once (read each slot alone).
var ErrBatchSQL = errors.New("the engine's batch query has an unexpected shape")

// Cursor streams the events of an open read in ev_id order. It lives in the
// transaction it was opened in.
type Cursor struct {
	tx   pgx.Tx
	done bool
	prev int // the last chunk's length
	// decoded counts the rows read by decodeRaw (the others were scanned).
	decoded int
	types   types
}

const readCursor = "partitionq_read"

// OpenRead declares a cursor over the events of spec, built from the
// engine's own batch query (batch_event_sql): one scan of the batch's event
// tables for every slot read, each event with its slot computed by the
// server. It returns the first chunk of at most limit events. Only
// integers are pasted into the statement around the engine's query.
func (e *Engine) OpenRead(ctx context.Context, tx pgx.Tx, spec ReadSpec, limit int) (*Cursor, []SlotEvent, error) {
	q, err := e.readSQL(ctx, tx, spec)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.Exec(ctx, "declare "+readCursor+" no scroll cursor for "+q+" order by 2"); err != nil {
		return nil, nil, fmt.Errorf("read batch %d: %w", spec.Batch, err)
	}
	c := &Cursor{tx: tx, types: types{}}
	evs, err := c.Next(ctx, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("read batch %d: %w", spec.Batch, err)
	}
	return c, evs, nil
}

// SlotsWithEvents returns which of spec's slots have events in its batch
// (one scan, no event copied out), in no order. It may name a slot whose
// only events in the batch are another consumer's retried ones (the
// engine's query is read without its owner filter): a slot named with
// nothing to read opens a batch for nothing, one left out would skip its
// events. Neither the owners nor the slots are listed in the statement,
// planned anew for every batch: lists of a few hundred values tripled its
// planning time (0.48 against 0.14 ms warm, 1.2-1.4 ms on a loaded server
// at N = 256).
func (e *Engine) SlotsWithEvents(ctx context.Context, tx pgx.Tx, spec ReadSpec) ([]int, error) {
	sql, err := e.batchSQL(ctx, tx, spec)
	if err != nil {
		return nil, err
	}
	own := " and (ev_owner is null or ev_owner = " + strconv.Itoa(int(spec.Sub)) + ")"
	if !strings.Contains(sql, own) {
		return nil, ErrBatchSQL
	}
	slotCol := "0"
	if spec.N > 1 {
		slotCol = SlotExpr("ev_extra1", spec.N)
	}
	rows, err := tx.Query(ctx, "select distinct "+slotCol+" from ("+strings.ReplaceAll(sql, own, "")+") _evs")
	if err != nil {
		return nil, fmt.Errorf("look at batch %d: %w", spec.Batch, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("look at batch %d: %w", spec.Batch, err)
	}
	if len(spec.Slots) == 0 || len(spec.Slots) >= spec.N {
		return found, nil
	}
	asked := make(map[int]bool, len(spec.Slots))
	for _, s := range spec.Slots {
		asked[s] = true
	}
	slots := found[:0]
	for _, s := range found {
		if asked[s] {
			slots = append(slots, s)
		}
	}
	return slots, nil
}

// BatchSQL returns the engine's query of the events of batch (its
// batch_event_sql): the same while the batch is open.
func (e *Engine) BatchSQL(ctx context.Context, tx pgx.Tx, batch int64) (string, error) {
	var sql string
	if err := tx.QueryRow(ctx, e.f(`select pgq.batch_event_sql($1)`), batch).Scan(&sql); err != nil {
		return "", fmt.Errorf("read batch %d: %w", batch, err)
	}
	return sql, nil
}

func (e *Engine) batchSQL(ctx context.Context, tx pgx.Tx, spec ReadSpec) (string, error) {
	if spec.SQL != "" {
		return spec.SQL, nil
	}
	return e.BatchSQL(ctx, tx, spec.Batch)
}

// readSQL is the query of spec's events (see OpenRead), unordered.
func (e *Engine) readSQL(ctx context.Context, tx pgx.Tx, spec ReadSpec) (string, error) {
	sql, err := e.batchSQL(ctx, tx, spec)
	if err != nil {
		return "", err
	}
	if len(spec.Subs) > 1 || len(spec.Owners) > 0 {
		// The engine's query keeps the retried events of its own consumer;
		// a read for several slots keeps those of every slot read (and of
		// the further owners).
		own := " and (ev_owner is null or ev_owner = " + strconv.Itoa(int(spec.Sub)) + ")"
		if !strings.Contains(sql, own) {
			return "", ErrBatchSQL
		}
		subs := make([]string, 0, len(spec.Subs)+len(spec.Owners))
		for _, s := range append(append([]int32(nil), spec.Subs...), spec.Owners...) {
			subs = append(subs, strconv.Itoa(int(s)))
		}
		sql = strings.ReplaceAll(sql, own, " and (ev_owner is null or ev_owner in ("+strings.Join(subs, ",")+"))")
	}
	// The slot column is a bigint whatever N (SlotExpr's type): the
	// cursor's rows come through one "fetch" statement, whose row
	// description pgx caches per connection, so a connection that read a
	// group of one slot and then one of several (a worker resizing from or
	// to 1) would otherwise decode an int8 as the int4 it saw first.
	slotCol := "0::bigint"
	var where []string
	if spec.N > 1 {
		slotCol = SlotExpr("ev_extra1", spec.N)
		if len(spec.Slots) > 0 && len(spec.Slots) < spec.N {
			ss := make([]string, len(spec.Slots))
			for i, s := range spec.Slots {
				ss[i] = strconv.Itoa(s)
			}
			where = append(where, slotCol+" in ("+strings.Join(ss, ",")+")")
		}
	}
	if spec.AfterID > 0 {
		where = append(where, "ev_id > "+strconv.FormatInt(spec.AfterID, 10))
	}
	q := "select " + slotCol + ", ev_id, ev_time, coalesce(ev_retry, 0), coalesce(ev_type, ''), coalesce(ev_data, ''), coalesce(ev_extra1, ''), ev_extra2, ev_extra3, ev_extra4, ev_extra1 is null from (" + sql + ") _evs"
	if len(where) > 0 {
		q += " where " + strings.Join(where, " and ")
	}
	return q, nil
}

// Next returns the next chunk of at most limit events; an empty chunk means
// the read is done.
func (c *Cursor) Next(ctx context.Context, limit int) ([]SlotEvent, error) {
	if c.done {
		return nil, nil
	}
	rows, err := c.tx.Query(ctx, "fetch "+strconv.Itoa(limit)+" from "+readCursor)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	raw := rawReadable(rows.FieldDescriptions())
	// As many as the chunk before (a read's chunks are full but its last):
	// a big read grows its slice once, a small one allocates little.
	evs := make([]SlotEvent, 0, min(limit, max(64, c.prev)))
	for rows.Next() {
		evs = append(evs, SlotEvent{})
		ev := &evs[len(evs)-1]
		if raw && decodeRaw(rows.RawValues(), ev, c.types) {
			c.decoded++
			continue
		}
		if err := scanRead(rows, ev); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.done = len(evs) < limit
	c.prev = len(evs)
	return evs, nil
}

// TickAndAnnounce runs the engine's ticker for every queue, as ticker()
// does, and announces each tick made on the queue's tick channel
// (TickChannels), so that workers waiting for events wake at once instead of
// polling. PgQue's ticker announces its ticks itself. It returns how many
// queues got a tick.
func (e *Engine) TickAndAnnounce(ctx context.Context, db DB) (int64, error) {
	if e.schema == SchemaPgQue {
		return e.Ticker(ctx, db)
	}
	var n int64
	err := db.QueryRow(ctx, e.f(`
		with t as materialized (
		    select queue_name as q, pgq.ticker(queue_name) as id from pgq.queue
		     where not queue_external_ticker and not queue_ticker_paused order by queue_name)
		select count(pg_notify($1, q)) from t where id is not null`), TickChannel).Scan(&n)
	return n, err
}

// Positions returns the last finished tick of each consumer (0 for one not
// registered), in the order given.
func (e *Engine) Positions(ctx context.Context, db DB, queue string, consumers []string) ([]int64, error) {
	return e.positions(ctx, db, queue, consumers, false)
}

// IdlePositions is Positions with 0 for a consumer whose batch is open.
func (e *Engine) IdlePositions(ctx context.Context, db DB, queue string, consumers []string) ([]int64, error) {
	return e.positions(ctx, db, queue, consumers, true)
}

func (e *Engine) positions(ctx context.Context, db DB, queue string, consumers []string, idle bool) ([]int64, error) {
	if len(consumers) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, e.f(`
		select coalesce(case when $3 and s.sub_batch is not null then 0 else s.sub_last_tick end, 0)
		  from unnest($2::text[]) with ordinality u(c, o)
		  left join pgq.consumer c on c.co_name = u.c
		  left join pgq.queue q on q.queue_name = $1
		  left join pgq.subscription s on s.sub_queue = q.queue_id and s.sub_consumer = c.co_id
		 order by u.o`), queue, consumers, idle)
	if err != nil {
		return nil, fmt.Errorf("read positions: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
