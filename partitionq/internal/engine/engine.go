// Package engine is the only place that speaks to the queue engine (PgQ or
// PgQue). Every engine function call and every read or write of an engine
// table goes through an *Engine, which takes the engine's schema as
// configuration and uses only the core that both engines share.
//
// An *Engine is immutable and safe for concurrent use.
package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq/internal/db"
)

// DB is a pool, a connection or a transaction (db.DB).
type DB = db.DB

// Known engine schemas, in detection order.
const (
	SchemaPgQ   = "pgq"
	SchemaPgQue = "pgque"
)

var schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ErrBothInstalled reports that both engines are installed in the
// database, so that detection cannot choose.
var ErrBothInstalled = errors.New("both pgq and pgque are installed in this database: set Config.EngineSchema to the one partitionq uses")

// ErrNotInstalled reports that no engine schema was found in the database.
var ErrNotInstalled = errors.New("no PgQ engine found in this database (neither schema pgq nor pgque has next_batch): install it with `create extension pgq` (Debian package postgresql-<major>-pgq3) or load PgQue")

// Engine builds and runs engine SQL for one schema.
type Engine struct {
	schema string // validated: safe to paste into SQL
}

// New returns an Engine for schema, which must be a plain lower-case
// identifier such as "pgq" or "pgque".
func New(schema string) (*Engine, error) {
	if !schemaRe.MatchString(schema) {
		return nil, fmt.Errorf("engine schema %q is not a plain lower-case identifier: use \"pgq\" or \"pgque\"", schema)
	}
	return &Engine{schema: schema}, nil
}

// Schema returns the engine schema name.
func (e *Engine) Schema() string { return e.schema }

// Detect finds the engine schema in the database: the first of pgq and
// pgque that has next_batch. When both are installed it fails and asks the
// caller to choose.
func Detect(ctx context.Context, db DB) (string, error) {
	var pgq, pgque bool
	err := db.QueryRow(ctx, `select to_regprocedure('pgq.next_batch(text,text)') is not null,
	                                to_regprocedure('pgque.next_batch(text,text)') is not null`).Scan(&pgq, &pgque)
	if err != nil {
		return "", fmt.Errorf("detect engine schema: %w", err)
	}
	switch {
	case pgq && pgque:
		return "", ErrBothInstalled
	case pgq:
		return SchemaPgQ, nil
	case pgque:
		return SchemaPgQue, nil
	}
	return "", ErrNotInstalled
}

// f replaces every "pgq." in a statement template with the engine schema.
// Templates are constants of this package; nothing user-supplied is pasted.
func (e *Engine) f(sql string) string {
	if e.schema == SchemaPgQ {
		return sql
	}
	return strings.ReplaceAll(sql, "pgq.", e.schema+".")
}

// ---------------------------------------------------------------- queues

// CreateQueue creates the queue unless it exists; it reports whether it did.
func (e *Engine) CreateQueue(ctx context.Context, db DB, queue string) (bool, error) {
	var n int
	if err := db.QueryRow(ctx, e.f(`select pgq.create_queue($1)`), queue).Scan(&n); err != nil {
		return false, fmt.Errorf("create queue %q: %w", queue, err)
	}
	return n == 1, nil
}

// QueueID returns the queue's id, or ok=false when there is no such queue.
func (e *Engine) QueueID(ctx context.Context, db DB, queue string) (id int32, ok bool, err error) {
	err = db.QueryRow(ctx, e.f(`select queue_id from pgq.queue where queue_name = $1`), queue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look up queue %q: %w", queue, err)
	}
	return id, true, nil
}

// SetQueueConfig sets one queue parameter (for example ticker_max_lag).
func (e *Engine) SetQueueConfig(ctx context.Context, db DB, queue, param, value string) error {
	_, err := db.Exec(ctx, e.f(`select pgq.set_queue_config($1, $2, $3)`), queue, param, value)
	if err != nil {
		return fmt.Errorf("set %s of queue %q: %w", param, queue, err)
	}
	return nil
}

// ------------------------------------------------------------- consumers

// Subscription is one consumer registered on a queue.
type Subscription struct {
	Consumer string
	SubID    int32
}

// RegisterConsumer registers consumer on queue; it reports whether it was new.
func (e *Engine) RegisterConsumer(ctx context.Context, db DB, queue, consumer string) (bool, error) {
	var n int
	if err := db.QueryRow(ctx, e.f(`select pgq.register_consumer($1, $2)`), queue, consumer).Scan(&n); err != nil {
		return false, fmt.Errorf("register consumer %q on queue %q: %w", consumer, queue, err)
	}
	return n == 1, nil
}

