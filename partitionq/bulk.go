package partitionq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// BulkMaxDefault is BulkRequest.Max's default: how many dead letters one
// bulk replay or purge acts on at most (a program that offers the limit,
// as the CLI's --max does, shows it as the default).
const BulkMaxDefault = 10000

// ErrTooMany reports that a bulk replay or purge matched more dead letters
// than its limit (BulkRequest.Max); nothing was changed.
var ErrTooMany = errors.New("too many dead letters match")

// BulkRequest selects dead letters of one group for a bulk replay or purge.
type BulkRequest struct {
	// Match selects the dead letters: its Queue and Group, and any of its
	// filters (Key, Type, Error, Reason, DeadAfter, DeadBefore, IDs,
	// Pending). AfterID, Limit and Newest are ignored.
	Match DeadLetterQuery
	// All must be set to act on every dead letter of the group when Match
	// has no filter: an empty filter is refused otherwise, so that a
	// forgotten flag never replays or purges a whole group.
	All bool
	// DryRun changes nothing: the result lists what would be done.
	DryRun bool
	// Max is the most dead letters the call acts on; when more match it
	// fails with ErrTooMany and changes nothing. Defaults to BulkMaxDefault.
	Max    int
	Reason string
	Actor  string
}

// BulkItem is one dead letter of a bulk replay or purge.
type BulkItem struct {
	ID      int64 // the dead letter
	EventID int64 // its original event
	Key     string
	Type    string
	// Outcome: OutcomeReplayed or OutcomeAlreadyReplayed for a replay
	// (what it would be, on a dry run); OutcomePurged for a purge.
	Outcome    Outcome
	NewEventID int64 // replay: the event id of the replay (0 on a dry run of a new one)
}

// BulkResult says what a bulk replay or purge did (or, with DryRun, would do).
type BulkResult struct {
	DryRun bool
	// Count is how many dead letters were replayed (not counting those
	// already replayed) or purged.
	Count int
	// AlreadyReplayed counts, for a replay, those selected that had been
	// replayed before: they are left as they are.
	AlreadyReplayed int
	// Items lists every dead letter selected, in event order (ev_id).
	Items []BulkItem
	// Unmatched lists the ids of Match.IDs that were not selected: no such
	// dead letter in the group, or one another filter excludes.
	Unmatched []int64
	// AuditID is the audit entry recording the action (0 on a dry run); an
	// action that matched nothing is recorded too, with its count of 0.
	AuditID int64
}

// ReplayMatching sends again, in one transaction, every dead letter that
// r.Match selects, in the order of their original events (ev_id): several
// dead letters of one key replay in their original order, at the tail of
// the key. Dead letters replayed before are left as they are (counted in
// AlreadyReplayed). The audit trail records one "replay" action with the
// count and the filter. On any error nothing is sent and nothing is marked.
// ctx governs the transaction.
func (c *Client) ReplayMatching(ctx context.Context, r BulkRequest) (BulkResult, error) {
	return c.bulk(ctx, r, AuditReplay, func(ctx context.Context, tx pgx.Tx, dls []store.DeadLetter, res *BulkResult) error {
		var evs []engine.NewEvent
		var fresh []int
		for i, d := range dls {
			if d.ReplayedAt != nil && d.ReplayEvID != nil {
				res.Items[i].Outcome, res.Items[i].NewEventID = OutcomeAlreadyReplayed, *d.ReplayEvID
				res.AlreadyReplayed++
				continue
			}
			res.Items[i].Outcome = OutcomeReplayed
			evs = append(evs, engine.NewEvent{Key: d.Key, Type: d.Type, Data: d.Data})
			fresh = append(fresh, i)
		}
		res.Count = len(fresh)
		if tx == nil {
			return nil
		}
		if len(evs) == 0 { // nothing to send: the audit entry says so
			var err error
			res.AuditID, err = store.RecordReplay(ctx, tx, c.eng.Schema(), r.Match.Queue, r.Match.Group, []int64{}, []int64{},
				r.Reason, c.actor(r.Actor), bulkNote(*res, r.Match))
			return err
		}
		if _, ok, err := c.eng.QueueID(ctx, tx, r.Match.Queue); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w %q: its dead letters cannot be replayed into it: create the queue again (partitionq setup) to replay them", ErrNoSuchQueue, r.Match.Queue)
		}
		ids, err := c.eng.InsertMany(ctx, tx, r.Match.Queue, evs)
		if err != nil {
			return err
		}
		dlIDs := make([]int64, len(fresh))
		for j, i := range fresh {
			dlIDs[j] = dls[i].ID
			res.Items[i].NewEventID = ids[j]
		}
		// Checks each replay's event, marks the dead letters and writes the
		// one audit entry; a dead letter a concurrent replay marked first
		// fails it (PQ004) and nothing is sent.
		res.AuditID, err = store.RecordReplay(ctx, tx, c.eng.Schema(), r.Match.Queue, r.Match.Group, dlIDs, ids,
			r.Reason, c.actor(r.Actor), bulkNote(*res, r.Match))
		return err
	})
}

