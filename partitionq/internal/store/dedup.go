package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/db"
)

// Dedup records (migration/0006_dedup.sql, function/dedup_*.sql): one row
// of partitionq.dedup per (queue, dedup id) sent within its window. Every
// role but the owner writes them only through two SECURITY DEFINER
// functions, in the sending transaction:
//
//   - dedup_claim: the send claims its ids before it inserts anything; an
//     id with a live record is a duplicate (the record's event and key are
//     returned, and its hits counted); a concurrent claim of the same id
//     waits for this transaction's outcome (the primary key);
//   - dedup_record: once the events are inserted, the send records each
//     claimed id's event, which must have been inserted by the same
//     transaction with the claim's key.
//
// expire_dedup removes expired records in bounded work (ExpireDedup).

// Limits of dedup records, checked again by dedup_claim.
const (
	// DedupWindowDefault is a queue's dedup window when none was set.
	DedupWindowDefault = time.Hour
	// MaxDedupWindow is the longest dedup window.
	MaxDedupWindow = 7 * 24 * time.Hour
	// MinDedupWindow is the shortest dedup window.
	MinDedupWindow = time.Millisecond
	// MaxDedupIDLen is the longest dedup id, in bytes.
	MaxDedupIDLen = 512
	// ExpireDedupBatch is how many expired records one ExpireDedup call
	// deletes at most.
	ExpireDedupBatch = 5000
)

// DedupClaim is one dedup id a send claims.
type DedupClaim struct {
	ID     string
	Key    string        // the key of the message that carries it
	Count  int           // how many messages of the send carry it (1 or more)
	Window time.Duration // 0: the queue's
}

// DedupOutcome is what a claim found.
type DedupOutcome struct {
	// Claimed: the send owns the id now; it inserts the event and records
	// it (RecordDedup) in the same transaction.
	Claimed bool
	// EvID and Key, when not Claimed: the event first sent with the id and
	// its key.
	EvID int64
	Key  string
}

// ErrClaimRace reports that a claim's plain insert met a dedup id that has
// a record, or that a concurrent send committed meanwhile
// (unique_violation): the claim's transaction (or savepoint) is aborted;
// send again with upsert set.
var ErrClaimRace = errors.New("a dedup id has a record: claim again with upsert")