// UnregisterConsumer removes consumer from queue, with its retry events.
func (e *Engine) UnregisterConsumer(ctx context.Context, db DB, queue, consumer string) error {
	_, err := db.Exec(ctx, e.f(`select pgq.unregister_consumer($1, $2)`), queue, consumer)
	return err
}

// Subscriptions lists the consumers of queue whose name starts with prefix.
func (e *Engine) Subscriptions(ctx context.Context, db DB, queue, prefix string) ([]Subscription, error) {
	rows, err := db.Query(ctx, e.f(`
		select c.co_name, s.sub_id
		  from pgq.subscription s
		  join pgq.consumer c on c.co_id = s.sub_consumer
		  join pgq.queue q on q.queue_id = s.sub_queue
		 where q.queue_name = $1 and left(c.co_name, length($2)) = $2
		 order by c.co_name`), queue, prefix)
	if err != nil {
		return nil, fmt.Errorf("list consumers of queue %q: %w", queue, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscription, error) {
		var s Subscription
		err := r.Scan(&s.Consumer, &s.SubID)
		return s, err
	})
}

// ConsumerInfo is the engine's view of one consumer.
type ConsumerInfo struct {
	Consumer      string
	Lag           time.Duration // age of the last finished tick
	LastSeen      time.Duration // since the consumer last took or finished a batch
	LastTick      int64
	CurrentBatch  *int64
	NextTick      *int64
	PendingEvents int64 // events of the whole queue after the last finished tick
	Position      int64 // the queue's event sequence at the last finished tick
	Head          int64 // the queue's event sequence at its newest tick
}

// ConsumerInfos returns get_consumer_info for every consumer of queue whose
// name starts with prefix.
func (e *Engine) ConsumerInfos(ctx context.Context, db DB, queue, prefix string) ([]ConsumerInfo, error) {
	rows, err := db.Query(ctx, e.f(`
		select i.consumer_name, i.lag, i.last_seen, i.last_tick, i.current_batch, i.next_tick, coalesce(i.pending_events, 0),
		       coalesce(t.tick_event_seq, 0), coalesce(t.tick_event_seq, 0) + coalesce(i.pending_events, 0)
		  from pgq.get_consumer_info($1) i
		  join pgq.queue q on q.queue_name = $1
		  left join pgq.tick t on t.tick_queue = q.queue_id and t.tick_id = i.last_tick
		 where left(i.consumer_name, length($2)) = $2
		 order by i.consumer_name`), queue, prefix)
	if err != nil {
		return nil, fmt.Errorf("consumer info of queue %q: %w", queue, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ConsumerInfo, error) {
		var c ConsumerInfo
		var lag, seen *time.Duration
		err := r.Scan(&c.Consumer, &lag, &seen, &c.LastTick, &c.CurrentBatch, &c.NextTick, &c.PendingEvents, &c.Position, &c.Head)
		if lag != nil {
			c.Lag = *lag
		}
		if seen != nil {
			c.LastSeen = *seen
		}
		return c, err
	})
}

// ----------------------------------------------------------------- ticks

// Ticker runs the engine's ticker for every queue; it returns how many
// queues got a new tick.
func (e *Engine) Ticker(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, e.f(`select coalesce(pgq.ticker(), 0)`)).Scan(&n)
	return n, err
}

// ForceTick makes the queue's ticker tick at its next run even when no
// event waits (the engine's force_tick: it moves the queue's event
// sequence past the ticker's count threshold; it makes no tick itself).
func (e *Engine) ForceTick(ctx context.Context, db DB, queue string) error {
	_, err := db.Exec(ctx, e.f(`select pgq.force_tick($1)`), queue)
	return err
}

// MaintRetryEvents moves due retry events back into their queues (at most
// 10 a call, as the engine does) and returns how many it moved.
func (e *Engine) MaintRetryEvents(ctx context.Context, db DB) (int, error) {
	var n int
	err := db.QueryRow(ctx, e.f(`select pgq.maint_retry_events()`)).Scan(&n)
	return n, err
}

// MaintOp is one maintenance step named by maint_operations.
type MaintOp struct {
	Func string
	Arg  *string
}

