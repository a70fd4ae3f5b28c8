// Package ticker makes the engine's ticks and runs its maintenance from
// inside a Go process, in place of the pgqd daemon, and announces every tick
// it makes (engine.TickAndAnnounce) so that waiting workers wake at once.
// Several tickers may run at once (one per worker process): each round
// takes its turn, a row of partitionq.ticker_turn, without waiting, so one
// of them does the round and the others skip it. Only roles granted update
// on that table can take a turn (an advisory lock could be held by any role
// that may connect, and would stop every ticker); without partitionq's
// schema every ticker does every round (harmless: the engine decides whether
// a queue gets a tick).
package ticker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// The turns of the ticker's rounds (rows of partitionq.ticker_turn).
const (
	tickTurn      = "tick"
	retryTurn     = "retry"
	maintTurnName = "maint"
)

// turn takes the turn name for the rest of tx without waiting; it reports
// whether this ticker has it. Without partitionq's schema every ticker has
// every turn.
func turn(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `select to_regclass('partitionq.ticker_turn') is not null`).Scan(&exists); err != nil || !exists {
		return err == nil, err
	}
	rows, err := tx.Query(ctx, `select 1 from partitionq.ticker_turn where name = $1 for update skip locked`, name)
	if err != nil {
		return false, err
	}
	got := rows.Next()
	rows.Close()
	return got, rows.Err()
}

// Config configures a ticker loop.
type Config struct {
	Eng           *engine.Engine
	Pool          *pgxpool.Pool
	Log           *slog.Logger
	Interval      time.Duration // between ticker() calls
	MaintInterval time.Duration // between maintenance rounds
}

// RightsError: the role may not run the ticker (the engine's ticker and
// maintenance functions are its admin's, the turns partitionq's owner's).
type RightsError struct {
	Missing string // what it lacks
	Err     error  // the server's refusal, when the ticker found it so
}

func (e *RightsError) Error() string {
	s := "this role may not run the engine's ticker (it lacks " + e.Missing + ")"
	if e.Err != nil {
		s = fmt.Sprintf("this role may not run the engine's ticker: %v", e.Err)
	}
	return s + ": run the ticker as the owner (partitionq tick, or pgqd), and the workers without WorkerConfig.Ticker (--ticker)"
}

func (e *RightsError) Unwrap() error { return e.Err }

// CheckRights fails with a *RightsError when the session's role may not
// run the ticker: a worker asked to tick refuses to start rather than
// fail every round.
func CheckRights(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	missing, err := eng.TickRights(ctx, pool)
	if err != nil {
		return err
	}
	if missing != "" {
		return &RightsError{Missing: missing}
	}
	return nil
}

