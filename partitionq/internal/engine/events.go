package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one engine event row.
type Event struct {
	ID     int64
	Time   time.Time
	Retry  int32 // ev_retry: 0 when fresh
	Type   string
	Data   string
	Key    string // ev_extra1; "" when the event has none
	NoKey  bool   // ev_extra1 is NULL: sent without a key (by another producer)
	Extra2 *string
	Extra3 *string
	Extra4 *string
}

// NewEvent is one event to insert. An empty Key stores none (NULL
// ev_extra1, which routes to slot 0): partitionq's producers always give
// one; a dead letter of an event without a key is replayed without one.
type NewEvent struct {
	Key, Type, Data string
}

// Insert inserts one event and returns its id.
func (e *Engine) Insert(ctx context.Context, db DB, queue string, ev NewEvent) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, e.f(`select pgq.insert_event($1, $2, $3, nullif($4, ''), null, null, null)`),
		queue, ev.Type, ev.Data, ev.Key).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert event into queue %q: %w", queue, err)
	}
	return id, nil
}

// InsertMany inserts events and returns their ids in input order. In a
// transaction, a batch of BulkInsertMin events or more is loaded with COPY
// when the session may (see insertBulk); otherwise one statement calls
// insert_event per event.
func (e *Engine) InsertMany(ctx context.Context, db DB, queue string, evs []NewEvent) ([]int64, error) {
	if tx, ok := db.(pgx.Tx); ok && len(evs) >= BulkInsertMin {
		ids, done, err := e.insertBulk(ctx, tx, queue, evs)
		if err != nil {
			return nil, fmt.Errorf("insert %d events into queue %q: %w", len(evs), queue, err)
		}
		if done {
			return ids, nil
		}
	}
	types := make([]string, len(evs))
	datas := make([]string, len(evs))
	keys := make([]string, len(evs))
	for i, ev := range evs {
		types[i], datas[i], keys[i] = ev.Type, ev.Data, ev.Key
	}
	rows, err := db.Query(ctx, e.f(`
		select pgq.insert_event($1, u.t, u.d, nullif(u.k, ''), null, null, null)
		  from unnest($2::text[], $3::text[], $4::text[]) with ordinality as u(t, d, k, n)
		 order by u.n`), queue, types, datas, keys)
	if err != nil {
		return nil, fmt.Errorf("insert %d events into queue %q: %w", len(evs), queue, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("insert %d events into queue %q: %w", len(evs), queue, err)
	}
	return ids, nil
}

// BulkInsertMin is the smallest batch InsertMany loads with COPY: below it
// the extra round trip costs more than insert_event's per-event work (on
// PgQ; PgQue's insert_event, in PL/pgSQL, costs about twice as much).
const BulkInsertMin = 64

// insertBulk loads evs into the queue's current event table with COPY, in
// tx, and returns their ids in input order. done is false, with nothing
// written, when this session may not or the queue asks for the engine's own
// per-event path; the caller then uses insert_event, which raises the
// engine's own errors (unknown queue, inserts disabled).
//
// It writes the rows the engine's insert_event_raw writes (ev_id from the
// queue's event sequence, ev_time now(), ev_txid by the table's default:
// bigint on PgQ, xid8 on PgQue; no owner or retry) into the table
// current_event_table names: both engines document that table as the
// place to add events "without going via functions, e.g. by COPY", valid
// for the rest of the transaction. insert_event_raw does per event a
// lookup of the queue and a one-row INSERT (SPI in PgQ's C, dynamic SQL in
// PgQue's PL/pgSQL), about ten times the server time of COPY on PgQ and
// twenty on PgQue (docs/benchmarks.md). Its checks are kept: a queue with
// inserts disabled, or (PgQ only) with a per-transaction limit, which only
// the engine counts, goes through insert_event. The session needs INSERT
// on the event table and USAGE on the sequence (the queue's owner,
// pgq_admin or pgque_admin); a producer with the writer role alone does not
// have them and goes through insert_event.
func (e *Engine) insertBulk(ctx context.Context, tx pgx.Tx, queue string, evs []NewEvent) (ids []int64, done bool, err error) {
	var (
		prefix  string
		table   int32
		allowed bool
		now     time.Time
	)
	// One round trip: the table's name, built as current_event_table
	// builds it (that function may not be granted to the session), whether
	// this path may be used, and then the events' ids from the queue's
	// sequence, so that each event's id is known and they rise in input
	// order whatever order COPY stores the rows in.
	err = tx.QueryRow(ctx, e.f(`
		select a.pfx, a.tbl, a.ok, now(),
		       case when a.ok then (select array_agg(s.id) from (select nextval(a.seq) as id from generate_series(1, $2)) s) end
		  from (select q.queue_data_pfx as pfx, q.queue_cur_table as tbl, q.queue_event_seq as seq,
		               (not q.queue_disable_insert or current_setting('session_replication_role') = 'replica')
		               `+e.perTxLimitUnset()+`
		               and has_table_privilege(q.queue_data_pfx || '_' || q.queue_cur_table::text, 'insert')
		               and has_sequence_privilege(q.queue_event_seq, 'usage') as ok
		          from pgq.queue q where q.queue_name = $1) a`), queue, len(evs)).Scan(&prefix, &table, &allowed, &now, &ids)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !allowed) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(ids) != len(evs) {
		return nil, false, fmt.Errorf("got %d event ids for %d events", len(ids), len(evs))
	}
	slices.Sort(ids)
	name := pgx.Identifier{prefix + "_" + fmt.Sprint(table)}
	if schema, rel, ok := strings.Cut(prefix, "."); ok {
		name = pgx.Identifier{schema, rel + "_" + fmt.Sprint(table)}
	}
	n, err := tx.CopyFrom(ctx, name, []string{"ev_id", "ev_time", "ev_type", "ev_data", "ev_extra1"},
		pgx.CopyFromSlice(len(evs), func(i int) ([]any, error) {
			var key any
			if evs[i].Key != "" {
				key = evs[i].Key
			}
			return []any{ids[i], now, evs[i].Type, evs[i].Data, key}, nil
		}))
	if err != nil {
		return nil, false, err
	}
	if n != int64(len(evs)) {
		return nil, false, fmt.Errorf("copied %d of %d events", n, len(evs))
	}
	return ids, true, nil
}