// ClaimDedup claims the dedup ids of claims (distinct) for a send to queue
// through partitionq.dedup_claim, in the transaction db runs in, and
// returns the outcome per id. Give the ids in a fixed order (sorted) so
// that two sends claiming the same ids take their locks in the same order.
// Without upsert the ids are inserted plainly (the fast path, for large
// batches of new ids), which fails with ErrClaimRace when one of them has
// a record or a concurrent send commits one meanwhile; with upsert, the
// claim takes the INSERT ... ON CONFLICT path whatever it finds.
func ClaimDedup(ctx context.Context, db DB, queue string, claims []DedupClaim, upsert bool) (map[string]DedupOutcome, error) {
	n := len(claims)
	ids, keys := make([]string, n), make([]string, n)
	counts, windows := make([]int32, n), make([]*int64, n)
	for i, c := range claims {
		ids[i], keys[i], counts[i] = c.ID, c.Key, int32(c.Count)
		if c.Window != 0 {
			us := c.Window.Microseconds()
			windows[i] = &us
		}
	}
	rows, err := db.Query(ctx, `select * from partitionq.dedup_claim($1, $2, $3, $4, $5, $6)`, queue, ids, keys, counts, windows, upsert)
	if err != nil {
		return nil, claimError(n, err)
	}
	defer rows.Close()
	out := make(map[string]DedupOutcome, n)
	for rows.Next() {
		var id string
		var o DedupOutcome
		var evID *int64
		if err := rows.Scan(&id, &o.Claimed, &evID, &o.Key); err != nil {
			return nil, err
		}
		if evID != nil {
			o.EvID = *evID
		}
		out[id] = o
	}
	if err := rows.Err(); err != nil {
		return nil, claimError(n, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("claim %d dedup ids: %d outcomes", n, len(out))
	}
	return out, nil
}

func claimError(n int, err error) error {
	if db.Code(err) == db.CodeUniqueViolation {
		return fmt.Errorf("claim %d dedup ids: %w (%w)", n, ErrClaimRace, err)
	}
	return fmt.Errorf("claim %d dedup ids: %w", n, err)
}

// RecordDedup records, through partitionq.dedup_record, that the claimed
// dedup ids ids[i] were sent as events evIDs[i], which the transaction db
// runs in inserted into queue (engine schema engineSchema).
func RecordDedup(ctx context.Context, db DB, engineSchema, queue string, ids []string, evIDs []int64) error {
	if len(ids) == 0 {
		return nil
	}
	var n int
	if err := db.QueryRow(ctx, `select partitionq.dedup_record($1, $2, $3, $4)`, engineSchema, queue, ids, evIDs).Scan(&n); err != nil {
		return fmt.Errorf("record %d dedup ids: %w", len(ids), err)
	}
	if n != len(ids) {
		return fmt.Errorf("record %d dedup ids: %d recorded", len(ids), n)
	}
	return nil
}

// ExpireDedup deletes up to limit expired dedup records (oldest first,
// skipping rows a send holds) through partitionq.expire_dedup, and returns
// how many it deleted: while that is limit, more may be due.
func ExpireDedup(ctx context.Context, db DB, limit int) (int, error) {
	var n int
	if err := db.QueryRow(ctx, `select partitionq.expire_dedup($1)`, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("expire dedup records: %w", err)
	}
	return n, nil
}

// SetDedupWindow sets queue's dedup window (the schema owner's write).
func SetDedupWindow(ctx context.Context, db DB, queue string, w time.Duration) error {
	_, err := db.Exec(ctx, `insert into partitionq.queue_config (queue, dedup_window) values ($1, $2 * interval '1 microsecond')
		on conflict (queue) do update set dedup_window = excluded.dedup_window`, queue, w.Microseconds())
	if err != nil {
		return fmt.Errorf("set the dedup window of queue %q: %w", queue, err)
	}
	return nil
}

// DedupWindow returns queue's dedup window (DedupWindowDefault when none
// was set).
func DedupWindow(ctx context.Context, db DB, queue string) (time.Duration, error) {
	var us int64
	err := db.QueryRow(ctx, `select coalesce((select (extract(epoch from dedup_window) * 1000000)::bigint
		from partitionq.queue_config where queue = $1), $2)`, queue, DedupWindowDefault.Microseconds()).Scan(&us)
	if err != nil {
		return 0, fmt.Errorf("read the dedup window of queue %q: %w", queue, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// DedupHit is a dedup record that refused duplicates.
type DedupHit struct {
	DedupID   string
	EvID      int64
	Hits      int64
	SentAt    time.Time
	LastHitAt time.Time
	ExpiresAt time.Time
}

// DedupHits returns the dedup records of key in queue that refused
// duplicates, the most recent hit first, at most limit, with the number of
// duplicates all of them refused.
func DedupHits(ctx context.Context, db DB, queue, key string, limit int) (hits []DedupHit, total int64, err error) {
	rows, err := db.Query(ctx, `select dedup_id, coalesce(ev_id, 0), hits, sent_at, last_hit_at, expires_at, (sum(hits) over ())::bigint
		from partitionq.dedup where queue = $1 and key = $2 and hits > 0
		order by last_hit_at desc, dedup_id limit $3`, queue, key, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read dedup hits: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var h DedupHit
		if err := rows.Scan(&h.DedupID, &h.EvID, &h.Hits, &h.SentAt, &h.LastHitAt, &h.ExpiresAt, &total); err != nil {
			return nil, 0, err
		}
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read dedup hits: %w", err)
	}
	return hits, total, nil
}
