// Package ticker makes the engine's ticks and runs its maintenance from
// inside a Go process, in place of the pgqd daemon. Several tickers may run
// at once (one per worker process): each round takes a transaction-level
// advisory lock without waiting, so one of them does the round and the
// others skip it.
package ticker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/ownership"
)

// Lock keys (second key of ownership.LockClass) of the ticker's rounds.
const (
	tickLock  = -2
	maintLock = -3
	retryLock = -4
)

// Config configures a ticker loop.
type Config struct {
	Eng           *engine.Engine
	Pool          *pgxpool.Pool
	Log           *slog.Logger
	Interval      time.Duration // between ticker() calls
	MaintInterval time.Duration // between maintenance rounds
}

// Run ticks, moves due retry events, and (every MaintInterval) runs the
// engine's maintenance, until ctx is done.
func Run(ctx context.Context, cfg Config) {
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	lastMaint := time.Time{}
	for {
		if err := Tick(ctx, cfg.Eng, cfg.Pool); err != nil && ctx.Err() == nil {
			cfg.Log.Warn("partitionq: tick failed", slog.Any("error", err))
		}
		if err := MoveRetries(ctx, cfg.Eng, cfg.Pool); err != nil && ctx.Err() == nil {
			cfg.Log.Warn("partitionq: moving retry events failed", slog.Any("error", err))
		}
		if time.Since(lastMaint) >= cfg.MaintInterval {
			if err := Maintain(ctx, cfg.Eng, cfg.Pool); err != nil && ctx.Err() == nil {
				cfg.Log.Warn("partitionq: maintenance failed", slog.Any("error", err))
			}
			lastMaint = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Tick runs the engine's ticker once for every queue, unless another
// ticker is in its round right now.
func Tick(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1, $2)`, int32(ownership.LockClass), int32(tickLock)).Scan(&got); err != nil || !got {
			return err
		}
		_, err := eng.Ticker(ctx, tx)
		return err
	})
}

// MoveRetries moves the due retry events (timed retries of the skip
// policy; parked events are never due) back into their queues, unless
// another ticker is doing it right now.
func MoveRetries(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	if due, err := eng.HasDueRetry(ctx, pool); err != nil || !due {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1, $2)`, int32(ownership.LockClass), int32(retryLock)).Scan(&got); err != nil || !got {
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

// Maintain moves due retry events back into their queues and runs the
// engine's maintenance steps (table rotation, vacuum), each step in its
// own transaction as pgqd does.
func Maintain(ctx context.Context, eng *engine.Engine, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1, $2)`, int32(ownership.LockClass), int32(maintLock)).Scan(&got); err != nil || !got {
		return err
	}
	defer conn.Exec(context.Background(), `select pg_advisory_unlock($1, $2)`, int32(ownership.LockClass), int32(maintLock)) //nolint:errcheck
	for {
		n, err := eng.MaintRetryEvents(ctx, conn)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	ops, err := eng.MaintOperations(ctx, conn)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if err := eng.RunMaintOp(ctx, conn, op); err != nil {
			return err
		}
	}
	return nil
}
