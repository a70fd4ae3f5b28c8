// Package runner runs one worker's slots of a consumer group: it holds the
// worker's lease (package lease), opens the owned slots' engine batches
// together, reads the batches that cover the same ticks with one scan
// (engine.OpenRead) and hands each event to its slot, runs the handler one
// key at a time and many keys at once (package lanes), records progress
// inside the open batches (package progress), applies the failure policy and
// finishes the batches (package parked holds what a failure leaves), and,
// under the pause policy, drains blocked keys.
//
// Its cost does not grow with the number of slots at rest: one lease
// renewal a second, one cheap look for new ticks per PollInterval (and a
// wake-up on the ticker's notification), and no query at all for blocked
// keys while none is blocked. Its connections are a handful: the lease
// session, a reader per tick range being read (usually one), a finisher,
// and the drains of blocked keys.
//
// The invariants, and why they hold, are in docs/architecture.md and
// docs/failure-policy.md.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Policy says what a handler failure does to the rest of its key.
type Policy int

const (
	// Pause blocks the key until the failed event is resolved.
	Pause Policy = iota
	// Skip retries the failed event later and lets the key go on.
	Skip
)

// Result is what a handler call came to.
type Result struct {
	Err        error         // nil: done
	DeadLetter bool          // do not retry: dead-letter it now
	RetryAfter time.Duration // when > 0, overrides the backoff
}

// Call is one handler call: the event, where it belongs, and its attempt.
type Call struct {
	Event   engine.Event
	N       int // the slot's generation has N slots
	Slot    int
	Epoch   int64 // the slot's ownership epoch: the fencing token
	Batch   int64 // the engine batch, 0 for an event drained from the retry queue
	Attempt int   // from 1
}

// Handler handles one event.
type Handler func(ctx context.Context, c Call) Result

// RunCall is one call of a run handler: consecutive events of one key, in
// order, each with its attempt, where they belong.
type RunCall struct {
	Events   []engine.Event
	Attempts []int // Attempts[i] is Events[i]'s, from 1
	N        int
	Slot     int
	Epoch    int64
	Batch    int64 // the engine batch, 0 for events drained from the retry queue
}

// RunResult is what a run handler call came to: its first Done events are
// done; when Done < len(Events), event Done failed with Failed (its Err is
// not nil) and the events after it were not handled.
type RunResult struct {
	Done   int
	Failed Result
}

// RunHandler handles a run of events of one key.
type RunHandler func(ctx context.Context, c RunCall) RunResult

// Stats are counters of one slot in this process; safe for concurrent use.
type Stats struct {
	Handled      atomic.Int64 // the handler returned nil
	Failed       atomic.Int64 // handler failures
	Parked       atomic.Int64 // events set aside behind a blocked head
	DeadLettered atomic.Int64
	Batches      atomic.Int64
	Resumed      atomic.Int64 // events a previous owner had resolved, not run again
	Owned        atomic.Bool
	LastBatch    atomic.Int64 // unix nanoseconds of the last finished batch
	// Moves counts the times the slot came to this worker from another, by
	// reason (lease.Reasons).
	Moves [len(lease.Reasons)]atomic.Int64
}