// Run ticks and moves due retry events, counts the new ticks by slot (the
// census, at most every CensusEvery), and, every MaintInterval, runs the
// engine's maintenance and removes expired dedup records, until ctx is
// done. Maintenance runs beside the ticks, never in their way: a round
// that waits (a lock an operator holds, a long vacuum) holds up no tick.
// While a removal finds a full batch of expired records, another batch is
// removed every Interval (bounded work, so no round is long). A round
// refused for want of a right (the role's rights were taken away while it
// ran) stops the ticker, with one error in the log naming the fix, rather
// than fail every round.
func Run(ctx context.Context, cfg Config) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	failed := func(what string, err error) bool {
		if err == nil || ctx.Err() != nil {
			return false
		}
		if db.IsInsufficientPrivilege(err) {
			cfg.Log.Error("partitionq: the ticker stops", slog.Any("error", &RightsError{Err: err}))
			cancel()
			return true
		}
		cfg.Log.Warn("partitionq: "+what+" failed", slog.Any("error", err))
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		maintLoop(ctx, cfg, failed)
	}()
	ticked := make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		censusLoop(ctx, cfg, ticked, failed)
	}()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		made, err := tickRound(ctx, cfg.Eng, cfg.Pool)
		if failed("tick", err) || failed("moving retry events", MoveRetries(ctx, cfg.Eng, cfg.Pool)) {
			return
		}
		if made > 0 {
			select {
			case ticked <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// censusLoop counts the new ticks' events by slot (the census) at once,
// then after ticks are made, at most every CensusEvery, and again at once
// while a round finds more than its budget. It runs beside the ticks: a
// round takes longer the more ticks it counts (tens of milliseconds at N =
// 256), and ticks must not wait for it.
func censusLoop(ctx context.Context, cfg Config, ticked <-chan struct{}, failed func(string, error) bool) {
	behind := true // the census may be behind when the ticker starts
	for {
		if !behind {
			select {
			case <-ctx.Done():
				return
			case <-ticked:
			}
		}
		start := time.Now()
		n, err := Census(ctx, cfg.Eng, cfg.Pool)
		if failed("counting the new ticks' events by slot", err) {
			return
		}
		behind = err == nil && n >= CensusBudget
		if !behind {
			sleep(ctx, CensusEvery-time.Since(start))
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// maintRetry is how soon a maintenance round that failed is tried again
// (at most MaintInterval).
const maintRetry = 5 * time.Second

// maintLoop runs a maintenance round at once and every cfg.MaintInterval
// after, and between rounds removes expired dedup records one batch per
// cfg.Interval while the last removal found a full batch.
func maintLoop(ctx context.Context, cfg Config, failed func(string, error) bool) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var next time.Time // the next maintenance round
	dedupBehind := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !time.Now().Before(next) {
			expired, err := maintain(ctx, cfg.Eng, cfg.Pool)
			if failed("maintenance", err) {
				return
			}
			if err != nil {
				next = time.Now().Add(min(cfg.MaintInterval, maintRetry))
			} else {
				next = time.Now().Add(cfg.MaintInterval)
			}
			dedupBehind = err == nil && expired == store.ExpireDedupBatch
		} else if dedupBehind {
			n, err := ExpireDedup(ctx, cfg.Pool)
			if failed("removing expired dedup records", err) {
				return
			}
			dedupBehind = err == nil && n == store.ExpireDedupBatch
		}
		wait := time.Until(next)
		if dedupBehind {
			wait = min(wait, cfg.Interval)
		}
		timer.Reset(max(wait, 0))
	}
}

// Tick runs the engine's ticker once for every queue, unless another
// ticker is in its round right now.
func Tick(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	_, err := tickRound(ctx, eng, pool)
	return err
}

// tickRound is Tick, returning how many ticks it made.
func tickRound(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) (int64, error) {
	var made int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if got, err := turn(ctx, tx, tickTurn); err != nil || !got {
			return err
		}
		var err error
		made, err = eng.TickAndAnnounce(ctx, tx)
		return err
	})
	return made, err
}

// CensusEvery is how often, at most, the ticker counts its new ticks'
// events by slot (the census, which status reads) while it makes ticks: a
// round costs some fixed reads of every group of the database whatever the
// ticks it counts, and at short tick intervals a round after every tick
// took a fifth of a small server's CPU. Status counts what the census has
// not (one bounded scan), so it stays exact.
const CensusEvery = 250 * time.Millisecond

// CensusBudget is about how many events one census round counts (the
// rest in the next rounds): a tick round stays short however large the
// backlog a new census starts on.
const CensusBudget = 200_000

// Census brings the census of every queue's groups (partitionq's count of
// each tick range's events by slot, what status reads) up to the newest
// ticks, about CensusBudget events at most; it returns the events counted.
// Nothing without partitionq's schema (of version 7 or later).
func Census(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) (int64, error) {
	var ok bool // (a schema older than the census: nothing to keep)
	if err := pool.QueryRow(ctx, `select to_regprocedure('partitionq.census_all(text,bigint)') is not null`).Scan(&ok); err != nil || !ok {
		return 0, err
	}
	return store.CensusAll(ctx, pool, eng.Schema(), CensusBudget)
}

// MoveRetries moves the due retry events (timed retries of the skip
// policy; parked events are never due) back into their queues, unless
// another ticker is doing it right now.
func MoveRetries(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	if due, err := eng.HasDueRetry(ctx, pool); err != nil || !due {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if got, err := turn(ctx, tx, retryTurn); err != nil || !got {
			return err
		}
		// A lock held elsewhere holds up no tick for long: the round
		// fails and the next one tries again.
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", maintLockTimeout.Milliseconds())); err != nil {
			return err
		}
		for {
			n, err := eng.MaintRetryEvents(ctx, tx)
			if err != nil || n == 0 {
				return err
			}
		}
	})
}

// ExpireDedup removes up to store.ExpireDedupBatch expired dedup records
// (one bounded statement, partitionq.expire_dedup) and returns how many.
// Without partitionq's schema, or at a version without dedup records, it
// does nothing. Several tickers may run it at once: each skips the rows
// another holds.
func ExpireDedup(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	return expireDedup(ctx, pool)
}

func expireDedup(ctx context.Context, db engine.DB) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, `select to_regproc('partitionq.expire_dedup') is not null`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	return store.ExpireDedup(ctx, db, store.ExpireDedupBatch)
}