// MaintOperations lists the maintenance steps that are due now.
func (e *Engine) MaintOperations(ctx context.Context, db DB) ([]MaintOp, error) {
	rows, err := db.Query(ctx, e.f(`select func_name, func_arg from pgq.maint_operations()`))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MaintOp, error) {
		var m MaintOp
		err := r.Scan(&m.Func, &m.Arg)
		return m, err
	})
}

var maintFuncRe = regexp.MustCompile(`^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$`)

// RunMaintOp runs one step returned by MaintOperations. Only the engine's own
// functions and "vacuum" are run; anything else is refused. A vacuum skips
// a table it cannot lock at once (the next round vacuums it): it never
// waits in the table's lock queue, where it would hold up what queues
// behind it.
func (e *Engine) RunMaintOp(ctx context.Context, db DB, op MaintOp) error {
	switch {
	case op.Func == "vacuum":
		if op.Arg == nil {
			return nil
		}
		_, err := db.Exec(ctx, "vacuum (skip_locked) "+quoteQualified(*op.Arg))
		return err
	case maintFuncRe.MatchString(op.Func) && strings.HasPrefix(op.Func, e.schema+"."):
		if op.Arg == nil {
			_, err := db.Exec(ctx, "select "+op.Func+"()")
			return err
		}
		_, err := db.Exec(ctx, "select "+op.Func+"($1)", *op.Arg)
		return err
	}
	return fmt.Errorf("maintenance step %q is not an engine function: not run", op.Func)
}

// quoteQualified quotes a possibly schema-qualified table name.
func quoteQualified(name string) string {
	parts := strings.SplitN(name, ".", 2)
	for i, p := range parts {
		parts[i] = pgx.Identifier{p}.Sanitize()
	}
	return strings.Join(parts, ".")
}

// --------------------------------------------------------------- routing

// SlotExpr is the SQL expression that computes an event's slot out of n from
// its key column: the sign-normalized remainder of hashtextextended(key, 0),
// and slot 0 for an event without a key (NULL ev_extra1, written by some
// other producer). It is upstream PgQue's partition routing, so a group's
// events are assigned the same way by partitionq and by PgQue's own
// receive_partitioned. Only integers are pasted.
func SlotExpr(keyColumn string, n int) string {
	ns := strconv.Itoa(n)
	return "(case when " + keyColumn + " is null then 0 else (hashtextextended(" + keyColumn + ", 0) % " + ns + " + " + ns + ") % " + ns + " end)"
}

// SlotOf asks the server for the slot of key among n.
func SlotOf(ctx context.Context, db DB, key string, n int) (int, error) {
	var s int
	err := db.QueryRow(ctx, "select "+SlotExpr("$1::text", n), key).Scan(&s)
	return s, err
}

// isLockNotAvailable reports SQLSTATE 55P03 (lock_not_available).
func isLockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// QueueConsumer is one consumer of any queue, with the engine's view of it.
type QueueConsumer struct {
	Queue    string
	Consumer string
	SubID    int32
	Lag      time.Duration // age of the last finished tick
	// PendingEvents counts the events of the whole queue after the
	// consumer's last finished tick.
	PendingEvents int64
}

// AllConsumers returns every consumer of queue, or of every queue when it
// is empty, with its lag and pending count: one query, whatever the number
// of queues and consumers.
// It calls get_consumer_info(queue) per queue, which the viewer role may
// call on both engines (sql/roles.sql), not get_consumer_info().
func (e *Engine) AllConsumers(ctx context.Context, db DB, queue string) ([]QueueConsumer, error) {
	rows, err := db.Query(ctx, e.f(`
		select q.queue_name, i.consumer_name, s.sub_id, i.lag, coalesce(i.pending_events, 0)
		  from pgq.queue q
		  cross join lateral pgq.get_consumer_info(q.queue_name) i
		  join pgq.consumer c on c.co_name = i.consumer_name
		  join pgq.subscription s on s.sub_queue = q.queue_id and s.sub_consumer = c.co_id
		 where $1::text = '' or q.queue_name = $1
		 order by 1, 2`), queue)
	if err != nil {
		return nil, fmt.Errorf("consumer info of every queue: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueConsumer, error) {
		var c QueueConsumer
		var lag *time.Duration
		err := r.Scan(&c.Queue, &c.Consumer, &c.SubID, &lag, &c.PendingEvents)
		if lag != nil {
			c.Lag = *lag
		}
		return c, err
	})
}
