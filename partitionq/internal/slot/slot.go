// Package slot runs one slot of a consumer group: it takes the slot's
// ownership lock, reads the slot's share of each engine batch, hands the
// events to the handler (one key at a time, many keys at once), applies the
// failure policy, and finishes the batch. Under the pause policy it also
// drains the keys whose head event is parked in the engine's retry queue.
//
// The invariants, and why they hold, are in docs/failure-policy.md.
package slot

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/ownership"
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

// Handler handles one event; attempt counts from 1.
type Handler func(ctx context.Context, ev engine.Event, attempt int) Result

// Stats are counters of one slot in this process; safe for concurrent use.
type Stats struct {
	Processed    atomic.Int64 // handled successfully
	Failed       atomic.Int64 // handler failures
	Parked       atomic.Int64 // events set aside behind a blocked head
	DeadLettered atomic.Int64
	Batches      atomic.Int64
	Owned        atomic.Bool
	LastBatch    atomic.Int64 // unix nanoseconds of the last finished batch
}

// Config is one slot's runner configuration. All fields are required; the
// public package fills defaults.
type Config struct {
	Eng      *engine.Engine
	Pool     *pgxpool.Pool
	Log      *slog.Logger
	Queue    string
	Group    string
	Consumer string
	Slot, N  int
	SubID    int32

	Concurrency      int
	DrainConcurrency int // blocked keys drained at once (each holds a connection)
	Policy           Policy
	MaxAttempts      int // 0: no limit
	Backoff          func(attempt int) time.Duration
	HandlerTimeout   time.Duration // <= 0: none
	Handle           Handler

	PollInterval     time.Duration // wait between empty next_batch calls
	StandbyPoll      time.Duration // wait between ownership tries
	HeadScanInterval time.Duration // longest wait between scans of parked heads
	// MaxBlocked (pause): a head that first failed longer ago than this is
	// dead-lettered (MaxBlockedDeadLetter) or only flagged. 0: no bound.
	MaxBlocked           time.Duration
	MaxBlockedDeadLetter bool
	ChunkSize            int    // events fetched from the batch cursor at a time
	AppName              string // application_name of the owning session
	Stats                *Stats
}

// Run runs the slot until stop is done. Handlers get contexts derived from
// hard, which the caller cancels when the shutdown timeout passes. When stop
// is done, Run takes no new event; a batch whose events were not all
// resolved is left open (rolled back), so the next owner gets it again.
func Run(stop, hard context.Context, cfg Config) {
	log := cfg.Log.With(slog.Int("slot", cfg.Slot)) // the caller's logger names queue and group
	backoff := time.Duration(0)
	for stop.Err() == nil {
		owned, healthy, err := runOnce(stop, hard, cfg, log)
		if healthy { // it worked for a while: the next error starts the backoff anew
			backoff = 0
		}
		switch {
		case err == nil && !owned:
			sleep(stop, cfg.StandbyPoll)
		case err != nil && stop.Err() == nil:
			backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
			log.Warn("partitionq: slot stopped on an error; retrying", slog.Any("error", err), slog.Duration("backoff", backoff))
			sleep(stop, backoff)
		default:
			backoff = 0
		}
	}
}