// perTxLimitUnset is insertBulk's check that the queue has no limit of
// events per transaction: PgQ's queue_per_tx_limit, which PgQue dropped.
func (e *Engine) perTxLimitUnset() string {
	if e.schema == SchemaPgQue {
		return ""
	}
	return "and q.queue_per_tx_limit is null"
}

const eventCols = `ev_id, ev_time, coalesce(ev_retry, 0), coalesce(ev_type, ''), coalesce(ev_data, ''), coalesce(ev_extra1, ''), ev_extra2, ev_extra3, ev_extra4, ev_extra1 is null`

func scanEvent(r pgx.CollectableRow) (Event, error) {
	var ev Event
	err := r.Scan(&ev.ID, &ev.Time, &ev.Retry, &ev.Type, &ev.Data, &ev.Key, &ev.Extra2, &ev.Extra3, &ev.Extra4, &ev.NoKey)
	return ev, err
}

// keyIs is the condition that a retry-queue row belongs to the key of $n:
// an event without a key (NULL) has the key "", as Event.Key says.
func keyIs(n int) string { return fmt.Sprintf("coalesce(ev_extra1, '') = $%d", n) }

// ------------------------------------------------------------ retry queue

// Far is the retry time of a parked event: the engine's retry mover only
// moves rows whose time has come, so it never touches a parked row.
var Far = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// RetryRow is one event to put into the consumer's retry queue.
type RetryRow struct {
	Event
	After time.Time // when the engine may re-deliver it (Far: never on its own)
	Retry int32     // ev_retry to store
}

