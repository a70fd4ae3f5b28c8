// Package parked owns the state of blocked keys under the pause policy, and
// is the only package that changes it.
//
// A key is blocked exactly while the engine's retry queue holds parked rows
// of it for its slot consumer: its failed head, and the events that waited
// behind it, parked at a retry time (engine.Far) the engine's mover never
// reaches. Beside the engine's rows partitionq keeps a failure record per
// failed head (partitionq.failure: attempts, last error, next attempt) and,
// once an event is given up, a dead letter. This package writes all three
// together, always in one transaction, and enforces the hazard rules of
// docs/failure-policy.md:
//
//   - H1: a waiting event is parked with its ev_retry unchanged (waiting is
//     not failing);
//   - H2, H3: parked rows are never re-injected by the engine's mover;
//     they leave the retry queue only through Drain and the operator
//     actions here, one key at a time in ev_id order;
//   - H4: operator actions, which delete rows a mover might be moving, take
//     the mover's table lock first; a worker deletes only parked rows it
//     holds the row locks of;
//   - an action and a drain never both act on a head: both hold its row lock;
//   - a dead letter is committed before the key's next event runs.
//
// The functions are safe for concurrent use; each runs on the database
// handle it is given.
package parked

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Slot names one slot of a group and its engine consumer.
type Slot struct {
	Queue, Group string
	Consumer     string
	N            int // the slot's generation has N slots
	Generation   int // and this number
	Slot         int
	SubID        int32
	// Epoch is the slot's ownership epoch, for a worker's writes (a dead
	// letter is fenced by it); 0 in an operator's.
	Epoch int64
}

// Failure is what partitionq remembers of a failed, parked head.
type Failure struct {
	EvID          int64
	Attempts      int
	LastError     string
	FirstFailedAt time.Time
	LastFailedAt  time.Time
	NextAttemptAt time.Time
	// From the server's clock: whether the next attempt is due, and if not,
	// how long until it is; how long ago the event first failed.
	Due  bool
	Wait time.Duration
	Age  time.Duration
	// FlaggedAt is set when a worker flagged the key as blocked too long.
	FlaggedAt *time.Time
}

// ---------------------------------------------------------------- a batch

// Outcome collects what one slot's batch leaves behind: events parked
// behind a blocked head, heads that failed (parked with their failure
// records), timed retries (skip policy) and dead letters. Write stores it in
// the transaction that finishes the batch, so a crash before that commit
// leaves the batch open and nothing half-written. While the batch runs, a
// progress flush may Take what was collected so far and write it early, in
// the transaction that also records those events as resolved in the batch
// (so a key's parked events are drained without waiting for the batch's
// slowest key, and a next owner of the batch skips them). Its methods are
// safe for concurrent use.
type Outcome struct {
	s    Slot
	mu   sync.Mutex
	idle *sync.Cond // signalled when a taken Part is given back
	part
	taken  bool // a Part is being written
	closed bool // the batch is finishing: nothing is taken any more
}

// part is a share of an Outcome: what Write stores.
type part struct {
	retry []engine.RetryRow
	fails []failedHead
	dead  []store.DeadLetter
	keys  map[string]bool // keys that got parked rows
}

type failedHead struct {
	evID     int64
	attempts int
	lastErr  string
	after    time.Duration
}

// NewOutcome returns an empty Outcome of slot s.
func NewOutcome(s Slot) *Outcome {
	o := &Outcome{s: s, part: part{keys: map[string]bool{}}}
	o.idle = sync.NewCond(&o.mu)
	return o
}

// Wait parks an event behind its key's blocked head. Its ev_retry is kept:
// waiting is not failing (H1).
func (o *Outcome) Wait(ev engine.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retry = append(o.retry, engine.RetryRow{Event: ev, After: engine.Far, Retry: ev.Retry})
	o.keys[ev.Key] = true
}

// Fail parks a head whose attempt failed, with its failure record; its
// next attempt is due after the given delay.
func (o *Outcome) Fail(ev engine.Event, attempt int, lastErr string, after time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retry = append(o.retry, engine.RetryRow{Event: ev, After: engine.Far, Retry: int32(attempt)})
	o.fails = append(o.fails, failedHead{evID: ev.ID, attempts: attempt, lastErr: lastErr, after: after})
	o.keys[ev.Key] = true
}

