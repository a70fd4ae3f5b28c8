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
	"slices"
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

// Why a slot came to a worker (Config.OnGain).
const (
	// ReasonJoin: a balancing move, handed over by its owner (a worker
	// joined, so the shares changed).
	ReasonJoin = "join"
	// ReasonLeave: its owner released it as it stopped.
	ReasonLeave = "leave"
	// ReasonCrash: taken from a worker whose lease expired with its
	// session gone.
	ReasonCrash = "crash"
	// ReasonResize: a new generation's slot, owned for the first time.
	ReasonResize = "resize"
)

// Reasons are the reasons a slot moves, in a fixed order (the index of a
// counter by reason).
var Reasons = [...]string{ReasonJoin, ReasonLeave, ReasonCrash, ReasonResize}

// ErrNotOwner reports that the slot is no longer owned at the epoch given:
// another worker took it over, or it was released.
var ErrNotOwner = errors.New("this worker no longer owns the slot")

// Config configures a Holder. Every field is required unless it says otherwise.
type Config struct {
	Pool         *pgxpool.Pool // the worker's own pool; the lease session is one of its connections
	Log          *slog.Logger
	Queue, Group string
	N            int // the generation's number of slots
	// Generation is the generation's number (1 for a group that has no
	// generation rows, as before version 5): the slot rows the holder
	// takes and keeps are this generation's. A generation that ended has
	// no rows left to take, and its number is never used again.
	Generation int
	// Resized says the generation was made by a resize: a first owner of
	// its slots counts as a move (reason "resize").
	Resized bool
	// Member is the worker process's member token: the same for every
	// generation the process runs, unique to the process.
	Member string
	// Balance shares the generation's slots with the group's other
	// balancing workers (balance.go); otherwise the worker runs only
	// Slots (its pins).
	Balance bool
	// MaxMoving bounds the slots the worker hands over at once. Defaults
	// to 4.
	MaxMoving int
	Slots     []int // the pinned slots to own when they are free (or their owner is gone); unused when Balance
	Identity  string
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
	// OnGain is called when the worker takes a slot, with its new epoch
	// and why the slot came to it (a Reason; "" when it is no move: the
	// first owner of a group's slot, or this worker taking its slot back
	// after a lapse of its lease); OnGained, when set, once after the slots
	// taken together (one claim) have all been passed to OnGain, under the
	// same hold of the lock (so no OnLose comes between).
	OnGain   func(slot int, epoch int64, reason string)
	OnGained func()
	// OnLeave hands a slot over to member to (a balancing move): the
	// worker stops starting work on the slot, lets what runs finish,
	// records its progress and then calls HandOver. It runs on the
	// holder's goroutine, without its lock, so it must not block. When
	// not set, the worker never hands slots over.
	OnLeave func(slot int, to string)
	// MayGive, when set, says whether a slot may be handed over now (not
	// while a resize hands it off to the new generation).
	MayGive func(slot int) bool
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
	mu      sync.Mutex
	id      int64          // the worker row; 0 before registration
	owned   map[int]int64  // slot -> epoch
	leaving map[int]string // owned slots being handed over, to the member named
	conn    *pgxpool.Conn  // the lease session (only the holder's goroutine uses it)
	watch   *time.Timer    // fires at the deadline: the watchdog

	claimNow chan struct{}
}

// New returns a Holder; Run starts it.
func New(cfg Config) *Holder {
	if cfg.MaxMoving <= 0 {
		cfg.MaxMoving = 4
	}
	return &Holder{cfg: cfg, log: cfg.Log, start: time.Now(), owned: map[int]int64{}, leaving: map[int]string{}, claimNow: make(chan struct{}, 1)}
}

// WorkerID is the id of the worker's row (0 before it registered).
func (h *Holder) WorkerID() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id
}

// Valid reports whether the lease is certainly still valid at the server.
func (h *Holder) Valid() bool { return h.ValidAt(time.Now()) }