// PurgeMatching deletes for good, in one transaction, every dead letter
// that r.Match selects (a dropped group's too, see DeadLetters): some by
// id (Match.IDs), those older than a time (Match.DeadBefore), those a
// filter selects, or, with r.All and no filter, all of the group; the
// audit trail records one "purge" action with the count and the filter.
// ctx governs the transaction.
func (c *Client) PurgeMatching(ctx context.Context, r BulkRequest) (BulkResult, error) {
	return c.bulk(ctx, r, AuditPurge, func(ctx context.Context, tx pgx.Tx, dls []store.DeadLetter, res *BulkResult) error {
		ids := make([]int64, len(dls))
		for i, d := range dls {
			ids[i] = d.ID
			res.Items[i].Outcome = OutcomePurged
		}
		res.Count = len(dls)
		if tx == nil {
			return nil
		}
		n, auditID, err := store.PurgeDeadLetters(ctx, tx, r.Match.Queue, r.Match.Group, ids,
			r.Reason, c.actor(r.Actor), bulkNote(*res, r.Match))
		if err != nil {
			return err
		}
		if n != int64(len(ids)) { // a concurrent purge took some
			return fmt.Errorf("purge: %d dead letters selected but %d deleted (another purge ran at the same time): nothing was purged; run it again", len(ids), n)
		}
		res.AuditID = auditID
		return nil
	})
}

// bulk selects the dead letters of r and runs act on them: in a
// transaction holding their row locks, then records one audit entry; or,
// on a dry run, with tx nil and no lock.
func (c *Client) bulk(ctx context.Context, r BulkRequest, action AuditAction,
	act func(ctx context.Context, tx pgx.Tx, dls []store.DeadLetter, res *BulkResult) error) (BulkResult, error) {
	if err := validateActorReason(r.Actor, r.Reason); err != nil {
		return BulkResult{}, err
	}
	if err := r.Match.validate(); err != nil {
		return BulkResult{}, err
	}
	if !r.Match.narrowed() && !r.All {
		return BulkResult{}, &ValidationError{Field: "BulkRequest.Match", Value: "(no filter)", Problem: "it selects every dead letter of the group",
			Fix: "give a filter (a key, a type, ids, ...) or set All to " + string(action) + " them all"}
	}
	if r.Max < 0 {
		return BulkResult{}, &ValidationError{Field: "BulkRequest.Max", Value: strconv.Itoa(r.Max), Problem: "it is negative", Fix: "give 1 or more, or 0 for the default"}
	}
	limit := r.Max
	if limit == 0 {
		limit = BulkMaxDefault
	}
	if err := c.recordsOf(ctx, r.Match.Queue, r.Match.Group); err != nil {
		return BulkResult{}, err
	}
	f := r.Match.filter()
	f.AfterID, f.Newest, f.ByEvent, f.Limit = 0, false, true, limit+1
	res := BulkResult{DryRun: r.DryRun}
	run := func(tx pgx.Tx, db store.DB) error {
		dls, err := store.ListDeadLetters(ctx, db, f)
		if err != nil {
			return err
		}
		if len(dls) > limit {
			n, err := store.CountMatching(ctx, db, f)
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: %d match, more than the limit of %d; nothing was changed: narrow the filter, or raise the limit (--max)", ErrTooMany, n, limit)
		}
		res.Items = make([]BulkItem, len(dls))
		seen := map[int64]bool{}
		for i, d := range dls {
			res.Items[i] = BulkItem{ID: d.ID, EventID: d.EvID, Key: d.Key, Type: d.Type}
			seen[d.ID] = true
		}
		res.Unmatched = nil
		for _, id := range r.Match.IDs {
			if !seen[id] {
				res.Unmatched = append(res.Unmatched, id)
				seen[id] = true
			}
		}
		return act(ctx, tx, dls, &res)
	}
	if ok, err := store.Installed(ctx, c.pool); err != nil {
		return BulkResult{}, err
	} else if !ok {
		return res, nil // no schema: no dead letters
	}
	var err error
	if r.DryRun {
		err = run(nil, c.pool)
	} else {
		err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return run(tx, tx) })
	}
	if err != nil {
		return BulkResult{}, err
	}
	if !r.DryRun && len(res.Items) > 0 {
		c.log.InfoContext(ctx, "partitionq: bulk "+string(action), "queue", r.Match.Queue, "group", r.Match.Group, "count", res.Count,
			"already_replayed", res.AlreadyReplayed, "actor", c.actor(r.Actor))
	}
	return res, nil
}

// bulkNote is what the audit entry of a bulk action says after its count:
// the dead letters left alone as replayed before, then the filter that
// selected them ("already_replayed 1, key=\"a\"").
func bulkNote(res BulkResult, q DeadLetterQuery) string {
	var parts []string
	if res.AlreadyReplayed > 0 {
		parts = append(parts, fmt.Sprintf("%s %d", OutcomeAlreadyReplayed, res.AlreadyReplayed))
	}
	if d := q.Describe(); d != "" {
		parts = append(parts, d)
	}
	return strings.Join(parts, ", ")
}

// Describe says in a few words what q selects ("key=acme type=FileDeleted"),
// "" when it has no filter.
func (q DeadLetterQuery) Describe() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+"="+strconv.Quote(v))
		}
	}
	add("key", q.Key)
	add("type", q.Type)
	add("error", q.Error)
	add("reason", q.Reason)
	if !q.DeadAfter.IsZero() {
		parts = append(parts, "since="+q.DeadAfter.UTC().Format(time.RFC3339))
	}
	if !q.DeadBefore.IsZero() {
		parts = append(parts, "until="+q.DeadBefore.UTC().Format(time.RFC3339))
	}
	if q.Pending {
		parts = append(parts, "pending")
	}
	if len(q.IDs) > 0 {
		ids := make([]string, len(q.IDs))
		for i, id := range q.IDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		s := strings.Join(ids, ",")
		if len(q.IDs) > 20 {
			s = strings.Join(ids[:20], ",") + fmt.Sprintf(",... (%d ids)", len(q.IDs))
		}
		parts = append(parts, "ids="+s)
	}
	return strings.Join(parts, " ")
}
