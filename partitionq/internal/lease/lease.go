// Package lease makes one live worker the owner of each slot it runs, and
// makes sure a worker stops acting on a slot before anyone else may take it.
//
// A worker registers a row in partitionq.worker and renews its lease there
// about once a second (one row per worker, whatever the number of slots). A
// slot is owned by the worker its partitionq.slot row names, at the row's
// epoch, while that worker's lease lasts. Another worker may take a slot
// only when the owner's lease has expired by the server's clock and, for an
// owner connected directly (not through a pooler), when the owner's lease
// session has ended too: a worker that is paused (SIGSTOP, a long GC pause)
// keeps its connection, so its slots are not taken while it cannot act.
// Taking a slot raises its epoch; every write that ends work on a slot
// checks the epoch in its own transaction (Fence), so a late commit of a
// former owner is refused.
//
// The worker enforces its own deadline: it counts its lease from the moment
// it sent the renewal (the server's lease ends TTL after a later moment), and
// when Margin before that point passes without a newer renewal it calls
// OnLose for every slot: the runner cancels the slot's handlers and commits
// nothing more for it. That happens strictly before the lease can expire at
// the server, so strictly before another worker may take the slot.
//
// Nothing here needs a session that outlives a transaction (the lease
// session's identity is only used to delay a takeover), so ownership works
// through a pooler in transaction mode; see docs/operations.md, "Poolers".
//
// A Holder is safe for concurrent use.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/db"
)

// SlotsChannel is the notification channel a release is announced on (the
// payload is "<queue>/<group>"), so standbys take the slot at once.
const SlotsChannel = "partitionq_slots"

// ErrNotOwner reports that the slot is no longer owned at the epoch given:
// another worker took it over, or it was released.
var ErrNotOwner = errors.New("this worker no longer owns the slot")

// Config configures a Holder. Every field is required unless it says otherwise.
type Config struct {
	Pool         *pgxpool.Pool // the worker's own pool; the lease session is one of its connections
	Log          *slog.Logger
	Queue, Group string
	N            int // the generation's number of slots
	// Generation is the generation's number (0: the group has no
	// generation rows, as before version 5): slots are taken only while
	// the group's generation with N slots is this one. A generation that
	// ended leaves its runs stopping for a moment, and a later resize may
	// make a generation with the same N whose slot rows they must not take.
	Generation int
	Slots      []int // the slots to own when they are free (or their owner is gone)
	Identity   string
	// SchemaVersion is the partitionq schema version the worker was built
	// for, recorded with its lease (the schema refuses workers that say
	// none: they predate resizing).
	SchemaVersion int
	TTL           time.Duration // how long a renewal lasts at the server
	Renew         time.Duration // between renewals
	Margin        time.Duration // the worker stops acting this long before its lease can expire
	Poll          time.Duration // between tries to take wanted slots that others own
	// Channels are further channels to LISTEN on; notifications on them go
	// to OnNotify. Optional.
	Channels []string
	OnNotify func(channel, payload string)
	// OnRenew, when set, runs in every renewal's transaction, after the
	// renewal: for a read the worker wants about once a lease renewal
	// without a transaction of its own. Its error fails the renewal.
	OnRenew func(ctx context.Context, tx pgx.Tx) error
	// OnGain is called when the worker takes a slot, with its new epoch;
	// OnGained, when set, once after the slots taken together (one claim)
	// have all been passed to OnGain, under the same hold of the lock (so no
	// OnLose comes between).
	OnGain   func(slot int, epoch int64)
	OnGained func()
	// OnLose is called when the worker can no longer prove it owns a slot;
	// it must stop everything of the slot at once (it runs on the holder's
	// goroutine, so it must not block).
	OnLose func(slot int, why string)
}

