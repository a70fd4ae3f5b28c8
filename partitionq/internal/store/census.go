package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Census counts the tick ranges of queue not counted yet for groups of n
// slots, until about budget events (partitionq.census, function/census.sql): the
// events counted, or -1 when another session is counting.
func Census(ctx context.Context, db DB, engine, queue string, n int, budget int64) (int64, error) {
	var done int64
	if err := db.QueryRow(ctx, `select partitionq.census($1, $2, $3, $4)`, engine, queue, n, budget).Scan(&done); err != nil {
		return 0, fmt.Errorf("count the events of queue %q by slot: %w", queue, err)
	}
	return done, nil
}

// CensusAll runs the census of every queue and number of slots of the
// database's groups, each until about budget events (the ticker's).
func CensusAll(ctx context.Context, db DB, engine string, budget int64) (int64, error) {
	var done int64
	if err := db.QueryRow(ctx, `select partitionq.census_all($1, $2)`, engine, budget).Scan(&done); err != nil {
		return 0, fmt.Errorf("count the events of every queue by slot: %w", err)
	}
	return done, nil
}

// BacklogSpec is the recorded progress of a group's open batches, per
// slot: the batch it is of (0: none), its watermark, and the resolved ids
// above it (DoneSlots[i] is the slot of DoneIDs[i]).
type BacklogSpec struct {
	Batch, Below       []int64
	DoneSlots          []int32
	DoneIDs            []int64
	Budget             int64 // at most this many events read after the census's newest tick
	Engine, Queue, Grp string
	N                  int // the generation's number of slots (its slots without a consumer count nothing)
}

// SlotBacklog is one slot's unfinished events in the stream.
type SlotBacklog struct {
	// Pending counts them; PendingMax equals it when the count is exact,
	// else it bounds it from above (the read after the census stopped at
	// its budget).
	Pending, PendingMax int64
	// Oldest is the age of the oldest of them; 0 when none.
	Oldest time.Duration
}

// GroupBacklog reads every slot's pending events of a group's generation
// of spec.N slots (partitionq.group_backlog, function/group_backlog.sql), by slot.
func GroupBacklog(ctx context.Context, db DB, spec BacklogSpec) ([]SlotBacklog, error) {
	rows, err := db.Query(ctx, `select slot, pending, pending_max, coalesce(oldest, '0') from partitionq.group_backlog($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		spec.Engine, spec.Queue, spec.Grp, spec.N, spec.Batch, spec.Below, spec.DoneSlots, spec.DoneIDs, spec.Budget)
	if err != nil {
		return nil, fmt.Errorf("backlog of group %q: %w", spec.Grp, err)
	}
	type row struct {
		slot int
		b    SlotBacklog
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.slot, &x.b.Pending, &x.b.PendingMax, &x.b.Oldest)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("backlog of group %q: %w", spec.Grp, err)
	}
	out := make([]SlotBacklog, spec.N)
	for _, x := range got {
		if x.slot >= 0 && x.slot < len(out) {
			out[x.slot] = x.b
		}
	}
	return out, nil
}

// KeyRow is one row of partitionq.group_keys.
type KeyRow struct {
	Kind    string // "key", "oldest", "meta"
	Slot    int
	Key     string
	Pending int64
	Err     int64
	Oldest  time.Duration
}

// GroupKeys reads the keys of a group's generation of n slots with the
// most pending events and the key of each slot's oldest one
// (partitionq.group_keys, function/group_keys.sql).
func GroupKeys(ctx context.Context, db DB, engine, queue, group string, n, top int, total, exactMax, sample, window int64) ([]KeyRow, error) {
	rows, err := db.Query(ctx, `select kind, coalesce(slot, -1), coalesce(key, ''), coalesce(pending, 0), coalesce(err, 0), coalesce(oldest, '0')
		from partitionq.group_keys($1, $2, $3, $4, $5, $6, $7, $8, $9)`, engine, queue, group, n, top, total, exactMax, sample, window)
	if err != nil {
		return nil, fmt.Errorf("the keys of group %q: %w", group, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyRow, error) {
		var k KeyRow
		err := r.Scan(&k.Kind, &k.Slot, &k.Key, &k.Pending, &k.Err, &k.Oldest)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("the keys of group %q: %w", group, err)
	}
	return out, nil
}
