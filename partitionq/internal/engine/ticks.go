package engine

import (
	"context"
	"fmt"
	"time"
)

// TickState is a queue's newest tick and what was sent after it.
type TickState struct {
	// HasTick is false when the queue has no tick at all.
	HasTick bool
	// Age is how old the newest tick is (by the server's clock).
	Age time.Duration
	// Unticked counts the ids the queue's event sequence handed out after
	// the newest tick: events sent since (some perhaps not committed yet,
	// or rolled back), which no consumer can read before the next tick.
	Unticked int64
	// MaxLag is the queue's ticker_max_lag: a running ticker makes a tick
	// within it while events wait.
	MaxLag time.Duration
}

// TickState reads the queue's newest tick and how many events were sent
// after it: one query, on the engine's catalog and the queue's event
// sequence (both readable by every role).
func (e *Engine) TickState(ctx context.Context, db DB, queue string) (TickState, error) {
	var ts TickState
	err := db.QueryRow(ctx, e.f(`
		select t.tick_id is not null, coalesce(now() - t.tick_time, '0'),
		       greatest(coalesce(pg_sequence_last_value(q.queue_event_seq::regclass), 0) - coalesce(`+tickSeq("t")+`, 0), 0),
		       q.queue_ticker_max_lag
		  from pgq.queue q
		  left join lateral (select tick_id, tick_time, tick_event_seq from pgq.tick
		                      where tick_queue = q.queue_id order by tick_id desc limit 1) t on true
		 where q.queue_name = $1`), queue).Scan(&ts.HasTick, &ts.Age, &ts.Unticked, &ts.MaxLag)
	if err != nil {
		return TickState{}, fmt.Errorf("the ticks of queue %q: %w", queue, err)
	}
	return ts, nil
}

// TickRights reports whether the session's role may run the engine's
// ticker and maintenance (its ticker and maintenance functions are the
// engine admin's); "" when it may, else what it lacks.
func (e *Engine) TickRights(ctx context.Context, db DB) (string, error) {
	var missing string
	err := db.QueryRow(ctx, e.f(`
		select concat_ws(', ',
		    case when not has_function_privilege('pgq.ticker()', 'execute') then 'execute on pgq.ticker()' end,
		    case when not has_function_privilege('pgq.maint_retry_events()', 'execute') then 'execute on pgq.maint_retry_events()' end,
		    case when not has_function_privilege('pgq.maint_operations()', 'execute') then 'execute on pgq.maint_operations()' end,
		    case when to_regclass('partitionq.ticker_turn') is not null
		          and not has_table_privilege('partitionq.ticker_turn', 'update') then 'update on partitionq.ticker_turn' end,
		    case when to_regprocedure('partitionq.census_all(text,bigint)') is not null
		          and not has_function_privilege('partitionq.census_all(text,bigint)', 'execute') then 'execute on partitionq.census_all' end)`)).Scan(&missing)
	if err != nil {
		return "", fmt.Errorf("check the ticker's rights: %w", err)
	}
	return missing, nil
}

// tickSeq is the queue's event sequence at tick t, as the engine's
// tick_event_seq gives it, except for the queue's first tick (tick 1, made
// by create_queue before any event): the engine records 1 there, the
// sequence's start, though no id was handed out yet.
func tickSeq(t string) string {
	return "case when " + t + ".tick_id = 1 then 0 else " + t + ".tick_event_seq end"
}