// ValidAt reports whether the lease is certainly still valid at the server
// at now, a time.Now reading (for a caller that needs the reading too).
func (h *Holder) ValidAt(now time.Time) bool {
	return now.Sub(h.start) < time.Duration(h.deadline.Load())
}

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
		var pins []int32
		if !h.cfg.Balance {
			pins = make([]int32, len(h.cfg.Slots))
			for i, s := range h.cfg.Slots {
				pins[i] = int32(s)
			}
		}
		var member *string
		if h.cfg.Member != "" {
			member = &h.cfg.Member
		}
		if err := tx.QueryRow(ctx, `
			insert into partitionq.worker (identity, host, os_pid, backend_pid, backend_start, lease_until, schema_version,
			                               queue, grp, n, generation, member, balance, pins)
			select $1, $2, $3, a.pid, a.backend_start, clock_timestamp() + $5::interval, $6, $7, $8, $9, $10, $11, $12, $13
			  from (select $4::bool as pooled) p
			  left join pg_stat_activity a on not p.pooled and a.pid = pg_backend_pid()
			returning id`, h.cfg.Identity, host, os.Getpid(), h.pooled.Load(), h.cfg.TTL, h.cfg.SchemaVersion,
			h.cfg.Queue, h.cfg.Group, h.cfg.N, h.cfg.Generation, member, h.cfg.Balance, pins).Scan(&id); err != nil {
			return err
		}
		// The group's other workers plan again at once: their shares changed.
		_, err := tx.Exec(ctx, `select pg_notify($1, $2)`, SlotsChannel, h.cfg.Queue+"/"+h.cfg.Group)
		return err
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
			claimAt = time.Now().Add(h.cfg.Poll)
			if h.Valid() {
				h.step(ctx)
			}
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
		if mine, err = ownedSlots(ctx, tx, id, h.cfg.Queue, h.cfg.Group, h.cfg.Generation); err != nil {
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
			delete(h.leaving, s)
			h.cfg.OnLose(s, "another worker owns the slot now")
		}
	}
	return true
}