// Maintain moves due retry events back into their queues, runs the
// engine's maintenance steps (table rotation, vacuum), each step in its
// own transaction as pgqd does, and removes up to store.ExpireDedupBatch
// expired dedup records (bounded work: Run removes more in the rounds
// after while a removal finds a full batch). It does nothing while another
// ticker's round holds the maintenance turn.
func Maintain(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	_, err := maintain(ctx, eng, pool)
	return err
}

// maintLease bounds how long a maintenance turn outlives a round that
// cannot give it back (its process killed): each step of a round renews
// it first, so a round keeps its turn however many steps it has, and a
// dead one holds it up to maintLease. (A single step longer than that may
// see a second round start beside it: harmless, the engine's maintenance
// functions lock what they change, but wasted work.)
var maintLease = time.Minute

// maintLockTimeout bounds how long a maintenance step waits for a lock
// (a table an operator or a long transaction holds): then the round ends
// with an error and is tried again. A vacuum never waits: it skips a
// table it cannot lock at once (vacuum (skip_locked)).
const maintLockTimeout = 5 * time.Second

// errTurnLost: the round's turn ran out and another ticker's round took it.
var errTurnLost = errors.New("the maintenance turn ran out and another ticker's round took it: this round stops")

// maintain is Maintain; it returns how many dedup records it removed.
func maintain(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) (expired int, err error) {
	// The round's steps run in transactions of their own (as pgqd runs
	// them), so its turn is a lease on the row, renewed before each step,
	// rather than a row lock.
	// Without partitionq's schema there are no turns: every ticker has it.
	holder := fmt.Sprintf("%d", time.Now().UnixNano())
	var turns bool
	if err := pool.QueryRow(ctx, `select to_regclass('partitionq.ticker_turn') is not null`).Scan(&turns); err != nil {
		return 0, err
	}
	if turns {
		got, err := maintTurn(ctx, pool, holder, false)
		if err != nil || !got {
			return 0, err
		}
		defer func() {
			// Given back on a connection of its own: the round's may be the
			// reason it failed (its session ended).
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			pool.Exec(rctx, `update partitionq.ticker_turn set holder = null, until = null where name = $1 and holder = $2`, maintTurnName, holder) // the lease runs out
		}()
	}
	renew := func() error {
		if !turns {
			return nil
		}
		got, err := maintTurn(ctx, pool, holder, true)
		if err == nil && !got {
			err = errTurnLost
		}
		return err
	}
	step := func(what string, f func(tx pgx.Tx) error) error {
		if err := renew(); err != nil {
			return err
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", maintLockTimeout.Milliseconds())); err != nil {
				return err
			}
			return f(tx)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	for more := true; more; {
		if err := step("moving retry events back", func(tx pgx.Tx) error {
			n, err := eng.MaintRetryEvents(ctx, tx)
			more = n > 0
			return err
		}); err != nil {
			return 0, err
		}
	}
	var ops []engine.MaintOp
	if err := step("listing the maintenance steps", func(tx pgx.Tx) error {
		var err error
		ops, err = eng.MaintOperations(ctx, tx)
		return err
	}); err != nil {
		return 0, err
	}
	for _, op := range ops {
		what := "maintenance step " + op.Func
		if op.Func == "vacuum" {
			// vacuum runs outside a transaction; it waits for no lock.
			if err := renew(); err != nil {
				return 0, err
			}
			if err := eng.RunMaintOp(ctx, pool, op); err != nil {
				return 0, fmt.Errorf("%s: %w", what, err)
			}
			continue
		}
		if err := step(what, func(tx pgx.Tx) error { return eng.RunMaintOp(ctx, tx, op) }); err != nil {
			return 0, err
		}
	}
	if err := step("removing expired dedup records", func(tx pgx.Tx) error {
		var err error
		expired, err = expireDedup(ctx, tx)
		return err
	}); err != nil {
		return 0, err
	}
	return expired, nil
}

// maintTurn takes the maintenance turn as holder unless another ticker's
// round holds it (and its lease has not run out), or, renew set, renews
// holder's lease; it reports whether holder has the turn.
func maintTurn(ctx context.Context, pool *pgxpool.Pool, holder string, renew bool) (bool, error) {
	cond := `(until is null or until < clock_timestamp())`
	if renew {
		cond = `holder = $2`
	}
	tag, err := pool.Exec(ctx, `update partitionq.ticker_turn set holder = $2, until = clock_timestamp() + $3::interval
		where name = $1 and `+cond, maintTurnName, holder, maintLease)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