// Holder holds a worker's lease and the slots it owns.
type Holder struct {
	cfg   Config
	log   *slog.Logger
	start time.Time // for monotonic deadlines

	deadline atomic.Int64 // nanoseconds since start: the lease is valid before it
	pooled   atomic.Bool  // the lease session is behind a pooler
	turned   atomic.Int64 // nanoseconds since start (plus 1) when loop last began a turn; 0: not yet

	// mu guards the fields below; OnGain and OnLose are called with it
	// held, so that a slot is never reported gained after it was lost.
	mu    sync.Mutex
	id    int64         // the worker row; 0 before registration
	owned map[int]int64 // slot -> epoch
	conn  *pgxpool.Conn // the lease session (only the holder's goroutine uses it)
	watch *time.Timer   // fires at the deadline: the watchdog

	claimNow chan struct{}
}

// New returns a Holder; Run starts it.
func New(cfg Config) *Holder {
	return &Holder{cfg: cfg, log: cfg.Log, start: time.Now(), owned: map[int]int64{}, claimNow: make(chan struct{}, 1)}
}

// WorkerID is the id of the worker's row (0 before it registered).
func (h *Holder) WorkerID() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id
}

// Valid reports whether the lease is certainly still valid at the server.
func (h *Holder) Valid() bool { return time.Since(h.start) < time.Duration(h.deadline.Load()) }

// Renewed is when the last renewal that succeeded (or the registration)
// was sent; zero before registration and after Close.
func (h *Holder) Renewed() time.Time {
	dl := h.deadline.Load()
	if dl == 0 {
		return time.Time{}
	}
	return h.start.Add(time.Duration(dl) - h.cfg.TTL + h.cfg.Margin)
}

// Turned is when the loop that renews the lease and takes slots last began
// a turn (a turn renews when due, tries to take slots when due, and waits
// for the next); zero before Hold.
func (h *Holder) Turned() time.Time {
	t := h.turned.Load()
	if t == 0 {
		return time.Time{}
	}
	return h.start.Add(time.Duration(t - 1))
}

// Pooled reports whether the lease session runs through a connection pooler
// (its server session is not the worker's own), detected when it connected.
func (h *Holder) Pooled() bool { return h.pooled.Load() }

// Epoch returns the epoch at which the worker owns slot, or false.
func (h *Holder) Epoch(slot int) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.owned[slot]
	return e, ok && h.Valid()
}

// Register connects the lease session and registers the worker's row; ctx
// bounds both. Call it (again, after a failure) before Hold.
func (h *Holder) Register(ctx context.Context) error {
	h.mu.Lock()
	connected := h.conn != nil
	h.mu.Unlock()
	if !connected {
		if err := h.connect(ctx); err != nil {
			return err
		}
	}
	if err := h.register(ctx); err != nil {
		h.dropConn()
		return err
	}
	return nil
}

// Hold holds the registered worker's lease until ctx is done, taking the
// wanted slots as they become free, in a goroutine; done is closed when it
// ended, after which Close must be called.
func (h *Holder) Hold(ctx context.Context) (done <-chan struct{}) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		h.loop(ctx)
	}()
	return ch
}

// connect takes the lease session from the pool and listens on it.
func (h *Holder) connect(ctx context.Context) error {
	conn, err := h.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	var pid int32
	if err := conn.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err != nil {
		conn.Release()
		return err
	}
	// A pooler answers the startup with a process id of its own making.
	h.pooled.Store(uint32(pid) != conn.Conn().PgConn().PID())
	if !h.pooled.Load() {
		for _, ch := range append([]string{SlotsChannel}, h.cfg.Channels...) {
			if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
				conn.Release()
				return err
			}
		}
	}
	h.mu.Lock()
	h.conn = conn
	h.mu.Unlock()
	return nil
}

// dropConn discards a lease session that failed.
func (h *Holder) dropConn() {
	h.mu.Lock()
	c := h.conn
	h.conn = nil
	h.mu.Unlock()
	if c != nil {
		c.Conn().Close(context.Background()) // broken anyway
		c.Release()
	}
}