// Config configures a Runner. All fields are required unless they say
// otherwise; the public package fills defaults.
type Config struct {
	Eng          *engine.Engine
	Pool         *pgxpool.Pool // the worker's own pool
	Log          *slog.Logger
	Queue, Group string
	N            int
	Generation   int      // the generation's number (lease.Config.Generation)
	Slots        []int    // the slots to run
	Consumers    []string // engine consumer of every slot of the group, by slot
	SubIDs       []int32  // subscription of every slot of the group, by slot
	Stats        map[int]*Stats
	Identity     string
	// Parent is the N of the generation before this one (0: none),
	// ParentGeneration its number, and ParentSubs its consumers'
	// subscriptions: a new slot opens no batch before its parent slots are
	// handed off (store.Parents), and its reads take the retries the engine
	// re-delivers for those subscriptions.
	Parent           int
	ParentGeneration int
	ParentSubs       []int32
	// SchemaVersion is recorded with the lease; OnRenew runs in every lease
	// renewal's transaction (lease.Config).
	SchemaVersion int
	OnRenew       func(ctx context.Context, tx pgx.Tx) error

	// Member is the worker process's member token, the same for every
	// generation it runs; Balance shares the slots with the group's other
	// balancing workers (else Slots are pins); MaxMoving bounds the slots
	// handed over at once (lease.Config). LeaveTimeout bounds how long a
	// handoff waits for the slot's handler runs before it cancels them
	// (<= 0: no bound).
	Member       string
	Balance      bool
	MaxMoving    int
	LeaveTimeout time.Duration

	Concurrency      int    // handler calls at once per slot
	DrainConcurrency int    // blocked keys drained at once (each holds a connection): the most
	DrainFloor       int    // 1 to DrainConcurrency-1: the bound starts here and grows (drainturns.go); 0: fixed
	Policy           Policy //
	MaxAttempts      int    // 0: no limit
	Backoff          func(attempt int) time.Duration
	HandlerTimeout   time.Duration // <= 0: none
	Handle           Handler
	// HandleRun, when set in place of Handle, is called with runs of up
	// to MaxRun consecutive events of a key: what the batch holds of the
	// key when the run starts (a drain hands its events one at a time).
	HandleRun RunHandler
	MaxRun    int
	// Keys, shared by every runner of a worker, lets one run of a key at a
	// time in the process (nil: no such guard beyond the runner's own).
	Keys *KeyGuard
	// Calls, shared by every runner of a worker, counts the handler calls
	// in flight by slot (nil: the runner counts its own).
	Calls *Calls

	PollInterval     time.Duration // between looks for new ticks (a notification wakes at once)
	StandbyPoll      time.Duration // between tries to take wanted slots owned by others
	HeadScanInterval time.Duration // longest wait between looks at blocked keys (while there are some)
	// MaxBlocked (pause): a head that first failed longer ago than this is
	// dead-lettered (MaxBlockedDeadLetter) or only flagged. 0: no bound.
	MaxBlocked           time.Duration
	MaxBlockedDeadLetter bool

	ChunkSize      int // events fetched at a time
	BatchMaxEvents int // a slot behind takes every tick it is behind by, up to about this many events of the queue (0: one tick a batch)
	MaxReaders     int // tick ranges read at once

	// Progress records, as it goes, which events of an open batch are
	// resolved, so that after a fault only the rest runs again.
	Progress      bool
	ProgressMax   int           // most ids recorded above the watermark
	FlushInterval time.Duration // the least time between two progress flushes

	LeaseTTL, LeaseRenew, LeaseMargin time.Duration
}

// Runner runs the slots. Make it with New, then Run it once.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	lease *lease.Holder

	stop, hard context.Context

	wake      chan struct{} // a look for new batches is due
	headWake  chan struct{} // a look at blocked keys is due
	flushWake chan struct{} // progress to flush
	finishQ   chan *batchRun

	readerSem chan struct{}
	drains    *drainTurns

	mu      sync.Mutex
	slots   map[int]*slotRun // owned slots
	gaining []*slotRun       // slots of the claim in progress (gain), published by gained
	calls   *Calls
	wg      sync.WaitGroup // every goroutine but Run's own

	flushMu sync.Mutex // held by a flush; a drain settles its handled events under it (progress.go)
	lookMu  sync.Mutex // held by a look that opens batches (open.go); a handoff waits for it (handover.go)

	peekedMu  sync.Mutex
	peekedSQL map[int64]string // the engine's queries of batches a look peeked at, for their reads

	readSeq  atomic.Int64 // numbers the reads
	born     time.Time    // when New made it: turned counts from here (on the monotonic clock)
	turned   atomic.Int64 // nanoseconds since born (plus 1) when batchLoop last began a turn; 0: not yet
	seenTick atomic.Int64 // the queue's newest tick at the last look (0: not looked)
	cutover  atomic.Int64 // the cutover tick of a resize of this (old) generation, once known (0: none)
}

// New returns a Runner.
func New(cfg Config) *Runner {
	r := &Runner{cfg: cfg, log: cfg.Log, born: time.Now(),
		wake: make(chan struct{}, 1), headWake: make(chan struct{}, 1), flushWake: make(chan struct{}, 1),
		finishQ:   make(chan *batchRun, 1024),
		readerSem: make(chan struct{}, max(1, cfg.MaxReaders)), drains: newDrainTurns(cfg.DrainConcurrency, cfg.DrainFloor),
		slots: map[int]*slotRun{}, calls: cfg.Calls}
	if r.calls == nil {
		r.calls = &Calls{}
	}
	r.lease = lease.New(lease.Config{
		Pool: cfg.Pool, Log: cfg.Log, Queue: cfg.Queue, Group: cfg.Group, N: cfg.N, Generation: cfg.Generation, Resized: cfg.Parent != 0,
		Member: cfg.Member, Balance: cfg.Balance, MaxMoving: cfg.MaxMoving, Slots: cfg.Slots, Identity: cfg.Identity,
		SchemaVersion: cfg.SchemaVersion, OnRenew: cfg.OnRenew,
		TTL: cfg.LeaseTTL, Renew: cfg.LeaseRenew, Margin: cfg.LeaseMargin, Poll: cfg.StandbyPoll,
		Channels: cfg.Eng.TickChannels(cfg.Queue),
		OnNotify: func(ch, payload string) {
			if cfg.Eng.IsTickNotice(cfg.Queue, ch, payload) {
				signal(r.wake)
			}
		},
		OnGain: r.gain, OnGained: r.gained,
		OnLose: r.lose, OnLeave: r.leave, MayGive: r.mayGive,
	})
	return r
}