// RetryAt leaves a failed event to the engine's mover, which re-delivers it
// at the given time (skip policy: its key goes on meanwhile).
func (o *Outcome) RetryAt(ev engine.Event, attempt int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retry = append(o.retry, engine.RetryRow{Event: ev, After: at, Retry: int32(attempt)})
}

// Dead gives an event up: it becomes a dead letter.
func (o *Outcome) Dead(dl store.DeadLetter) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dead = append(o.dead, dl)
}

// Counts reports how many events the outcome parks or retries, and how many
// dead letters it writes (not counting Parts taken).
func (o *Outcome) Counts() (retry, dead int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.retry), len(o.dead)
}

// ParkedKeys lists the keys the outcome parks events of (not counting
// Parts taken).
func (o *Outcome) ParkedKeys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.part.parkedKeys()
}

func (p *part) parkedKeys() []string {
	out := make([]string, 0, len(p.keys))
	for k := range p.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Close says the batch is finishing: it waits until a Part being written
// early is settled, and no Part is taken after. Call it before the
// finishing transaction begins (the Part's transaction may wait for locks).
func (o *Outcome) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for o.taken {
		o.idle.Wait()
	}
}

// Write stores the outcome in tx (the batch's finishing transaction),
// closing it first.
func (o *Outcome) Write(ctx context.Context, tx db.DB, eng *engine.Engine) error {
	o.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.part.write(ctx, tx, eng, o.s)
}

func (p *part) write(ctx context.Context, tx db.DB, eng *engine.Engine, s Slot) error {
	if err := eng.PutRetry(ctx, tx, s.Queue, s.Consumer, p.retry); err != nil {
		return err
	}
	for _, f := range p.fails {
		if err := putFailure(ctx, tx, s, f.evID, f.attempts, f.lastErr, f.after); err != nil {
			return err
		}
	}
	return store.GiveUp(ctx, tx, eng.Schema(), s.Queue, s.Group, s.Slot, s.Epoch, s.Consumer, p.dead)
}

// Part is what an Outcome had collected when it was taken, to be written
// before the batch finishes. The taker writes it in a transaction that
// records its events (IDs) as resolved in the batch's progress, and then
// calls Settle with whether that transaction committed.
type Part struct {
	o *Outcome
	part
}

// Take takes what the outcome has collected, or returns nil when it has
// nothing, a Part is being written, or the batch is finishing.
func (o *Outcome) Take() *Part {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.taken || o.closed || len(o.retry) == 0 && len(o.dead) == 0 {
		return nil
	}
	p := &Part{o: o, part: o.part}
	o.part = part{keys: map[string]bool{}}
	o.taken = true
	return p
}

// IDs returns the events the part resolves in its batch.
func (p *Part) IDs() []int64 {
	ids := make([]int64, 0, len(p.retry)+len(p.dead))
	for _, r := range p.retry {
		ids = append(ids, r.ID)
	}
	for _, d := range p.dead {
		ids = append(ids, d.EvID)
	}
	return ids
}

// Keys lists the keys the part parks events of.
func (p *Part) Keys() []string { return p.part.parkedKeys() }

// Dead counts the part's dead letters.
func (p *Part) Dead() int { return len(p.dead) }

// Write stores the part in tx.
func (p *Part) Write(ctx context.Context, tx db.DB, eng *engine.Engine) error {
	return p.part.write(ctx, tx, eng, p.o.s)
}

// Settle ends the part's write: a part whose transaction did not commit
// goes back to its outcome, ahead of what was collected since, for the
// next flush or the batch's finish to write.
func (p *Part) Settle(committed bool) {
	o := p.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if !committed {
		o.retry = append(p.retry, o.retry...)
		o.fails = append(p.fails, o.fails...)
		o.dead = append(p.dead, o.dead...)
		for k := range p.keys {
			o.keys[k] = true
		}
	}
	o.taken = false
	o.idle.Broadcast()
}

