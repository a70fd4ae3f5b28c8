package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The fates of an event, as partitionq.event_fate reads them from the
// engine's tables (function/event_fate.sql).
const (
	FateSetAside   = "set_aside"   // in the consumer's retry queue
	FateFinished   = "finished"    // in the event tables, before the consumer's position
	FateUnfinished = "unfinished"  // in the event tables, after the consumer's position
	FateOtherKey   = "other_key"   // an event of another key
	FateNoEvent    = "no_event"    // the queue never had it
	FateUnknown    = "unknown"     // older than the ticks the engine keeps
	FateNoConsumer = "no_consumer" // no such consumer
)

// EventFate reads what became of event evID of key for slot consumer
// consumer of queue: one of the Fate values. It reads no payload, through a
// function of the owner's, so an operator needs no right on the event
// tables.
func EventFate(ctx context.Context, db DB, engine, queue, consumer, key string, evID int64) (string, error) {
	var fate string
	err := db.QueryRow(ctx, `select partitionq.event_fate($1, $2, $3, $4, $5)`, engine, queue, consumer, key, evID).Scan(&fate)
	if err != nil {
		return "", fmt.Errorf("what became of event %d: %w", evID, err)
	}
	return fate, nil
}

// DeadLetterOfEvent returns the newest dead letter of event evID of key in
// the group, if there is one.
func DeadLetterOfEvent(ctx context.Context, db DB, queue, group, key string, evID int64) (DeadLetter, bool, error) {
	rows, err := db.Query(ctx, `select `+dlCols+` from partitionq.dead_letter
		where queue = $1 and grp = $2 and key = $3 and ev_id = $4 order by id desc limit 1`, queue, group, key, evID)
	if err != nil {
		return DeadLetter{}, false, fmt.Errorf("dead letter of event %d: %w", evID, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDL)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, false, nil
	}
	if err != nil {
		return DeadLetter{}, false, fmt.Errorf("dead letter of event %d: %w", evID, err)
	}
	return d, true, nil
}
