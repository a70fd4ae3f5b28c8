package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// GroupRetryHead is a RetryHead of one of several subscriptions.
type GroupRetryHead struct {
	Sub int32
	RetryHead
}

// RetryHeadsOf returns, for every key with events in the retry queue of any
// of subs (only the given key when key is not nil), its oldest event (by
// ev_id) and how many more events of the key are there: one query for a
// whole group. An event without a key counts as the key "".
func (e *Engine) RetryHeadsOf(ctx context.Context, db DB, subs []int32, key *string) ([]GroupRetryHead, error) {
	rows, err := db.Query(ctx, e.f(`
		select h.ev_owner, h.ev_id, h.ev_time, coalesce(h.ev_retry, 0), coalesce(h.ev_type, ''), coalesce(h.ev_data, ''),
		       coalesce(h.ev_extra1, ''), h.ev_extra2, h.ev_extra3, h.ev_extra4, h.ev_extra1 is null, h.ev_retry_after, k.n - 1
		  from (select ev_owner, coalesce(ev_extra1, '') as key, min(ev_id) as head, count(*) as n
		          from pgq.retry_queue
		         where ev_owner = any($1::int4[]) and ($2::text is null or coalesce(ev_extra1, '') = $2)
		         group by 1, 2) k
		  join pgq.retry_queue h on h.ev_owner = k.ev_owner and h.ev_id = k.head
		 order by h.ev_id`), subs, key)
	if err != nil {
		return nil, fmt.Errorf("read retry queue: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupRetryHead, error) {
		var h GroupRetryHead
		err := r.Scan(&h.Sub, &h.ID, &h.Time, &h.Retry, &h.Type, &h.Data, &h.Key, &h.Extra2, &h.Extra3, &h.Extra4, &h.NoKey, &h.After, &h.Waiting)
		return h, err
	})
}

// ParkedKeys returns, per subscription of subs, the keys that have parked
// events (at Far) in the retry queue: the keys that are blocked or draining.
func (e *Engine) ParkedKeys(ctx context.Context, db DB, subs []int32) (map[int32]map[string]bool, error) {
	rows, err := db.Query(ctx, e.f(`select distinct ev_owner, coalesce(ev_extra1, '') from pgq.retry_queue
		where ev_owner = any($1::int4[]) and ev_retry_after >= $2`), subs, Far)
	if err != nil {
		return nil, fmt.Errorf("read retry queue: %w", err)
	}
	out := map[int32]map[string]bool{}
	for rows.Next() {
		var s int32
		var k string
		if err := rows.Scan(&s, &k); err != nil {
			return nil, err
		}
		if out[s] == nil {
			out[s] = map[string]bool{}
		}
		out[s][k] = true
	}
	return out, rows.Err()
}

// RetryCounts counts, per subscription of subs, the rows in the retry queue
// that the engine's mover will re-deliver (time set), the parked ones (at
// Far), and the keys with parked rows.
type RetryCounts struct {
	Timed, Parked int64
	ParkedKeys    int
}

// RetryCountsOf returns RetryCounts for every subscription of subs that has rows.
func (e *Engine) RetryCountsOf(ctx context.Context, db DB, subs []int32) (map[int32]RetryCounts, error) {
	rows, err := db.Query(ctx, e.f(`select ev_owner, count(*) filter (where ev_retry_after < $2), count(*) filter (where ev_retry_after >= $2),
		count(distinct coalesce(ev_extra1, '')) filter (where ev_retry_after >= $2)
		from pgq.retry_queue where ev_owner = any($1::int4[]) group by ev_owner`), subs, Far)
	if err != nil {
		return nil, fmt.Errorf("read retry queue: %w", err)
	}
	out := map[int32]RetryCounts{}
	for rows.Next() {
		var s int32
		var c RetryCounts
		if err := rows.Scan(&s, &c.Timed, &c.Parked, &c.ParkedKeys); err != nil {
			return nil, err
		}
		out[s] = c
	}
	return out, rows.Err()
}