// runOnce takes the slot if it is free and works it until stop or an error.
// healthy reports that it read from the engine at least once.
func runOnce(stop, hard context.Context, cfg Config, log *slog.Logger) (owned, healthy bool, err error) {
	conn, err := cfg.Pool.Acquire(stop)
	if err != nil {
		return false, false, err
	}
	defer func() {
		if err != nil {
			// The session may be broken or hold state: do not return it.
			conn.Conn().Close(context.Background()) //nolint:errcheck
		}
		conn.Release()
	}()
	ok, err := ownership.TryLock(stop, conn, cfg.SubID)
	if err != nil || !ok {
		return false, false, err
	}
	cfg.Stats.Owned.Store(true)
	defer cfg.Stats.Owned.Store(false)
	log.Info("partitionq: slot owned", slog.String("consumer", cfg.Consumer))
	if _, err := conn.Exec(stop, `select set_config('application_name', $1, false)`, cfg.AppName); err != nil {
		return true, false, err
	}

	r := &runner{cfg: cfg, log: log, conn: conn, stop: stop, hard: hard,
		sem: make(chan struct{}, cfg.Concurrency), drainSem: make(chan struct{}, max(1, cfg.DrainConcurrency)), wake: make(chan struct{}, 1), draining: map[string]bool{}}
	headsDone := make(chan struct{})
	headsCtx, stopHeads := context.WithCancel(stop)
	if cfg.Policy == Pause {
		go func() { defer close(headsDone); r.headLoop(headsCtx) }()
	} else {
		close(headsDone)
	}
	err = r.batchLoop()
	stopHeads()
	<-headsDone
	r.drains.Wait()
	if err == nil {
		// Release the lock and the session settings; on error the deferred
		// close above drops the session (and the lock with it).
		bg := context.Background()
		if uerr := ownership.Unlock(bg, conn, cfg.SubID); uerr != nil {
			err = uerr
		} else if _, rerr := conn.Exec(bg, `reset application_name`); rerr != nil {
			err = rerr
		}
	}
	log.Info("partitionq: slot released", slog.String("consumer", cfg.Consumer))
	return true, r.healthy.Load(), err
}

type runner struct {
	cfg        Config
	log        *slog.Logger
	conn       *pgxpool.Conn
	stop, hard context.Context
	sem        chan struct{} // in-flight handlers of this slot
	drainSem   chan struct{} // concurrent drains of blocked keys
	wake       chan struct{} // new parked heads: scan now

	healthy atomic.Bool // a next_batch call succeeded

	mu       sync.Mutex
	draining map[string]bool // keys being drained from the retry queue
	drains   sync.WaitGroup
}

// batchLoop takes batches until stop.
func (r *runner) batchLoop() error {
	for r.stop.Err() == nil {
		batch, ok, err := r.cfg.Eng.NextBatch(r.stop, r.conn, r.cfg.Queue, r.cfg.Consumer)
		if err != nil {
			if r.stop.Err() != nil {
				return nil
			}
			return fmt.Errorf("next batch: %w", err)
		}
		r.healthy.Store(true)
		if !ok {
			sleep(r.stop, r.cfg.PollInterval)
			continue
		}
		if err := r.processBatch(batch); err != nil {
			if r.stop.Err() != nil && r.hard.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// call runs the handler for one event with the slot's limits.
func (r *runner) call(ev engine.Event, attempt int) Result {
	select {
	case r.sem <- struct{}{}:
	case <-r.hard.Done():
		return Result{Err: r.hard.Err()}
	}
	defer func() { <-r.sem }()
	ctx := r.hard
	if r.cfg.HandlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.HandlerTimeout)
		defer cancel()
	}
	res := safeCall(ctx, r.cfg.Handle, ev, attempt)
	if res.Err == nil {
		r.cfg.Stats.Processed.Add(1)
	} else {
		r.cfg.Stats.Failed.Add(1)
		if ctx.Err() == context.DeadlineExceeded && r.hard.Err() == nil {
			res.Err = fmt.Errorf("handler timed out after %s: %w", r.cfg.HandlerTimeout, res.Err)
		}
		r.log.Warn("partitionq: handler failed", slog.String("key", ev.Key), slog.Int64("event_id", ev.ID),
			slog.Int("attempt", attempt), slog.Any("error", res.Err))
	}
	return res
}

func safeCall(ctx context.Context, h Handler, ev engine.Event, attempt int) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{Err: fmt.Errorf("handler panicked: %v", p)}
		}
	}()
	return h(ctx, ev, attempt)
}

// retryDelay is how long to wait before the next attempt after attempt failed.
func (r *runner) retryDelay(res Result, attempt int) time.Duration {
	if res.RetryAfter > 0 {
		return res.RetryAfter
	}
	return r.cfg.Backoff(attempt)
}

// exhausted reports whether a failure of attempt ends the event's tries.
func (r *runner) exhausted(res Result, attempt int) bool {
	return res.DeadLetter || (r.cfg.MaxAttempts > 0 && attempt >= r.cfg.MaxAttempts)
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

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// DrainConcurrency is the default number of blocked keys of one slot
// drained at once (each holds a pool connection while its head is handled).
func DrainConcurrency(concurrency int) int { return max(1, min(concurrency, 4)) }