// DeadLetter builds the dead letter of event ev of slot s, whatever gave it
// up. attempts is the failed attempts known to the caller; the larger of it
// and the event's ev_retry is recorded.
func DeadLetter(s Slot, ev engine.Event, attempts int, lastErr, reason, actor string) store.DeadLetter {
	return store.DeadLetter{Queue: s.Queue, Group: s.Group, Slot: s.Slot, EvID: ev.ID, EvTime: ev.Time, Type: ev.Type,
		Data: ev.Data, Key: ev.Key, Attempts: max(attempts, int(ev.Retry)), LastError: lastErr, Reason: reason, Actor: actor}
}

// ---------------------------------------------------------------- reads

// Head is the oldest parked event of a key, with what is known of it.
type Head struct {
	Queue, Group string
	N            int // the slot's generation has N slots
	Slot         int
	engine.Event
	// After is the engine's retry time: Far for a parked head; a real time
	// for a timed retry of the skip policy (which blocks nothing).
	After   time.Time
	Waiting int64 // events of the key behind the head
	// Failure is nil when the head never failed: its key is draining (the
	// failed head before it was resolved; its waiting events run next).
	Failure *Failure
}

// Parked reports whether the head is parked (not a timed retry).
func (h Head) Parked() bool { return !h.After.Before(engine.Far) }

// Draining reports whether the head never failed.
func (h Head) Draining() bool { return h.Failure == nil && h.Retry == 0 }

// Heads returns the head of every key with rows in the retry queue of any
// of slots (only key's when key is not nil), with their failure records, in
// ev_id order: two queries for the whole group.
func Heads(ctx context.Context, q db.DB, eng *engine.Engine, slots []Slot, key *string) ([]Head, error) {
	if len(slots) == 0 {
		return nil, nil
	}
	subs := make([]int32, len(slots))
	bySub := map[int32]Slot{}
	for i, s := range slots {
		subs[i] = s.SubID
		bySub[s.SubID] = s
	}
	rhs, err := eng.RetryHeadsOf(ctx, q, subs, key)
	if err != nil || len(rhs) == 0 {
		return nil, err
	}
	ids := make([]int64, len(rhs))
	for i, h := range rhs {
		ids[i] = h.ID
	}
	fails, err := failuresOf(ctx, q, slots, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Head, len(rhs))
	for i, h := range rhs {
		s := bySub[h.Sub]
		out[i] = Head{Queue: s.Queue, Group: s.Group, N: s.N, Slot: s.Slot, Event: h.Event, After: h.After, Waiting: h.Waiting}
		if f, ok := fails[failureKey{s.Queue, s.Consumer, h.ID}]; ok {
			out[i].Failure = &f
		}
	}
	return out, nil
}

// Events returns the parked events of key in slot s, in the order they will
// run, at most limit.
func Events(ctx context.Context, q db.DB, eng *engine.Engine, s Slot, key string, limit int) ([]engine.Event, error) {
	return eng.RetryEvents(ctx, q, s.SubID, key, limit)
}

// ParkedKeys returns, per slot, the keys with parked events (blocked or
// draining): what a slot's new owner starts from.
func ParkedKeys(ctx context.Context, q db.DB, eng *engine.Engine, slots []Slot) (map[int]map[string]bool, error) {
	subs := make([]int32, len(slots))
	slotOf := map[int32]int{}
	for i, s := range slots {
		subs[i] = s.SubID
		slotOf[s.SubID] = s.Slot
	}
	bySub, err := eng.ParkedKeys(ctx, q, subs)
	if err != nil {
		return nil, err
	}
	out := map[int]map[string]bool{}
	for sub, keys := range bySub {
		out[slotOf[sub]] = keys
	}
	return out, nil
}

// ---------------------------------------------------------------- drains

// Handled is what one handler call in a drain came to.
type Handled struct {
	OK bool
	// Dead gives the event up (a DeadLetterNow error, or the last attempt):
	// Reason names why.
	Dead   bool
	Reason string
	Err    string
	Delay  time.Duration // the next attempt's delay when it failed (not Dead)
	// Abort ends the drain without writing anything (shutdown, lost slot).
	Abort bool
}

// Limits bound one drain transaction.
type Limits struct {
	Events int           // at most this many events
	Time   time.Duration // or this long, before it commits what it handled
}