// Lease is the runner's lease holder.
func (r *Runner) Lease() *lease.Holder { return r.lease }

// LoopTurned is when the loop that looks for new ticks and opens batches
// last began a turn; zero before it first runs.
func (r *Runner) LoopTurned() time.Time {
	t := r.turned.Load()
	if t == 0 {
		return time.Time{}
	}
	return r.born.Add(time.Duration(t - 1))
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run runs the slots until stop is done, then stops gracefully: no new
// batch or event is taken, running handlers finish (they get contexts
// derived from hard, which the caller cancels when its shutdown timeout
// passes), the progress of open batches is recorded, and the slots are
// released for their standbys.
//
// First it registers the worker's lease (migrating partitionq's schema when
// it is old). ready is called once, with nil when that worked, or when it
// failed in a way that may pass (the server cannot be reached: Run goes on
// trying), or with the error when retrying cannot help (no right to
// partitionq's tables, no schema): then Run returns that error. Afterwards
// errors are logged and retried.
func (r *Runner) Run(stop, hard context.Context, ready func(error)) error {
	r.stop, r.hard = stop, hard
	if err := r.register(ready); err != nil {
		return err
	}
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(stop))
	defer stopLease()
	leaseDone := r.lease.Hold(leaseCtx)
	if r.cfg.Progress {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.flushLoop() }()
	}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.finishLoop() }()
	if r.cfg.Policy == Pause {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.headLoop() }()
	}
	r.batchLoop()

	// Stopping: every batch stops taking events; wait for what runs.
	r.mu.Lock()
	owned := make([]*slotRun, 0, len(r.slots))
	for _, s := range r.slots {
		owned = append(owned, s)
	}
	r.mu.Unlock()
	for _, s := range owned {
		s.waitIdle()
	}
	r.advanceIdle() // the next owner starts where this one has read
	close(r.finishQ)
	r.wg.Wait()
	if r.cfg.Progress {
		r.flush(context.WithoutCancel(stop)) // the last progress of the batches left open
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(stop), 10*time.Second)
	defer cancel()
	var slots []int
	r.mu.Lock()
	for n := range r.slots {
		slots = append(slots, n)
	}
	r.mu.Unlock()
	sort.Ints(slots)
	if err := r.lease.Release(bg, slots); err != nil {
		r.log.Warn("partitionq: releasing the slots failed; standbys take them when the lease expires", slog.Any("error", err))
	}
	for _, n := range slots {
		r.log.Info("partitionq: slot released", slog.Int("slot", n))
		r.cfg.Stats[n].Owned.Store(false)
	}
	stopLease()
	<-leaseDone
	return r.lease.Close(bg)
}

// register registers the worker's lease, retrying while the failure may
// pass; see Run.
func (r *Runner) register(ready func(error)) error {
	told := false
	tell := func(err error) {
		if !told {
			told = true
			ready(err)
		}
	}
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(r.stop, registerTimeout)
		err := store.Migrate(ctx, r.cfg.Pool)
		if err == nil {
			err = r.lease.Register(ctx)
		}
		cancel()
		if err == nil {
			tell(nil)
			return nil
		}
		if r.stop.Err() != nil {
			tell(r.stop.Err())
			return r.stop.Err()
		}
		if db.StatementPooling(err) {
			err = fmt.Errorf("%w (%v)", ErrStatementPooling, err)
			tell(err)
			return err
		}
		if db.Permanent(err) { // the server said no: retrying will not help
			err = fmt.Errorf("partitionq: the worker cannot register its lease: %w", err)
			tell(err)
			return err
		}
		r.log.Warn("partitionq: registering the worker failed; retrying", slog.Any("error", err), slog.Duration("backoff", backoff))
		tell(nil)
		sleep(r.stop, backoff)
		backoff = min(2*backoff, 10*time.Second)
	}
}

// registerTimeout bounds one attempt to register the worker.
const registerTimeout = 15 * time.Second