func ownedSlots(ctx context.Context, q db.DB, id int64, queue, group string, generation int) (map[int]int64, error) {
	rows, err := q.Query(ctx, `select slot, epoch from partitionq.slot where worker_id = $1 and queue = $2 and grp = $3 and generation = $4`,
		id, queue, group, generation)
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

// step does the worker's part of the group's plan (balance.go): it reads
// the group's live workers and the generation's slots, hands over the
// slots the plan moves away from it, and claims the ones it gives it. A
// worker without a member token (a test's) claims its wanted slots alone.
func (h *Holder) step(ctx context.Context) {
	if h.cfg.Member == "" {
		h.mu.Lock()
		var want []int
		for _, s := range h.cfg.Slots {
			if _, ok := h.owned[s]; !ok {
				want = append(want, s)
			}
		}
		h.mu.Unlock()
		h.claim(ctx, want)
		return
	}
	var v View
	var mine map[int]bool // slots whose row names this worker
	err := h.tx(ctx, func(tx pgx.Tx) error {
		var err error
		v, mine, err = h.readView(ctx, tx)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("partitionq: reading the group's workers and slots failed", slog.Any("error", err))
		}
		return
	}
	plan := PlanFor(v, h.cfg.Member, h.cfg.MaxMoving)
	h.mu.Lock()
	take := plan.Take
	for s := range mine {
		if _, ok := h.owned[s]; !ok && !slices.Contains(take, s) {
			take = append(take, s) // this worker's after a lapse of its lease: take it back (a new epoch)
		}
	}
	var give []Move
	for _, g := range plan.Give {
		if _, ok := h.owned[g.Slot]; !ok {
			continue
		}
		if to, ok := h.leaving[g.Slot]; ok && to == g.To {
			continue
		}
		if h.cfg.OnLeave == nil || (h.cfg.MayGive != nil && !h.cfg.MayGive(g.Slot)) {
			continue
		}
		give = append(give, g)
	}
	h.mu.Unlock()
	if len(give) > 0 {
		h.give(ctx, give)
	}
	if len(take) > 0 {
		sort.Ints(take)
		h.claim(ctx, take)
	}
}

// readView reads one step's picture (View) of the generation's slots and
// the group's live workers, and which slots' rows name this worker.
func (h *Holder) readView(ctx context.Context, tx pgx.Tx) (View, map[int]bool, error) {
	v, mine, err := ReadView(ctx, tx, h.cfg.Queue, h.cfg.Group, h.cfg.Generation, h.WorkerID())
	if err != nil {
		return v, nil, err
	}
	for _, m := range v.Members {
		if m.Token == h.cfg.Member {
			return v, mine, nil
		}
	}
	// This worker, whose lease the step's caller knows is valid.
	m := Member{Token: h.cfg.Member}
	if !h.cfg.Balance {
		h.mu.Lock()
		m.Pins = append([]int{}, h.cfg.Slots...)
		h.mu.Unlock()
	}
	v.Members = append(v.Members, m)
	return v, mine, nil
}

// ReadView reads the picture every worker of a group plans on (View) for
// the generation with the given number: its slots, with their
// live owners and reservations, and the group's live workers (the
// balancing ones of every generation, the pinned ones of this one); and
// which slots' rows name worker id (none for 0).
func ReadView(ctx context.Context, q db.DB, queue, group string, generation int, id int64) (View, map[int]bool, error) {
	var v View
	mine := map[int]bool{}
	rows, err := q.Query(ctx, `
		select s.slot, coalesce(s.worker_id = $4, false),
		       coalesce(case when w.lease_until > clock_timestamp() then w.member end, ''),
		       coalesce(w.lease_until > clock_timestamp() and w.member is null, false),
		       coalesce(case when exists (select 1 from partitionq.worker t
		                                   where t.queue = $1 and t.grp = $2 and t.member = s.handoff_to
		                                     and t.lease_until > clock_timestamp()) then s.handoff_to end, '')
		  from partitionq.slot s left join partitionq.worker w on w.id = s.worker_id
		 where s.queue = $1 and s.grp = $2 and s.generation = $3
		 order by s.slot`, queue, group, generation, id)
	if err != nil {
		return v, nil, err
	}
	for rows.Next() {
		var sv SlotView
		var me bool
		if err := rows.Scan(&sv.Slot, &me, &sv.Owner, &sv.Other, &sv.To); err != nil {
			return v, nil, err
		}
		if me {
			mine[sv.Slot] = true
		}
		v.Slots = append(v.Slots, sv)
	}
	if err := rows.Err(); err != nil {
		return v, nil, err
	}
	// A process runs each generation's slots as a worker row of its own,
	// under one member token.
	rows, err = q.Query(ctx, `
		select distinct member, balance, coalesce(pins, '{}') from partitionq.worker
		 where queue = $1 and grp = $2 and member is not null and lease_until > clock_timestamp()
		   and (balance or generation = $3)`, queue, group, generation)
	if err != nil {
		return v, nil, err
	}
	seen := map[string]bool{}
	for rows.Next() {
		var m Member
		var balance bool
		var pins []int32
		if err := rows.Scan(&m.Token, &balance, &pins); err != nil {
			return v, nil, err
		}
		if !balance {
			m.Pins = make([]int, len(pins))
			for i, p := range pins {
				m.Pins[i] = int(p)
			}
		} else if seen[m.Token] {
			continue
		}
		seen[m.Token] = true
		v.Members = append(v.Members, m)
	}
	return v, mine, rows.Err()
}

// Worker is one live worker of a group, as its lease rows say (one per
// generation it runs, under one member token).
type Worker struct {
	Member, Identity, Host string
	OSPid                  int
	// Pins are the slots a pinned worker runs (nil: it shares the slots).
	Pins []int
}

// Workers returns the live workers of a group that have a member token, by
// member token, in the order they started.
func Workers(ctx context.Context, q db.DB, queue, group string) ([]Worker, error) {
	rows, err := q.Query(ctx, `
		select member, identity, host, os_pid, case when balance then null else coalesce(pins, '{}') end
		  from (select distinct on (member) member, identity, host, os_pid, balance, pins, started_at
		          from partitionq.worker
		         where queue = $1 and grp = $2 and member is not null and lease_until > clock_timestamp()
		         order by member, started_at) w
		 order by started_at, member`, queue, group)
	if err != nil {
		return nil, fmt.Errorf("read the group's workers: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Worker, error) {
		var w Worker
		var pins []int32
		if err := r.Scan(&w.Member, &w.Identity, &w.Host, &w.OSPid, &pins); err != nil {
			return w, err
		}
		if pins != nil {
			w.Pins = make([]int, len(pins))
			for i, p := range pins {
				w.Pins[i] = int(p)
			}
		}
		return w, nil
	})
}

// give reserves slots for the members the plan hands them to, and starts
// their handoffs (OnLeave); a slot whose handoff is under way only changes
// its reservation.
func (h *Holder) give(ctx context.Context, moves []Move) {
	id := h.WorkerID()
	var reserved []Move
	err := h.tx(ctx, func(tx pgx.Tx) error {
		reserved = reserved[:0]
		for _, m := range moves {
			h.mu.Lock()
			epoch, ok := h.owned[m.Slot]
			h.mu.Unlock()
			if !ok {
				continue
			}
			tag, err := tx.Exec(ctx, `update partitionq.slot set handoff_to = $6, handoff_at = clock_timestamp()
				 where queue = $1 and grp = $2 and generation = $3 and slot = $4 and worker_id = $5 and epoch = $7`,
				h.cfg.Queue, h.cfg.Group, h.cfg.Generation, m.Slot, id, m.To, epoch)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				reserved = append(reserved, m)
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil && !db.IsLockNotAvailable(err) {
			h.log.Warn("partitionq: handing slots over failed", slog.Any("error", err))
		}
		return
	}
	for _, m := range reserved {
		h.mu.Lock()
		_, under := h.leaving[m.Slot]
		_, owned := h.owned[m.Slot]
		if owned {
			h.leaving[m.Slot] = m.To
		}
		h.mu.Unlock()
		if owned && !under {
			h.log.Info("partitionq: handing the slot over to balance the group", slog.Int("slot", m.Slot), slog.String("to", m.To))
			h.cfg.OnLeave(m.Slot, m.To)
		}
	}
}

// Leaving returns the member an owned slot is being handed to ("" when it
// is not being handed over).
func (h *Holder) Leaving(slot int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leaving[slot]
}

// HandOver ends the handoff of slot, drained at epoch (OnLeave): its row is
// released, still reserved for the member it goes to, which is told at once.
// The worker no longer owns it.
func (h *Holder) HandOver(ctx context.Context, slot int, epoch int64) error {
	id := h.WorkerID()
	err := pgx.BeginFunc(ctx, h.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `update partitionq.slot set worker_id = null, since = null
			where queue = $1 and grp = $2 and generation = $3 and slot = $4 and worker_id = $5 and epoch = $6`,
			h.cfg.Queue, h.cfg.Group, h.cfg.Generation, slot, id, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `select pg_notify($1, $2)`, SlotsChannel, h.cfg.Queue+"/"+h.cfg.Group)
		return err
	})
	h.mu.Lock()
	if e, ok := h.owned[slot]; ok && e == epoch {
		delete(h.owned, slot)
	}
	delete(h.leaving, slot)
	h.mu.Unlock()
	return err
}

// claim takes the slots want that are free (and not reserved for another
// live member), or whose owner's lease expired with its session gone, or
// that name this worker but are not acted on (after a lapse of the lease).
// Each taken slot gets a new epoch.
func (h *Holder) claim(ctx context.Context, slots []int) {
	want := make([]int32, 0, len(slots))
	h.mu.Lock()
	for _, s := range slots {
		if _, ok := h.owned[s]; !ok {
			want = append(want, int32(s))
		}
	}
	id := h.id
	h.mu.Unlock()
	if len(want) == 0 {
		return
	}
	type took struct {
		epoch              int64
		prevWorker, prevEp int64
		reserved           string
	}
	got := map[int]took{}
	member := h.cfg.Member
	err := h.tx(ctx, func(tx pgx.Tx) error {
		// A slot's row is made by setup, a resize's cutover, or here for a
		// group set up before generations were recorded. A slot handed off
		// in a resize has no row any more and is not made again (its
		// generation has a row): its consumer is gone.
		if _, err := tx.Exec(ctx, `insert into partitionq.slot (queue, grp, generation, n, slot)
			select $1, $2, $5, $4, s from unnest($3::int4[]) s
			 where not partitionq.has_generations($1, $2)
			on conflict do nothing`, h.cfg.Queue, h.cfg.Group, want, h.cfg.N, h.cfg.Generation); err != nil {
			return err
		}
		// Lock the wanted rows first, and judge them in the next statement,
		// whose snapshot is taken once the locks are held: a statement that
		// waited on a row for another claim re-checks only that row against
		// its first snapshot, in which the new owner's worker row (registered
		// a moment before, as every generation's run does at a cutover) may
		// not exist yet, and would take the slot from a live owner.
		if _, err := tx.Exec(ctx, `select 1 from partitionq.slot
			 where queue = $1 and grp = $2 and generation = $4 and slot = any($3::int4[])
			 order by slot for update`, h.cfg.Queue, h.cfg.Group, want, h.cfg.Generation); err != nil {
			return err
		}
		// A slot reserved for another member (a handoff) is that member's
		// while it lives.
		rows, err := tx.Query(ctx, `
			with gone as (
			    select w.id from partitionq.worker w
			     where w.id in (select worker_id from partitionq.slot
			                     where queue = $1 and grp = $2 and generation = $5 and slot = any($3::int4[]) and worker_id <> $4)
			       and w.lease_until < clock_timestamp()
			       and not exists (select 1 from pg_stat_activity a
			                        where a.pid = w.backend_pid
			                          and (a.backend_start is null or w.backend_start is null or a.backend_start = w.backend_start))
			       for update of w skip locked
			), old as (
			    select slot, worker_id, epoch, handoff_to from partitionq.slot
			     where queue = $1 and grp = $2 and generation = $5 and slot = any($3::int4[])
			)
			update partitionq.slot s
			   set worker_id = $4, epoch = s.epoch + 1, since = clock_timestamp(), handoff_to = null, handoff_at = null
			  from old o
			 where s.queue = $1 and s.grp = $2 and s.generation = $5 and s.slot = o.slot
			   and (s.worker_id is null or s.worker_id = $4 or s.worker_id in (select id from gone)
			        or not exists (select 1 from partitionq.worker w where w.id = s.worker_id))
			   and (s.worker_id = $4 or s.handoff_to is null or s.handoff_to = $6
			        or not exists (select 1 from partitionq.worker t
			                        where t.queue = $1 and t.grp = $2 and t.member = s.handoff_to and t.lease_until > clock_timestamp()))
			returning s.slot, s.epoch, coalesce(o.worker_id, 0), o.epoch, coalesce(o.handoff_to, '')`,
			h.cfg.Queue, h.cfg.Group, want, id, h.cfg.Generation, member)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s int
			var t took
			if err := rows.Scan(&s, &t.epoch, &t.prevWorker, &t.prevEp, &t.reserved); err != nil {
				return err
			}
			got[s] = t
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
	slotsGot := make([]int, 0, len(got))
	for s := range got {
		slotsGot = append(slotsGot, s)
	}
	sort.Ints(slotsGot)
	for _, s := range slotsGot {
		t := got[s]
		h.owned[s] = t.epoch
		delete(h.leaving, s)
		h.cfg.OnGain(s, t.epoch, h.reason(t.prevWorker, t.prevEp, t.reserved))
	}
	if len(got) > 0 && h.cfg.OnGained != nil {
		h.cfg.OnGained()
	}
}

// reason says why a slot came to this worker, from its row before the
// claim: who owned it, at which epoch, and whom it was reserved for.
func (h *Holder) reason(prevWorker, prevEpoch int64, reserved string) string {
	switch {
	case prevWorker == h.id:
		return "" // its own, taken back after a lapse of its lease
	case reserved != "" && reserved == h.cfg.Member:
		return ReasonJoin
	case prevWorker != 0 || reserved != "":
		return ReasonCrash // its owner, or the member it was handed to, died
	case prevEpoch == int64(h.cfg.Generation)<<32 && h.cfg.Resized: // a resize's cutover makes the rows at this epoch
		return ReasonResize
	case prevEpoch == 0:
		return "" // the group's first owner of the slot
	default:
		return ReasonLeave
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
		delete(h.leaving, slot)
	}
}

// Forget stops wanting slot (a slot handed off in a resize: it exists no
// more) and forgets it if owned, without calling OnLose (the caller stopped
// the slot's work).
func (h *Holder) Forget(slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.owned, slot)
	delete(h.leaving, slot)
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
		delete(h.leaving, s)
		h.cfg.OnLose(s, why)
	}
}

// Release gives up slots (after their work stopped), so that standbys take
// them at once. The worker stops: it no longer counts in the group's
// shares, so that the others take its slots now rather than at its next
// renewal.
func (h *Holder) Release(ctx context.Context, slots []int) error {
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	id := h.WorkerID()
	// On a connection of its own: the lease session belongs to the holder's
	// goroutine, which may be waiting on it.
	err := pgx.BeginFunc(ctx, h.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `update partitionq.worker set member = null, balance = false where id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update partitionq.slot set worker_id = null, since = null
			where queue = $1 and grp = $2 and generation = $5 and slot = any($3::int4[]) and worker_id = $4`, h.cfg.Queue, h.cfg.Group, ss, id, h.cfg.Generation); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `select pg_notify($1, $2)`, SlotsChannel, h.cfg.Queue+"/"+h.cfg.Group)
		return err
	})
	h.mu.Lock()
	for _, s := range slots {
		delete(h.owned, s)
		delete(h.leaving, s)
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

// ownedRows is the rows of slots $3 (of queue $1, group $2, generation
// $5) owned at epochs $4, each locked for share, as
// x(slot). Each slot is looked up by the primary key, one at a time: the
// planner cannot join the arrays with the table well on a table it has no
// statistics of yet (a group just set up), and scanned every slot row of
// the group for each one wanted (0.6 ms instead of 0.06 at N = 256).
const ownedRows = `unnest($3::int4[], $4::int8[]) u(slot, epoch),
	lateral (select s.slot from partitionq.slot s
	          where s.queue = $1 and s.grp = $2 and s.generation = $5 and s.slot = u.slot
	            and s.epoch = u.epoch and s.worker_id is not null
	            for share) x`

// Fence checks, inside tx, that the worker still owns slots (of the
// generation with that number) at their epochs, and holds the slot rows (for
// share) until tx ends, so that a takeover waits for tx and cannot happen
// between the check and the commit. It fails with ErrNotOwner otherwise.
func Fence(ctx context.Context, tx db.DB, queue, group string, generation int, slots []int, epochs []int64) error {
	if len(slots) == 0 {
		return nil
	}
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	var found int
	err := tx.QueryRow(ctx, `select count(*) from `+ownedRows, queue, group, ss, epochs, generation).Scan(&found)
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

// Owned reads which of slots (of the generation with that number) are still
// owned at their epochs (holding those rows for share until tx ends), for
// transactions that finish several slots at once and must leave out the
// ones taken over.
func Owned(ctx context.Context, tx db.DB, queue, group string, generation int, slots []int, epochs []int64) (map[int]bool, error) {
	ss := make([]int32, len(slots))
	for i, s := range slots {
		ss[i] = int32(s)
	}
	rows, err := tx.Query(ctx, `select x.slot from `+ownedRows, queue, group, ss, epochs, generation)
	return slotSet(rows, err)
}

// RemainingSlots returns which slots of the generation numbered parent
// still have an ownership row (not handed off), for the new slots of the
// generation after it, waiting for their parents: none once the resize has
// ended (the parent generation's rows are gone, and its number is never
// used again).
func RemainingSlots(ctx context.Context, q db.DB, queue, group string, parent int) (map[int]bool, error) {
	rows, err := q.Query(ctx, `select s.slot from partitionq.slot s where s.queue = $1 and s.grp = $2 and s.generation = $3`,
		queue, group, parent)
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
	// Member is the owner's member token ("" for a worker of an older
	// partitionq); MovingTo the live member the slot is being handed to
	// ("" when none).
	Member, MovingTo string
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
		       coalesce(s.since, w.started_at), w.lease_until > clock_timestamp(), w.lease_until - clock_timestamp(),
		       coalesce(w.member, ''),
		       coalesce((select t.member from partitionq.worker t
		                  where t.queue = s.queue and t.grp = s.grp and t.member = s.handoff_to and t.lease_until > clock_timestamp()
		                  limit 1), '')
		  from partitionq.slot s join partitionq.worker w on w.id = s.worker_id
		  left join pg_stat_activity a on a.pid = w.backend_pid
		 where ($1::text is null or s.queue = $1) and ($2::text is null or s.grp = $2)`, queue, group)
	if err != nil {
		return nil, fmt.Errorf("read slot owners: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Owner, error) {
		var o Owner
		err := r.Scan(&o.Queue, &o.Group, &o.N, &o.Slot, &o.Epoch, &o.WorkerID, &o.Identity, &o.Host, &o.OSPid, &o.BackendPID, &o.Addr,
			&o.Since, &o.Live, &o.LeaseLeft, &o.Member, &o.MovingTo)
		return o, err
	})
}