// DrainResult says what a drain transaction did.
type DrainResult struct {
	// Next is the key's next parked event, its new head (0: none). It is
	// due now unless it failed before, when its failure record's schedule
	// applies: a drain of it that comes early stops at once, harmlessly.
	Next int64
	// Rescan asks the caller to look at the slot's heads again: a head
	// failed (its next attempt is to schedule), or the head named was not
	// the key's head any more.
	Rescan bool
	// Handled counts the events handled successfully, Dead the dead letters.
	Handled, Dead int
	// Empty reports that the key has no parked events any more: it is not
	// blocked.
	Empty bool
}

// DrainHooks are the caller's parts of a drain.
type DrainHooks struct {
	// Handle runs the handler on one parked event.
	Handle func(ev engine.Event, attempt int) Handled
	// Settle is called with the events the run resolved, before the
	// transaction that resolves them deletes their records: the caller
	// records handled events as done as it goes (partitionq.slot_done,
	// batch 0, in transactions of its own), so that a drain cut short by a
	// fault runs again only what was in flight; Settle must return only
	// once none of those records can be written any more. May be nil.
	Settle func(done []int64)
	// Fence is the ownership check, in the drain's transaction before it
	// commits; if it fails nothing is written. Required: Drain calls it
	// unconditionally, as a drain without a fence could commit after a
	// takeover.
	Fence func(context.Context, pgx.Tx) error
}

// Drain runs one drain transaction for key of slot s from its head headID:
// it takes the row locks of a run of parked events (without waiting: an
// operator action holding one makes it return at once), hands them to
// h.Handle in ev_id order, and stops at the first failure (which records
// the failure and leaves the event the key's head), at an event whose next
// attempt is not due, or at the limits. Events an earlier drain handled and
// recorded as done (partitionq.slot_done, batch 0: see DrainHooks.Settle)
// are not handled again, only resolved.
func Drain(ctx context.Context, pool db.TxStarter, eng *engine.Engine, s Slot, key string, headID int64, lim Limits,
	h DrainHooks) (DrainResult, error) {
	var res DrainResult
	tx, err := pool.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.Background()) // no-op after commit

	run, err := eng.LockParkedRun(ctx, tx, s.SubID, key, headID, lim.Events)
	if errors.Is(err, engine.ErrLocked) {
		return res, nil // an operator action holds it (for at most its lock timeout): the periodic scan comes back
	}
	if err != nil {
		return res, err
	}
	if len(run) == 0 || run[0].ID != headID {
		res.Rescan = true // resolved meanwhile (say, skipped): look for the key's new head
		return res, nil
	}
	if older, err := eng.HasOlderRetry(ctx, tx, s.SubID, key, headID); err != nil || older {
		res.Rescan = err == nil // not the head: the next scan finds the real one
		return res, err
	}
	ids := make([]int64, len(run))
	for i, ev := range run {
		ids[i] = ev.ID
	}
	fails, err := failures(ctx, tx, s, ids)
	if err != nil {
		return res, err
	}
	already, err := doneInDrains(ctx, tx, s, ids)
	if err != nil {
		return res, err
	}

	start := time.Now()
	var done []int64 // handled or dead-lettered, in order
	var dead []store.DeadLetter
	stopped := false // a failure or a not-due event ends the run
	for i, ev := range run {
		if f, ok := fails[ev.ID]; ok && !f.Due {
			stopped = true
			break
		}
		if ctx.Err() != nil || (i > 0 && time.Since(start) > lim.Time) {
			break
		}
		if already[ev.ID] { // handled by a drain cut short (or its exactly-once handler committed)
			done = append(done, ev.ID)
			continue
		}
		attempt := int(ev.Retry) + 1
		out := h.Handle(ev, attempt)
		if out.Abort {
			// The rollback leaves every event as it was; those handled stay
			// recorded as done (the worker's last flush), for the next owner.
			return DrainResult{}, nil
		}
		if out.OK {
			done = append(done, ev.ID)
			continue
		}
		if out.Dead {
			// Committed before the key's next event runs: were this
			// transaction lost, the event would be tried again after its
			// successor.
			done = append(done, ev.ID)
			dead = append(dead, DeadLetter(s, ev, attempt, out.Err, out.Reason, "worker"))
			break
		}
		if err := eng.SetRetryCount(ctx, tx, s.SubID, ev.ID, int32(attempt)); err != nil {
			return res, err
		}
		if err := putFailure(ctx, tx, s, ev.ID, attempt, out.Err, out.Delay); err != nil {
			return res, err
		}
		stopped = true
		break
	}
	if h.Settle != nil {
		h.Settle(done)
	}
	if err := resolve(ctx, tx, eng, s, done, dead); err != nil {
		return res, err
	}
	if err := h.Fence(ctx, tx); err != nil {
		return DrainResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	res.Handled, res.Dead = len(done)-len(dead), len(dead)
	if stopped || ctx.Err() != nil {
		res.Rescan = stopped // the key's head has a new next attempt to schedule
		return res, nil
	}
	// The key's next parked event is its new head: due now unless it has
	// failed before (then its own schedule applies).
	last := headID
	if len(done) > 0 {
		last = done[len(done)-1]
	}
	next, ok, err := eng.NextRetry(ctx, pool, s.SubID, key, last)
	if err != nil {
		return res, err
	}
	res.Empty = !ok
	if ok {
		res.Next = next.ID
	}
	return res, nil
}