// gain is the lease's OnGain: the worker owns slot n at epoch now. It runs
// under the lease's lock, so it only records the slot; gained publishes the
// slots of one claim together and wakes the loop, so that their first
// batches are opened, and read, together.
func (r *Runner) gain(n int, epoch int64, reason string) {
	s := newSlotRun(r, n, epoch)
	s.reason = reason
	r.mu.Lock()
	r.gaining = append(r.gaining, s)
	r.mu.Unlock()
}

// gained is the lease's OnGained, under the lease's lock after the gains
// of one claim.
func (r *Runner) gained() {
	r.mu.Lock()
	got := r.gaining
	r.gaining = nil
	for _, s := range got {
		r.slots[s.slot] = s
	}
	r.mu.Unlock()
	for _, s := range got {
		r.cfg.Stats[s.slot].Owned.Store(true)
		if s.reason == "" {
			r.log.Info("partitionq: slot owned", slog.Int("slot", s.slot), slog.Int64("epoch", s.epoch), slog.String("consumer", r.cfg.Consumers[s.slot]))
			continue
		}
		r.log.Info("partitionq: slot moved to this worker", slog.Int("slot", s.slot), slog.Int64("epoch", s.epoch),
			slog.String("consumer", r.cfg.Consumers[s.slot]), slog.String("reason", s.reason))
		for i, reason := range lease.Reasons {
			if reason == s.reason {
				r.cfg.Stats[s.slot].Moves[i].Add(1)
			}
		}
	}
	signal(r.wake)
}

// lose is the lease's OnLose: the worker can no longer prove it owns slot n.
// Everything of the slot stops now: its handlers' contexts are cancelled
// (which kills the process group of a --exec command) and nothing more of
// it is committed.
func (r *Runner) lose(n int, why string) {
	r.mu.Lock()
	s := r.slots[n]
	delete(r.slots, n)
	r.mu.Unlock()
	if s == nil {
		return
	}
	s.kill(fmt.Errorf("%w: %s", errLost, why))
	r.cfg.Stats[n].Owned.Store(false)
	if r.stop.Err() == nil {
		r.log.Warn("partitionq: slot lost: its handlers are cancelled and nothing more of it is committed", slog.Int("slot", n),
			slog.Int64("epoch", s.epoch), slog.String("reason", why))
	}
}

// loseRun stops slot run s, which a transaction found no longer owned at
// its epoch: when s is the slot's current run, as the lease's OnLose does,
// and the lease forgets the slot too, so that it tries to take it again; a
// run already replaced is only stopped (it may be a batch of an earlier run
// finishing late: the current run must not pay for it).
func (r *Runner) loseRun(s *slotRun, why string) {
	r.mu.Lock()
	current := r.slots[s.slot] == s
	r.mu.Unlock()
	if !current {
		s.kill(fmt.Errorf("%w: %s", errLost, why))
		return
	}
	r.lease.Drop(s.slot, s.epoch)
	r.lose(s.slot, why)
}

var errLost = errors.New("the slot is no longer owned")

// ErrStatementPooling reports a connection pooler in statement mode, which
// refuses the transactions partitionq needs.
var ErrStatementPooling = errors.New("partitionq: the database connection goes through a pooler in statement mode, which refuses transactions: connect directly, or through session or transaction mode (docs/operations.md, \"Poolers\")")

// keyWait logs a handler run of key that waits for another run of the key
// in this process to return (KeyGuard).
func (r *Runner) keyWait(key string, here, other Where) {
	r.log.Warn("partitionq: a key's event waits for another run of the key in this worker to return",
		slog.String("key", key), slog.Int64("event_id", here.EventID), slog.Int("slot", here.Slot), slog.Int("slots", here.N), slog.Int64("epoch", here.Epoch),
		slog.Int64("running_event_id", other.EventID), slog.Int("running_slot", other.Slot), slog.Int("running_slots", other.N), slog.Int64("running_epoch", other.Epoch))
}

// ownedSlots returns the owned slot runs, by slot.
func (r *Runner) ownedSlots() []*slotRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*slotRun, 0, len(r.slots))
	for _, s := range r.slots {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].slot < out[j].slot })
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// trace logs a step of the batch machinery at debug level (for a test's
// PQ_TEST_LOG, or a user's debug log), at no cost when debug is off.
func (r *Runner) trace(msg string, args ...any) {
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("partitionq: "+msg, args...)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 8000 {
		s = s[:8000] + "..."
	}
	return s
}

func (r *Runner) slotInfo(n int) parked.Slot {
	return parked.Slot{Queue: r.cfg.Queue, Group: r.cfg.Group, Consumer: r.cfg.Consumers[n], N: r.cfg.N, Generation: r.cfg.Generation, Slot: n, SubID: r.cfg.SubIDs[n]}
}
