package partitionq

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// TickStatus is a queue's newest tick, and whether events wait for one.
type TickStatus struct {
	// Age is how old the queue's newest tick is; -1 when it has none.
	Age time.Duration
	// Unticked counts the events sent after the newest tick (from the
	// queue's event sequence: those not committed yet, or rolled back,
	// count too): no slot can read them before the next tick.
	Unticked int64
	// Stalled is set when events wait (Unticked > 0) and no tick has come
	// for StallAfter: nothing makes ticks. Run a ticker: partitionq tick
	// (Client.RunTicker) as the owner, workers with a Ticker (--ticker),
	// or pgqd; Fix says so in a line.
	Stalled bool
	// StallAfter is the bound Stalled uses for this queue: three times its
	// ticker_max_lag (the longest a running ticker lets a waiting event go
	// without a tick), and at least 2 seconds.
	StallAfter time.Duration
}

// Fix says what to do about a queue that gets no ticks, in a line for a
// person (a status, a console, a log), as ValidationError.Fix says what to
// do instead: "run a ticker: ...", with the partitionq command's words. It
// is the advice for a Stalled queue, and for one a caller finds idle
// without ticks by its own signs (slots whose lag only grows); whether to
// give it is the caller's call.
func (t TickStatus) Fix() string {
	return "run a ticker: partitionq tick (as the owner), the workers with --ticker, or pgqd"
}

// tickStallAfter is how long a queue may go without a tick while events
// wait before it counts as getting none (TickStatus.StallAfter).
func tickStallAfter(maxLag time.Duration) time.Duration { return max(2*time.Second, 3*maxLag) }

func tickStatus(ts engine.TickState) TickStatus {
	st := TickStatus{Age: ts.Age, Unticked: ts.Unticked, StallAfter: tickStallAfter(ts.MaxLag)}
	if !ts.HasTick {
		st.Age = -1
	}
	st.Stalled = st.Unticked > 0 && (!ts.HasTick || ts.Age > st.StallAfter)
	return st
}

// watchTicks warns in the worker's log, once each time it happens, when
// events wait in the queue and no tick has come for tickStallAfter: a
// worker with nothing making ticks handles nothing, and would say nothing.
// One cheap query (the queue's newest tick) every few seconds.
func (w *Worker) watchTicks(ctx context.Context, pool *pgxpool.Pool) {
	every := min(max(time.Second, 10*w.cfg.Limits.PollInterval), 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	stalled := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, every)
		ts, err := w.c.eng.TickState(qctx, pool, w.cfg.Queue)
		cancel()
		if err != nil {
			continue // the worker's other loops say what is wrong with the database
		}
		st := tickStatus(ts)
		switch {
		case st.Stalled && !stalled:
			age := "ever"
			if st.Age >= 0 {
				age = st.Age.Round(time.Second).String()
			}
			w.log.Warn("partitionq: no tick for "+age+" while events wait in the queue: no slot can read them; "+st.Fix(),
				slog.Int64("events_waiting", st.Unticked), slog.Duration("stall_after", st.StallAfter))
		case !st.Stalled && stalled:
			w.log.Info("partitionq: ticks arrive again")
		}
		stalled = st.Stalled
	}
}