// Expire dead-letters the head headID of key (blocked longer than the
// worker's MaxBlocked) under its row lock, with reason "max_blocked", and
// returns the key's next parked event (0: none).
func Expire(ctx context.Context, pool db.TxStarter, eng *engine.Engine, s Slot, key string, headID int64,
	fence func(context.Context, pgx.Tx) error) (next int64, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) // no-op after commit
	run, err := eng.LockParkedRun(ctx, tx, s.SubID, key, headID, 1)
	if errors.Is(err, engine.ErrLocked) || (err == nil && (len(run) == 0 || run[0].ID != headID)) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	fails, err := failures(ctx, tx, s, []int64{headID})
	if err != nil {
		return 0, err
	}
	f := fails[headID]
	ev := run[0]
	if err := resolve(ctx, tx, eng, s, []int64{ev.ID}, []store.DeadLetter{DeadLetter(s, ev, f.Attempts, f.LastError, "max_blocked", "worker")}); err != nil {
		return 0, err
	}
	if err := fence(ctx, tx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	n, ok, err := eng.NextRetry(ctx, pool, s.SubID, key, ev.ID)
	if err != nil || !ok {
		return 0, err
	}
	return n.ID, nil
}

// Flag marks the head headID of slot s as blocked too long; it reports
// whether the flag is new.
func Flag(ctx context.Context, q db.DB, s Slot, headID int64) (bool, error) {
	tag, err := q.Exec(ctx, `update partitionq.failure set flagged_at = now()
		where queue = $1 and consumer = $2 and ev_id = $3 and flagged_at is null`, s.Queue, s.Consumer, headID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// resolve stores the dead letters a worker gives up (partitionq.give_up,
// which finds them in the retry queue: before they leave it) and removes
// resolved events (handled or given up) of slot s from the retry queue, with
// their failure records; in tx, where the caller holds the events' row
// locks.
func resolve(ctx context.Context, tx pgx.Tx, eng *engine.Engine, s Slot, ids []int64, dead []store.DeadLetter) error {
	if err := store.GiveUp(ctx, tx, eng.Schema(), s.Queue, s.Group, s.Slot, s.Epoch, s.Consumer, dead); err != nil {
		return err
	}
	if len(ids) > 0 {
		if err := eng.DeleteRetries(ctx, tx, s.SubID, ids); err != nil {
			return err
		}
		if err := deleteFailures(ctx, tx, s, ids); err != nil {
			return err
		}
		if err := slotstats.ForgetDrained(ctx, tx, s.Queue, s.Group, s.Generation, s.Slot, ids); err != nil {
			return err
		}
	}
	return nil
}

// doneInDrains returns which of the parked events of slot s an exactly-once
// handler (TxHandler) committed in an earlier drain that did not commit.
func doneInDrains(ctx context.Context, q db.DB, s Slot, ids []int64) (map[int64]bool, error) {
	return slotstats.DrainedDone(ctx, q, s.Queue, s.Group, s.Generation, s.Slot, ids)
}

// ---------------------------------------------------------------- failure records

func putFailure(ctx context.Context, q db.DB, s Slot, evID int64, attempts int, lastErr string, after time.Duration) error {
	_, err := q.Exec(ctx, `
		insert into partitionq.failure (queue, consumer, ev_id, attempts, last_error, next_attempt_at)
		values ($1, $2, $3, $4, $5, now() + $6::interval)
		on conflict (queue, consumer, ev_id) do update
		   set attempts = excluded.attempts, last_error = excluded.last_error,
		       last_failed_at = now(), next_attempt_at = excluded.next_attempt_at`,
		s.Queue, s.Consumer, evID, attempts, lastErr, after)
	if err != nil {
		return fmt.Errorf("record failure of event %d: %w", evID, err)
	}
	return nil
}

func deleteFailures(ctx context.Context, q db.DB, s Slot, ids []int64) error {
	_, err := q.Exec(ctx, `delete from partitionq.failure where queue = $1 and consumer = $2 and ev_id = any($3::int8[])`, s.Queue, s.Consumer, ids)
	return err
}

type failureKey struct {
	queue    string
	consumer string
	evID     int64
}

const failureCols = `consumer, ev_id, attempts, last_error, first_failed_at, last_failed_at, next_attempt_at,
	next_attempt_at <= now(), greatest(next_attempt_at - now(), '0'::interval), now() - first_failed_at, flagged_at`

func scanFailure(rows pgx.Rows) (string, Failure, error) {
	var c string
	var f Failure
	err := rows.Scan(&c, &f.EvID, &f.Attempts, &f.LastError, &f.FirstFailedAt, &f.LastFailedAt, &f.NextAttemptAt, &f.Due, &f.Wait, &f.Age, &f.FlaggedAt)
	return c, f, err
}

// failures returns the failure records of events of slot s, by event id.
func failures(ctx context.Context, q db.DB, s Slot, ids []int64) (map[int64]Failure, error) {
	out := map[int64]Failure{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `select `+failureCols+` from partitionq.failure
		where queue = $1 and consumer = $2 and ev_id = any($3::int8[])`, s.Queue, s.Consumer, ids)
	if err != nil {
		return nil, fmt.Errorf("read failures: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		_, f, err := scanFailure(rows)
		if err != nil {
			return nil, err
		}
		out[f.EvID] = f
	}
	return out, rows.Err()
}

// failuresOf returns the failure records of events of any of slots, of
// one queue or several (one query), keyed by queue, consumer and event id.
// A database without partitionq's schema has none.
func failuresOf(ctx context.Context, q db.DB, slots []Slot, ids []int64) (map[failureKey]Failure, error) {
	out := map[failureKey]Failure{}
	if len(ids) == 0 {
		return out, nil
	}
	if ok, err := store.Installed(ctx, q); err != nil || !ok {
		return out, err
	}
	queues, consumers := make([]string, len(slots)), make([]string, len(slots))
	for i, s := range slots {
		queues[i], consumers[i] = s.Queue, s.Consumer
	}
	rows, err := q.Query(ctx, `select queue, `+failureCols+` from partitionq.failure
		where (queue, consumer) in (select * from unnest($1::text[], $2::text[])) and ev_id = any($3::int8[])`, queues, consumers, ids)
	if err != nil {
		return nil, fmt.Errorf("read failures: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var queue, c string
		var f Failure
		if err := rows.Scan(&queue, &c, &f.EvID, &f.Attempts, &f.LastError, &f.FirstFailedAt, &f.LastFailedAt, &f.NextAttemptAt,
			&f.Due, &f.Wait, &f.Age, &f.FlaggedAt); err != nil {
			return nil, err
		}
		out[failureKey{queue, c, f.EvID}] = f
	}
	return out, rows.Err()
}

// Forget deletes the failure records of consumers of queue (a group being
// dropped).
func Forget(ctx context.Context, q db.DB, queue string, consumers []string) error {
	_, err := q.Exec(ctx, `delete from partitionq.failure where queue = $1 and consumer = any($2::text[])`, queue, consumers)
	return err
}
