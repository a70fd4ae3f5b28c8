package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
)

// Generation is one generation of a group's slots (partitionq.generation):
// a slot count N over a period. A group has one, or two while a resize is
// in flight: the old one, whose slots drain to the cutover and are handed
// off one by one, and the new one (Parent set), whose slots take over at
// the cutover tick. The protocol's functions are function/resize*.sql.
type Generation struct {
	Slots  int // N
	Number int // 1 for a group's first generation
	// Parent is the N of the generation before this one (0: none),
	// ParentNumber its number, and ParentSubs its slot consumers'
	// subscriptions, whose timed retries the engine may re-deliver after
	// the cutover: this generation's reads take them.
	Parent       int
	ParentNumber int
	ParentSubs   []int32
	// Resizing is set while the resize that made this generation is in
	// flight (the parent generation still has slots).
	Resizing bool
	// Cutover is the tick this generation starts at (0 while the resize
	// waits for a tick that sees it committed; 0 for a first generation).
	Cutover   int64
	CreatedAt time.Time
	CreatedBy string // the database role that started the resize
	Actor     string
	Reason    string
}

// Generations reads a group's generations, oldest first; none for a group
// set up before version 5 (its first generation is its engine consumers),
// or without partitionq's schema at version 5 or later.
func Generations(ctx context.Context, q db.DB, queue, group string) ([]Generation, error) {
	if ok, err := readable(ctx, q); err != nil || !ok {
		return nil, err
	}
	rows, err := q.Query(ctx, `select slots, number, coalesce(parent_slots, 0), coalesce(parent_number, 0), parent_subs, resize_txid is not null,
		coalesce(cutover_tick, 0), created_at, created_by, actor, reason
		from partitionq.generation where queue = $1 and grp = $2 order by number`, queue, group)
	if err != nil {
		return nil, fmt.Errorf("read the generations of group %q: %w", group, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Generation, error) {
		var g Generation
		err := r.Scan(&g.Slots, &g.Number, &g.Parent, &g.ParentNumber, &g.ParentSubs, &g.Resizing, &g.Cutover, &g.CreatedAt, &g.CreatedBy, &g.Actor, &g.Reason)
		return g, err
	})
}

// readable reports whether the session may read partitionq.generation: a
// role without partitionq's schema (a producer) reads a group from its
// engine consumers alone, as a group before version 5.
func readable(ctx context.Context, q db.DB) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `select case when exists (select 1 from pg_namespace where nspname = 'partitionq')
		and has_schema_privilege('partitionq', 'usage') then coalesce(has_table_privilege(to_regclass('partitionq.generation'), 'select'), false)
		else false end`).Scan(&ok)
	return ok, err
}

// Signature sums up a group's generations in a word that changes whenever
// a worker must run other slots: a resize begins, reaches its cutover, or
// ends (one query, for a worker's lease renewal).
func Signature(ctx context.Context, q db.DB, queue, group string) (string, error) {
	var s string
	err := q.QueryRow(ctx, `select coalesce(string_agg(slots || ':' || coalesce(cutover_tick, 0) || ':' || (resize_txid is not null), ',' order by number), '')
		from partitionq.generation where queue = $1 and grp = $2`, queue, group).Scan(&s)
	return s, err
}

// EnsureGeneration records a group's first generation from its engine
// consumers when it has none (a group set up before version 5), with an
// ownership row per slot. For the schema's owner (setup).
func EnsureGeneration(ctx context.Context, q db.DB, engineSchema, queue, group string) error {
	if _, err := q.Exec(ctx, `select partitionq.ensure_generation($1, $2, $3)`, engineSchema, queue, group); err != nil {
		return fmt.Errorf("record the generation of group %q: %w", group, err)
	}
	return nil
}

// SQLSTATEs of the resize functions.
const (
	// CodeOldWorker: a worker of a partitionq before v0.3 (refused).
	CodeOldWorker = "PQ005"
	// CodeGroupBroken: the group's consumers do not form a group.
	CodeGroupBroken = "PQ006"
	// CodeResizing: a resize of the group is in flight already.
	CodeResizing = "PQ007"
	// CodeSameSlots: the group has that many slots already.
	CodeSameSlots = "PQ008"
	// CodePastCutover: the resize is past its cutover: it can only complete.
	CodePastCutover = "PQ009"
)