func (h *Holder) register(ctx context.Context) error {
	host, _ := os.Hostname()
	t0 := time.Since(h.start)
	var id int64
	err := h.tx(ctx, func(tx pgx.Tx) error {
		// Forget workers long gone that own nothing.
		if _, err := tx.Exec(ctx, `delete from partitionq.worker w
			 where w.lease_until < clock_timestamp() - interval '1 day'
			   and not exists (select 1 from partitionq.slot s where s.worker_id = w.id)`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			insert into partitionq.worker (identity, host, os_pid, backend_pid, backend_start, lease_until, schema_version)
			select $1, $2, $3, a.pid, a.backend_start, clock_timestamp() + $5::interval, $6
			  from (select $4::bool as pooled) p
			  left join pg_stat_activity a on not p.pooled and a.pid = pg_backend_pid()
			returning id`, h.cfg.Identity, host, os.Getpid(), h.pooled.Load(), h.cfg.TTL, h.cfg.SchemaVersion).Scan(&id)
	})
	if err != nil {
		return fmt.Errorf("register the worker: %w", err)
	}
	h.mu.Lock()
	h.id = id
	h.mu.Unlock()
	h.setDeadline(t0)
	return nil
}

// setDeadline records a lease renewed by a request sent at t0, and sets
// the watchdog to stop every slot at the new deadline. The watchdog is a
// timer of its own, so it fires even while a renewal hangs.
func (h *Holder) setDeadline(t0 time.Duration) {
	dl := t0 + h.cfg.TTL - h.cfg.Margin
	h.deadline.Store(int64(dl))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watch == nil {
		h.watch = time.AfterFunc(time.Until(h.start.Add(dl)), h.watchdog)
		return
	}
	h.watch.Reset(time.Until(h.start.Add(dl)))
}

func (h *Holder) watchdog() {
	if !h.Valid() {
		h.loseAll("the lease was not renewed in time")
	}
}

func (h *Holder) loop(ctx context.Context) {
	renewAt := time.Now().Add(h.cfg.Renew)
	claimAt := time.Now() // try the wanted slots at once
	for ctx.Err() == nil {
		h.turned.Store(int64(time.Since(h.start)) + 1)
		now := time.Now()
		if !now.Before(renewAt) {
			if h.renew(ctx) {
				renewAt = time.Now().Add(h.cfg.Renew)
			} else {
				renewAt = time.Now().Add(min(h.cfg.Renew, 200*time.Millisecond))
			}
		}
		if !time.Now().Before(claimAt) {
			if h.Valid() {
				h.claim(ctx)
			}
			claimAt = time.Now().Add(h.cfg.Poll)
		}
		wake := renewAt
		if claimAt.Before(wake) {
			wake = claimAt
		}
		if h.wait(ctx, wake) {
			claimAt = time.Now()
		}
	}
}

// wait waits for notifications until wake; it reports whether a slot was
// released (so wanted slots should be tried now).
func (h *Holder) wait(ctx context.Context, wake time.Time) (claim bool) {
	d := time.Until(wake)
	if d <= 0 {
		return false
	}
	h.mu.Lock()
	conn := h.conn
	h.mu.Unlock()
	if conn == nil || h.pooled.Load() {
		select {
		case <-ctx.Done():
		case <-h.claimNow:
			return true
		case <-time.After(d):
		}
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := conn.Conn().WaitForNotification(wctx)
		if err != nil {
			if wctx.Err() == nil && ctx.Err() == nil { // the session broke
				h.log.Warn("partitionq: lease session lost; reconnecting", slog.Any("error", err))
				h.dropConn()
			}
			select {
			case <-h.claimNow:
				return true
			default:
			}
			return claim
		}
		if n.Channel == SlotsChannel {
			if n.Payload == h.cfg.Queue+"/"+h.cfg.Group {
				claim = true
				return claim
			}
			continue
		}
		if h.cfg.OnNotify != nil {
			h.cfg.OnNotify(n.Channel, n.Payload)
		}
	}
}

// tx runs fn in a transaction on the lease session, reconnecting first when
// it was lost. Statements are bounded so that a hung server cannot hold the
// holder past its deadline unnoticed.
func (h *Holder) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	h.mu.Lock()
	conn := h.conn
	h.mu.Unlock()
	if conn == nil {
		if err := h.connect(ctx); err != nil {
			return err
		}
		h.mu.Lock()
		conn = h.conn
		h.mu.Unlock()
	}
	bound := max(h.cfg.Renew, time.Second)
	tctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := pgx.BeginFunc(tctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(tctx, fmt.Sprintf("set local lock_timeout = %d", bound.Milliseconds())); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil && (conn.Conn().IsClosed() || tctx.Err() != nil) {
		h.dropConn()
	}
	return err
}

// renew extends the lease and checks that every slot the worker acts on is
// still its own; it reports success.
func (h *Holder) renew(ctx context.Context) bool {
	t0 := time.Since(h.start)
	id := h.WorkerID()
	var mine map[int]int64
	var found bool
	err := h.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			update partitionq.worker w
			   set lease_until = clock_timestamp() + $2::interval, renewed_at = clock_timestamp(),
			       backend_pid = a.pid, backend_start = a.backend_start
			  from (select $3::bool as pooled) p
			  left join pg_stat_activity a on not p.pooled and a.pid = pg_backend_pid()
			 where w.id = $1`, id, h.cfg.TTL, h.pooled.Load())
		if err != nil {
			return err
		}
		if found = tag.RowsAffected() == 1; !found {
			return nil
		}
		// A new statement, so a new snapshot: a takeover that the update
		// above waited for is visible here.
		if mine, err = ownedSlots(ctx, tx, id, h.cfg.Queue, h.cfg.Group, h.cfg.N); err != nil {
			return err
		}
		if h.cfg.OnRenew != nil {
			return h.cfg.OnRenew(ctx, tx)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("partitionq: renewing the worker's lease failed", slog.Any("error", err))
		}
		return false
	}
	if !found { // someone removed the row: whatever it owned is not ours to act on
		h.loseAll("the worker's lease row is gone")
		if err := h.register(ctx); err != nil {
			h.log.Warn("partitionq: registering the worker again failed", slog.Any("error", err))
			return false
		}
		return true
	}
	h.setDeadline(t0)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range sortedKeys(h.owned) {
		if me, ok := mine[s]; !ok || me != h.owned[s] {
			delete(h.owned, s)
			h.cfg.OnLose(s, "another worker owns the slot now")
		}
	}
	return true
}

func ownedSlots(ctx context.Context, q db.DB, id int64, queue, group string, n int) (map[int]int64, error) {
	rows, err := q.Query(ctx, `select slot, epoch from partitionq.slot where worker_id = $1 and queue = $2 and grp = $3 and n = $4`, id, queue, group, n)
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for rows.Next() {
		var s int
		var e int64
		if err := rows.Scan(&s, &e); err != nil {
			return nil, err
		}
		out[s] = e
	}
	return out, rows.Err()
}

// claim takes every wanted slot that is free, or whose owner's lease expired
// with its session gone, or that names this worker but is not acted on (after
// a lapse of the lease). Each taken slot gets a new epoch.
func (h *Holder) claim(ctx context.Context) {
	h.mu.Lock()
	var want []int32
	for _, s := range h.cfg.Slots {
		if _, ok := h.owned[s]; !ok {
			want = append(want, int32(s))
		}
	}
	id := h.id
	h.mu.Unlock()
	if len(want) == 0 {
		return
	}
	got := map[int]int64{}
	err := h.tx(ctx, func(tx pgx.Tx) error {
		// A slot's row is made by setup, a resize's cutover, or here for a
		// group set up before generations were recorded. A slot handed off
		// in a resize has no row any more and is not made again (its
		// generation has a row): its consumer is gone.
		if _, err := tx.Exec(ctx, `insert into partitionq.slot (queue, grp, n, slot)
			select $1, $2, $4, s from unnest($3::int4[]) s
			 where not partitionq.has_generations($1, $2)
			on conflict do nothing`, h.cfg.Queue, h.cfg.Group, want, h.cfg.N); err != nil {
			return err
		}
		// Lock the wanted rows first, and judge them in the next statement,
		// whose snapshot is taken once the locks are held: a statement that
		// waited on a row for another claim re-checks only that row against
		// its first snapshot, in which the new owner's worker row (registered
		// a moment before, as every generation's run does at a cutover) may
		// not exist yet, and would take the slot from a live owner.
		if _, err := tx.Exec(ctx, `select 1 from partitionq.slot
			 where queue = $1 and grp = $2 and n = $4 and slot = any($3::int4[])
			 order by slot for update`, h.cfg.Queue, h.cfg.Group, want, h.cfg.N); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			with gone as (
			    select w.id from partitionq.worker w
			     where w.id in (select worker_id from partitionq.slot
			                     where queue = $1 and grp = $2 and n = $5 and slot = any($3::int4[]) and worker_id <> $4)
			       and w.lease_until < clock_timestamp()
			       and not exists (select 1 from pg_stat_activity a
			                        where a.pid = w.backend_pid
			                          and (a.backend_start is null or w.backend_start is null or a.backend_start = w.backend_start))
			       for update of w skip locked
			)
			update partitionq.slot s
			   set worker_id = $4, epoch = s.epoch + 1, since = clock_timestamp()
			 where s.queue = $1 and s.grp = $2 and s.n = $5 and s.slot = any($3::int4[])
			   and (s.worker_id is null or s.worker_id = $4 or s.worker_id in (select id from gone)
			        or not exists (select 1 from partitionq.worker w where w.id = s.worker_id))
			   and ($6 = 0 or partitionq.is_generation($1, $2, $5, $6))
			returning s.slot, s.epoch`, h.cfg.Queue, h.cfg.Group, want, id, h.cfg.N, h.cfg.Generation)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s int
			var e int64
			if err := rows.Scan(&s, &e); err != nil {
				return err
			}
			got[s] = e
		}
		return rows.Err()
	})
	if err != nil {
		if ctx.Err() == nil && !db.IsLockNotAvailable(err) {
			h.log.Warn("partitionq: taking slots failed", slog.Any("error", err))
		}
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.Valid() { // the lease lapsed while we claimed: act on nothing (the next claim bumps the epoch again)
		return
	}
	for _, s := range sortedKeys(got) {
		h.owned[s] = got[s]
		h.cfg.OnGain(s, got[s])
	}
	if len(got) > 0 && h.cfg.OnGained != nil {
		h.cfg.OnGained()
	}
}

func sortedKeys(m map[int]int64) []int {
	out := make([]int, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// Drop forgets slot when it is owned at epoch (the caller found, in a
// transaction of its own, that it is not: another worker took it over), so
// that the holder tries to take it again. OnLose is not called: the caller
// stopped the slot's work already.
func (h *Holder) Drop(slot int, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.owned[slot]; ok && e == epoch {
		delete(h.owned, slot)
	}
}

// Forget stops wanting slot (a slot handed off in a resize: it exists no
// more) and forgets it if owned, without calling OnLose (the caller stopped
// the slot's work).
func (h *Holder) Forget(slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.owned, slot)
	keep := h.cfg.Slots[:0:0]
	for _, s := range h.cfg.Slots {
		if s != slot {
			keep = append(keep, s)
		}
	}
	h.cfg.Slots = keep
}

// loseAll stops acting on every owned slot.
func (h *Holder) loseAll(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range sortedKeys(h.owned) {
		delete(h.owned, s)
		h.cfg.OnLose(s, why)
	}
}

// Release gives up slots (after their work stopped), so that standbys take
// them at once.
func (h *Holder) Release(ctx context.Context, slots []int) error {
	if len(slots) == 0 {
		return nil
	}
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	id := h.WorkerID()
	// On a connection of its own: the lease session belongs to the holder's
	// goroutine, which may be waiting on it.
	err := pgx.BeginFunc(ctx, h.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `update partitionq.slot set worker_id = null, since = null
			where queue = $1 and grp = $2 and n = $5 and slot = any($3::int4[]) and worker_id = $4`, h.cfg.Queue, h.cfg.Group, ss, id, h.cfg.N); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `select pg_notify($1, $2)`, SlotsChannel, h.cfg.Queue+"/"+h.cfg.Group)
		return err
	})
	h.mu.Lock()
	for _, s := range slots {
		delete(h.owned, s)
	}
	h.mu.Unlock()
	return err
}

// Close ends the lease: the worker row is removed (when it owns nothing any
// more) and the lease session goes back to the pool. Call it after the
// context given to Run is done and Run's goroutine ended.
func (h *Holder) Close(ctx context.Context) error {
	id := h.WorkerID()
	var err error
	if id != 0 {
		err = h.tx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `delete from partitionq.worker w where w.id = $1
				and not exists (select 1 from partitionq.slot s where s.worker_id = w.id)`, id)
			return err
		})
	}
	h.deadline.Store(0)
	h.mu.Lock()
	c := h.conn
	h.conn = nil
	if h.watch != nil {
		h.watch.Stop()
	}
	h.mu.Unlock()
	if c != nil {
		if !h.pooled.Load() {
			c.Exec(ctx, "unlisten *") // best effort; the pool resets nothing else
		}
		c.Release()
	}
	return err
}

// ownedRows is the rows of slots $3 (of queue $1, group $2, the
// generation with $5 slots) owned at epochs $4, each locked for share, as
// x(slot). Each slot is looked up by the primary key, one at a time: the
// planner cannot join the arrays with the table well on a table it has no
// statistics of yet (a group just set up), and scanned every slot row of
// the group for each one wanted (0.6 ms instead of 0.06 at N = 256).
const ownedRows = `unnest($3::int4[], $4::int8[]) u(slot, epoch),
	lateral (select s.slot from partitionq.slot s
	          where s.queue = $1 and s.grp = $2 and s.n = $5 and s.slot = u.slot
	            and s.epoch = u.epoch and s.worker_id is not null
	            for share) x`

// Fence checks, inside tx, that the worker still owns slots (of the
// generation with n slots) at their epochs, and holds the slot rows (for
// share) until tx ends, so that a takeover waits for tx and cannot happen
// between the check and the commit. It fails with ErrNotOwner otherwise.
func Fence(ctx context.Context, tx db.DB, queue, group string, n int, slots []int, epochs []int64) error {
	if len(slots) == 0 {
		return nil
	}
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	var found int
	err := tx.QueryRow(ctx, `select count(*) from `+ownedRows, queue, group, ss, epochs, n).Scan(&found)
	if err != nil {
		return err
	}
	if found != len(slots) {
		return ErrNotOwner
	}
	return nil
}

// CheckOwner reports whether slot (of the generation with n slots) is
// still owned at epoch, holding its row for share until tx ends
// (partitionq.check_owner: what a handler's own transaction calls before
// it commits, Client.CheckOwner).
func CheckOwner(ctx context.Context, tx db.DB, queue, group string, n, slot int, epoch int64) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `select partitionq.check_owner($1, $2, $3, $4, $5)`, queue, group, n, slot, epoch).Scan(&ok)
	return ok, err
}

// Owned reads which of slots (of the generation with n slots) are still
// owned at their epochs (holding those rows for share until tx ends), for
// transactions that finish several slots at once and must leave out the
// ones taken over.
func Owned(ctx context.Context, tx db.DB, queue, group string, n int, slots []int, epochs []int64) (map[int]bool, error) {
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	rows, err := tx.Query(ctx, `select x.slot from `+ownedRows, queue, group, ss, epochs, n)
	return slotSet(rows, err)
}

// RemainingSlots returns which slots of the generation with n slots still
// have an ownership row (not handed off), for the new slots of the
// generation with m slots waiting for their parents: none once the resize
// from n to m slots has ended. (A generation keeps its parent's N after
// its resize; a later resize may make a generation with that N again,
// whose slots are not its parents.)
func RemainingSlots(ctx context.Context, q db.DB, queue, group string, n, m int) (map[int]bool, error) {
	rows, err := q.Query(ctx, `select s.slot from partitionq.slot s
		where s.queue = $1 and s.grp = $2 and s.n = $3 and partitionq.resizing($1, $2, $3, $4)`,
		queue, group, n, m)
	return slotSet(rows, err)
}

// slotSet collects a query's one column of slot numbers as a set.
func slotSet(rows pgx.Rows, err error) (map[int]bool, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out[s] = true
	}
	return out, rows.Err()
}

// Owner is the worker that owns a slot, as the database says.
type Owner struct {
	Queue, Group string
	N            int // the slot's generation has N slots
	Slot         int
	Epoch        int64
	WorkerID     int64
	Identity     string
	Host         string
	OSPid        int
	// BackendPID is the server process of the owner's lease session (0 when
	// it connects through a pooler).
	BackendPID int
	Addr       string // the lease session's client address ("local": a socket; "": not visible to the reader)
	Since      time.Time
	// Live reports that the owner's lease has not expired.
	Live bool
	// LeaseLeft is how long the lease lasts (negative: expired that long ago).
	LeaseLeft time.Duration
}

// SlotKey names a slot of a group: slot Slot of the generation with N slots.
type SlotKey struct{ N, Slot int }

// Owners returns the owner of every slot of a group that has one, of every
// generation.
func Owners(ctx context.Context, q db.DB, queue, group string) (map[SlotKey]Owner, error) {
	os, err := readOwners(ctx, q, &queue, &group)
	if err != nil {
		return nil, err
	}
	out := map[SlotKey]Owner{}
	for _, o := range os {
		out[SlotKey{o.N, o.Slot}] = o
	}
	return out, nil
}

// AllOwners returns the owner of every slot that has one, of every group of
// queue (of every queue when it is empty), in one query.
func AllOwners(ctx context.Context, q db.DB, queue string) ([]Owner, error) {
	if queue == "" {
		return readOwners(ctx, q, nil, nil)
	}
	return readOwners(ctx, q, &queue, nil)
}

func readOwners(ctx context.Context, q db.DB, queue, group *string) ([]Owner, error) {
	rows, err := q.Query(ctx, `
		select s.queue, s.grp, s.n, s.slot, s.epoch, s.worker_id, w.identity, w.host, w.os_pid, coalesce(w.backend_pid, 0),
		       -- another role's address is NULL without pg_read_all_stats
		       case when a.backend_start is null then '' else coalesce(host(a.client_addr), 'local') end,
		       coalesce(s.since, w.started_at), w.lease_until > clock_timestamp(), w.lease_until - clock_timestamp()
		  from partitionq.slot s join partitionq.worker w on w.id = s.worker_id
		  left join pg_stat_activity a on a.pid = w.backend_pid
		 where ($1::text is null or s.queue = $1) and ($2::text is null or s.grp = $2)`, queue, group)
	if err != nil {
		return nil, fmt.Errorf("read slot owners: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Owner, error) {
		var o Owner
		err := r.Scan(&o.Queue, &o.Group, &o.N, &o.Slot, &o.Epoch, &o.WorkerID, &o.Identity, &o.Host, &o.OSPid, &o.BackendPID, &o.Addr,
			&o.Since, &o.Live, &o.LeaseLeft)
		return o, err
	})
}