// PutRetry inserts rows into the retry queue of consumer through the
// engine's event_retry_raw, in one statement. ev_retry is stored as given:
// nothing is incremented behind the caller's back. A row whose event the
// consumer's retry queue holds already is left out: a write whose commit
// was lost with its connection may have committed, and is written again
// (the retry queue's key is the consumer and the event; another row for
// it would fail the statement every time).
func (e *Engine) PutRetry(ctx context.Context, db DB, queue, consumer string, rows []RetryRow) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	after := make([]time.Time, n)
	ids := make([]int64, n)
	times := make([]time.Time, n)
	retries := make([]int32, n)
	types := make([]string, n)
	datas := make([]string, n)
	keys := make([]*string, n)
	x2 := make([]*string, n)
	x3 := make([]*string, n)
	x4 := make([]*string, n)
	for i, r := range rows {
		after[i], ids[i], times[i], retries[i] = r.After, r.ID, r.Time, r.Retry
		types[i], datas[i] = r.Type, r.Data
		if !r.NoKey {
			keys[i] = &r.Key
		}
		x2[i], x3[i], x4[i] = r.Extra2, r.Extra3, r.Extra4
	}
	_, err := db.Exec(ctx, e.f(`
		select pgq.event_retry_raw($1, $2, u.a, u.id, u.t, u.r, u.ty, u.d, u.k, u.x2, u.x3, u.x4)
		  from unnest($3::timestamptz[], $4::int8[], $5::timestamptz[], $6::int4[], $7::text[], $8::text[],
		              $9::text[], $10::text[], $11::text[], $12::text[]) as u(a, id, t, r, ty, d, k, x2, x3, x4)
		 where not exists (select 1 from pgq.retry_queue rq
		                    where rq.ev_owner = (select s.sub_id from pgq.subscription s
		                                           join pgq.queue q on q.queue_id = s.sub_queue
		                                           join pgq.consumer c on c.co_id = s.sub_consumer
		                                          where q.queue_name = $1 and c.co_name = $2)
		                      and rq.ev_id = u.id)`),
		queue, consumer, after, ids, times, retries, types, datas, keys, x2, x3, x4)
	if err != nil {
		return fmt.Errorf("put %d events into the retry queue of %q: %w", n, consumer, err)
	}
	return nil
}

// RetryHead is the oldest retry-queue event of one key of a subscription,
// with the number of events of that key behind it.
type RetryHead struct {
	Event
	After   time.Time
	Waiting int64
}

// RetryEvents returns the retry-queue events of one key of subID in ev_id
// order, at most limit of them.
func (e *Engine) RetryEvents(ctx context.Context, db DB, subID int32, key string, limit int) ([]Event, error) {
	rows, err := db.Query(ctx, e.f(`
		select `+eventCols+` from pgq.retry_queue
		 where ev_owner = $1 and `+keyIs(2)+`
		 order by ev_id limit $3`), subID, key, limit)
	if err != nil {
		return nil, fmt.Errorf("read retry queue: %w", err)
	}
	return pgx.CollectRows(rows, scanEvent)
}

// ErrLocked reports that a retry-queue row is locked by another transaction.
var ErrLocked = errors.New("retry event is being handled right now")

// LockRetry locks one parked retry-queue row (one at Far) for the rest of
// tx. wait=false makes it fail with ErrLocked at once when another
// transaction holds it; wait=true waits up to the session's lock_timeout
// and then fails with ErrLocked. A row that no longer exists, or that the
// engine's mover is due to move (not parked), gives ok=false.
func (e *Engine) LockRetry(ctx context.Context, tx pgx.Tx, subID int32, evID int64, wait bool) (ev Event, ok bool, err error) {
	sql := `select ` + eventCols + ` from pgq.retry_queue where ev_owner = $1 and ev_id = $2 and ev_retry_after >= $3 for update`
	if !wait {
		sql += ` nowait`
	}
	evs, err := e.lockEvents(ctx, tx, sql, subID, evID, Far)
	if err != nil || len(evs) == 0 {
		return Event{}, false, err
	}
	return evs[0], true, nil
}