// StartResize starts a resize of a group to slots slots (partitionq.resize)
// and returns the new generation's number.
func StartResize(ctx context.Context, q db.DB, engineSchema, queue, group string, slots int, actor, reason string) (int, error) {
	var gen int
	err := q.QueryRow(ctx, `select partitionq.resize($1, $2, $3, $4, $5, $6)`, engineSchema, queue, group, slots, actor, reason).Scan(&gen)
	return gen, err
}

// AbortResize aborts a resize whose cutover has not begun
// (partitionq.resize_abort); it returns the N the group keeps.
func AbortResize(ctx context.Context, q db.DB, engineSchema, queue, group, actor, reason string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `select partitionq.resize_abort($1, $2, $3, $4, $5)`, engineSchema, queue, group, actor, reason).Scan(&n)
	return n, err
}

// Cutover returns the cutover tick of the resize in flight whose old
// generation is number parent: 0 when there is no such resize, or while no tick
// sees it committed. When the tick has just appeared, it registers the new
// slots' consumers at it (partitionq.resize_cutover, idempotent).
func Cutover(ctx context.Context, q db.DB, engineSchema, queue, group string, parent int) (int64, error) {
	var known *int64
	var resizing bool
	err := q.QueryRow(ctx, `select true, cutover_tick from partitionq.generation
		where queue = $1 and grp = $2 and parent_number = $3 and resize_txid is not null`, queue, group, parent).Scan(&resizing, &known)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the resize of group %q: %w", group, err)
	}
	if known != nil {
		return *known, nil
	}
	var tick *int64
	if err := q.QueryRow(ctx, `select partitionq.resize_cutover($1, $2, $3)`, engineSchema, queue, group).Scan(&tick); err != nil {
		return 0, fmt.Errorf("the cutover of group %q: %w", group, err)
	}
	if tick == nil {
		return 0, nil
	}
	return *tick, nil
}

// Handoff hands slot slot (of the old generation, owned at epoch) off to
// the new generation (partitionq.resize_handoff); it reports whether that
// completed the resize.
func Handoff(ctx context.Context, q db.DB, engineSchema, queue, group string, slot int, epoch int64) (bool, error) {
	var done bool
	err := q.QueryRow(ctx, `select partitionq.resize_handoff($1, $2, $3, $4, $5)`, engineSchema, queue, group, slot, epoch).Scan(&done)
	return done, err
}

// Parents returns the slots of a generation with n slots whose keys slot j
// of a generation with m slots holds some of: with slot = h mod N, a key in
// old slot i and new slot j has h = i (mod N) and h = j (mod M), which holds
// for some h exactly when i = j (mod gcd(N, M)). When M is a
// multiple of N that is one slot, j mod N.
func Parents(n, m, j int) []int {
	g := gcd(n, m)
	var out []int
	for i := j % g; i < n; i += g {
		out = append(out, i)
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// GroupGeneration is a Generation of some group.
type GroupGeneration struct {
	Queue, Group string
	Generation
}

// AllGenerations reads the generations of every group of queue (of every
// queue when it is empty), in one query (none without partitionq's schema
// at version 5 or later).
func AllGenerations(ctx context.Context, q db.DB, queue string) ([]GroupGeneration, error) {
	if ok, err := readable(ctx, q); err != nil || !ok {
		return nil, err
	}
	rows, err := q.Query(ctx, `select queue, grp, slots, number, coalesce(parent_slots, 0), coalesce(parent_number, 0), parent_subs, resize_txid is not null,
		coalesce(cutover_tick, 0), created_at, created_by, actor, reason
		from partitionq.generation where $1::text = '' or queue = $1 order by queue, grp, number`, queue)
	if err != nil {
		return nil, fmt.Errorf("read the groups' generations: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupGeneration, error) {
		var g GroupGeneration
		err := r.Scan(&g.Queue, &g.Group, &g.Slots, &g.Number, &g.Parent, &g.ParentNumber, &g.ParentSubs, &g.Resizing, &g.Cutover,
			&g.CreatedAt, &g.CreatedBy, &g.Actor, &g.Reason)
		return g, err
	})
}