// lockEvents runs a select ... for update of retry-queue events in tx and
// turns a lock wait that failed (nowait, or lock_timeout) into ErrLocked.
func (e *Engine) lockEvents(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]Event, error) {
	rows, err := tx.Query(ctx, e.f(sql), args...)
	if err != nil {
		return nil, err
	}
	evs, err := pgx.CollectRows(rows, scanEvent)
	if isLockNotAvailable(err) {
		return nil, ErrLocked
	}
	return evs, err
}

// HasOlderRetry reports whether subID's retry queue holds an event of key
// older than evID (so evID is not the key's head).
func (e *Engine) HasOlderRetry(ctx context.Context, db DB, subID int32, key string, evID int64) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, e.f(`select exists (select 1 from pgq.retry_queue
		where ev_owner = $1 and `+keyIs(2)+` and ev_id < $3)`), subID, key, evID).Scan(&ok)
	return ok, err
}

// SetRetryCount stores ev_retry of one parked row.
func (e *Engine) SetRetryCount(ctx context.Context, db DB, subID int32, evID int64, retry int32) error {
	_, err := db.Exec(ctx, e.f(`update pgq.retry_queue set ev_retry = $3 where ev_owner = $1 and ev_id = $2`), subID, evID, retry)
	return err
}

// HasDueRetry reports whether any retry-queue row is due for the engine's
// mover. It reads without the mover's table lock, so that idle ticks do
// not take that lock (which makes autovacuum give up on the table).
func (e *Engine) HasDueRetry(ctx context.Context, db DB) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, e.f(`select exists (select 1 from pgq.retry_queue where ev_retry_after <= now())`)).Scan(&ok)
	return ok, err
}

// NextRetry returns the oldest retry-queue event of key of subID with an id
// above afterID (a walk of the primary key from afterID on).
func (e *Engine) NextRetry(ctx context.Context, db DB, subID int32, key string, afterID int64) (Event, bool, error) {
	rows, err := db.Query(ctx, e.f(`
		select `+eventCols+` from pgq.retry_queue
		 where ev_owner = $1 and ev_id > $3 and `+keyIs(2)+`
		 order by ev_id limit 1`), subID, key, afterID)
	if err != nil {
		return Event{}, false, err
	}
	evs, err := pgx.CollectRows(rows, scanEvent)
	if err != nil || len(evs) == 0 {
		return Event{}, false, err
	}
	return evs[0], true, nil
}

// LockRetryQueue takes the lock the engine's retry mover (maint_retry_events)
// takes, for the rest of tx, so that rows deleted in tx cannot be moved
// back into the queue at the same time (the event would be both re-injected
// and removed: delivered twice).
func (e *Engine) LockRetryQueue(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, e.f(`lock table pgq.retry_queue in share update exclusive mode`))
	return err
}

// LockKeyRetries locks every retry-queue row of key of subID for the rest of
// tx (waiting up to lock_timeout, then ErrLocked) and returns them in ev_id order.
func (e *Engine) LockKeyRetries(ctx context.Context, tx pgx.Tx, subID int32, key string) ([]Event, error) {
	return e.lockEvents(ctx, tx, `select `+eventCols+` from pgq.retry_queue
		where ev_owner = $1 and `+keyIs(2)+` order by ev_id for update`, subID, key)
}

// LockParkedRun locks up to limit parked rows (at Far) of key of subID, in
// ev_id order from fromID on, for the rest of tx, without waiting: when any
// of them is locked by another transaction it fails with ErrLocked.
func (e *Engine) LockParkedRun(ctx context.Context, tx pgx.Tx, subID int32, key string, fromID int64, limit int) ([]Event, error) {
	return e.lockEvents(ctx, tx, `select `+eventCols+` from pgq.retry_queue
		where ev_owner = $1 and `+keyIs(2)+` and ev_id >= $3 and ev_retry_after >= $4
		order by ev_id limit $5 for update nowait`, subID, key, fromID, Far, limit)
}

// DeleteRetries removes rows of subID from the retry queue.
func (e *Engine) DeleteRetries(ctx context.Context, db DB, subID int32, ids []int64) error {
	_, err := db.Exec(ctx, e.f(`delete from pgq.retry_queue where ev_owner = $1 and ev_id = any($2::int8[])`), subID, ids)
	return err
}
