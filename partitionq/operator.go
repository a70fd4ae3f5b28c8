package partitionq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// OperatorLockTimeout bounds how long an operator action waits for a worker
// that is handling the same head right now; then it fails with ErrHeadBusy.
const OperatorLockTimeout = 5 * time.Second

// HeadEvent is the event a blocked key waits on.
type HeadEvent struct {
	ID          int64
	Type        string
	Payload     []byte
	Time        time.Time // when it was sent
	Attempts    int       // failed attempts so far
	NextAttempt time.Time // when the worker tries it again (zero: as soon as it can)
	LastError   string    // the handler's last error, when known
}

// KeyState says why a key has events set aside in its slot.
type KeyState string

// Key states.
const (
	// KeyBlocked: the key's head event failed and is not resolved; the
	// worker tries it again on its schedule, and the key's later events
	// wait behind it.
	KeyBlocked KeyState = "blocked"
	// KeyDraining: the key's failed head was resolved (handled on a retry,
	// skipped, dead-lettered) and the events that waited behind it run
	// next, in order, as soon as a worker gets to them; the head shown has
	// never failed (no failure recorded, ev_retry 0). Nothing needs doing:
	// a running worker drains the key within its HeadScanInterval. Operator
	// actions refuse to act on it unless they name it (Action.HeadID).
	KeyDraining KeyState = "draining"
)

// BlockedKey is a key with events set aside in its slot: blocked (its head
// event failed and is not yet resolved; its later events wait behind it)
// or draining (see State).
type BlockedKey struct {
	Key   string
	Slot  int
	State KeyState // KeyBlocked or KeyDraining
	Head  HeadEvent
	// Waiting counts the events of the key behind the head.
	Waiting int64
	// BlockedSince is the first failure of the head; for a draining key,
	// whose head never failed, the time the head was sent.
	BlockedSince time.Time
	// Flagged is set when a worker with WorkerConfig.MaxBlocked found the
	// key blocked for longer than that (and did not dead-letter it).
	Flagged bool
}

// neverFailed is the rule of KeyDraining: a head with no failure record
// and ev_retry 0 has never failed.
func neverFailed(ev engine.Event, recorded bool) bool { return !recorded && ev.Retry == 0 }

// BlockedKeys lists the keys of a group with events set aside, blocked and
// draining (see BlockedKey.State), oldest block first. The list is derived
// from the engine's retry queue (the slot consumers' parked events);
// partitionq keeps no table of blocked keys. ctx governs the queries.
func (c *Client) BlockedKeys(ctx context.Context, queue, group string) ([]BlockedKey, error) {
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return nil, err
	}
	var out []BlockedKey
	for s := range g.Slots {
		bk, err := c.blockedInSlot(ctx, g, s, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, bk...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].BlockedSince.Before(out[j].BlockedSince) })
	return out, nil
}

// BlockedKey returns one key with events set aside (blocked or draining),
// or ErrNotBlocked.
func (c *Client) BlockedKey(ctx context.Context, queue, group, key string) (BlockedKey, error) {
	g, s, err := c.groupAndSlot(ctx, queue, group, key)
	if err != nil {
		return BlockedKey{}, err
	}
	bk, err := c.blockedInSlot(ctx, g, s, &key)
	if err != nil {
		return BlockedKey{}, err
	}
	if len(bk) == 0 {
		return BlockedKey{}, notBlocked(key)
	}
	return bk[0], nil
}

func notBlocked(key string) error {
	return fmt.Errorf("%w: key %q has no unresolved head in its slot", ErrNotBlocked, key)
}

func (c *Client) groupAndSlot(ctx context.Context, queue, group, key string) (Group, int, error) {
	if err := ValidateKey(key); err != nil {
		return Group{}, 0, err
	}
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return Group{}, 0, err
	}
	s, err := engine.SlotOf(ctx, c.pool, key, g.Slots)
	return g, s, err
}

func (c *Client) blockedInSlot(ctx context.Context, g Group, s int, key *string) ([]BlockedKey, error) {
	heads, err := c.eng.RetryHeads(ctx, c.pool, g.subIDs[s], key)
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	ids := make([]int64, len(heads))
	for i, h := range heads {
		ids[i] = h.ID
	}
	fails, err := c.failures(ctx, g.Queue, g.Consumers[s], ids)
	if err != nil {
		return nil, err
	}
	out := make([]BlockedKey, 0, len(heads))
	for _, h := range heads {
		bk := BlockedKey{Key: h.Key, Slot: s, State: KeyBlocked, Waiting: h.Waiting, BlockedSince: h.Time,
			Head: HeadEvent{ID: h.ID, Type: h.Type, Payload: []byte(h.Data), Time: h.Time, Attempts: int(h.Retry)}}
		if h.After.Before(engine.Far) {
			bk.Head.NextAttempt = h.After // a timed engine retry (skip policy)
		}
		f, ok := fails[h.ID]
		if ok {
			bk.Head.Attempts, bk.Head.LastError, bk.Head.NextAttempt, bk.BlockedSince = f.Attempts, f.LastError, f.NextAttemptAt, f.FirstFailedAt
			bk.Flagged = f.FlaggedAt != nil
		}
		if neverFailed(h.Event, ok) {
			bk.State = KeyDraining
		}
		out = append(out, bk)
	}
	return out, nil
}

func (c *Client) failures(ctx context.Context, queue, consumer string, ids []int64) (map[int64]store.Failure, error) {
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return map[int64]store.Failure{}, err
	}
	return store.Failures(ctx, c.pool, queue, consumer, ids)
}

// PreviewEvent is an event of a blocked key, in the order it will run.
type PreviewEvent struct {
	ID      int64
	Type    string
	Payload []byte
	Time    time.Time
	Head    bool // the blocked head itself (a skip removes it)
}

// Preview returns the head of a blocked (or draining) key and up to limit
// events waiting behind it, in the order they will run: after a skip of
// the head, the waiting events run in this order, then the key's events
// still in the stream. ErrNotBlocked when the key has no events set aside.
func (c *Client) Preview(ctx context.Context, queue, group, key string, limit int) ([]PreviewEvent, error) {
	g, s, err := c.groupAndSlot(ctx, queue, group, key)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		limit = 10
	}
	evs, err := c.eng.RetryEvents(ctx, c.pool, g.subIDs[s], key, limit+1)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, notBlocked(key)
	}
	out := make([]PreviewEvent, len(evs))
	for i, ev := range evs {
		out[i] = PreviewEvent{ID: ev.ID, Type: ev.Type, Payload: []byte(ev.Data), Time: ev.Time, Head: i == 0}
	}
	return out, nil
}

// Outcome is what an operator action came to.
type Outcome string

// Outcomes of operator actions.
const (
	// OutcomeSkipped: the head was moved to the dead letters; the key's
	// waiting events run next, in order.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeAlreadyResolved: the head named was no longer blocked (handled
	// on a retry, skipped, or dead-lettered before this call); nothing changed.
	OutcomeAlreadyResolved Outcome = "already_resolved"
	// OutcomeRetryScheduled: the head's next attempt was brought forward to now.
	OutcomeRetryScheduled Outcome = "retry_scheduled"
	// OutcomeQuarantined: the head and every waiting event went to the dead letters.
	OutcomeQuarantined Outcome = "quarantined"
	// OutcomeReplayed: a dead letter was sent again.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeAlreadyReplayed: the dead letter had been replayed before; nothing changed.
	OutcomeAlreadyReplayed Outcome = "already_replayed"
	// OutcomePurged: dead letters were deleted.
	OutcomePurged Outcome = "purged"
)

// Action identifies a key and says who acts and why. Actor defaults to
// Config.Actor; the database role is recorded too.
type Action struct {
	Queue, Group, Key string
	// HeadID, when not zero, is the head event the operator saw: the action
	// applies only if it is still the key's head (else the outcome is
	// OutcomeAlreadyResolved). Zero means the current head, provided it has
	// failed: an action with HeadID zero on a draining key (whose head has
	// never failed) fails with a *DrainingError and changes nothing, so that
	// repeating "skip the head" never dead-letters a healthy event.
	HeadID int64
	Reason string
	Actor  string
}

// ActionResult is the result of an operator action on a key.
type ActionResult struct {
	Outcome Outcome
	Key     string
	Slot    int
	EventID int64   // the head acted on (or named)
	Count   int     // events affected (quarantine: all of the key's)
	NextIDs []int64 // skip: the key's waiting events, next to run (up to 10)
}

// Skip moves the blocked head of a key to the dead letters and unblocks the
// key, whose waiting events then run in order. It is safe while a worker
// runs the slot: if the worker is handling the head right now, Skip waits
// for the outcome (up to OperatorLockTimeout, then ErrHeadBusy); an event is
// never both handled successfully and skipped. Calling it again for the same
// HeadID returns OutcomeAlreadyResolved. ErrNotBlocked when HeadID is zero
// and the key is not blocked; a *DrainingError (ErrDraining) when HeadID is
// zero and the key's head has never failed.
func (c *Client) Skip(ctx context.Context, a Action) (ActionResult, error) {
	return c.onHead(ctx, a, "skip", func(tx pgx.Tx, g Group, s int, head engine.Event, f store.Failure, res *ActionResult) error {
		dl := c.deadLetterOf(g, s, head, f, "skip", a)
		if err := c.removeParked(ctx, tx, g, s, []engine.Event{head}, []store.DeadLetter{dl}); err != nil {
			return err
		}
		next, err := c.eng.RetryEvents(ctx, tx, g.subIDs[s], a.Key, 10)
		if err != nil {
			return err
		}
		for _, ev := range next {
			res.NextIDs = append(res.NextIDs, ev.ID)
		}
		res.Outcome, res.Count = OutcomeSkipped, 1
		return nil
	})
}

// RetryNow brings the next attempt of a blocked key's head forward to now;
// a running worker tries it within its HeadScanInterval. Like Skip, it
// refuses a draining key unless HeadID names its head (which is due now
// anyway: nothing changes but the audit trail).
func (c *Client) RetryNow(ctx context.Context, a Action) (ActionResult, error) {
	return c.onHead(ctx, a, "retry", func(tx pgx.Tx, g Group, s int, head engine.Event, _ store.Failure, res *ActionResult) error {
		if _, err := store.RetryNow(ctx, tx, g.Queue, g.Consumers[s], head.ID); err != nil {
			return err
		}
		res.Outcome, res.Count = OutcomeRetryScheduled, 1
		return nil
	})
}

// Quarantine moves the blocked head of a key and every event waiting behind
// it to the dead letters in one transaction (for a tenant being deleted, or
// a key known to be broken). Events of the key still in the stream are
// handled as usual when they arrive. ErrNotBlocked when the key has no
// events set aside; a draining key's events are quarantined only when
// HeadID names its head (else a *DrainingError).
func (c *Client) Quarantine(ctx context.Context, a Action) (ActionResult, error) {
	return c.onHead(ctx, a, "quarantine", func(tx pgx.Tx, g Group, s int, head engine.Event, _ store.Failure, res *ActionResult) error {
		evs, err := c.eng.LockKeyRetries(ctx, tx, g.subIDs[s], a.Key)
		if err != nil {
			return err
		}
		ids := make([]int64, len(evs))
		for i, ev := range evs {
			ids[i] = ev.ID
		}
		fails, err := store.Failures(ctx, tx, g.Queue, g.Consumers[s], ids)
		if err != nil {
			return err
		}
		dls := make([]store.DeadLetter, len(evs))
		for i, ev := range evs {
			dls[i] = c.deadLetterOf(g, s, ev, fails[ev.ID], "quarantine", a)
		}
		if err := c.removeParked(ctx, tx, g, s, evs, dls); err != nil {
			return err
		}
		res.Outcome, res.Count = OutcomeQuarantined, len(evs)
		return nil
	})
}

// onHead runs fn on the locked head of a key, with its failure record, in
// one transaction that also writes the audit entry. With HeadID zero it
// refuses a head that has never failed (a *DrainingError, nothing written):
// the rule is checked on the head as locked, after any worker handling it
// has committed.
func (c *Client) onHead(ctx context.Context, a Action, action string,
	fn func(tx pgx.Tx, g Group, s int, head engine.Event, f store.Failure, res *ActionResult) error) (ActionResult, error) {
	g, s, err := c.groupAndSlot(ctx, a.Queue, a.Group, a.Key)
	if err != nil {
		return ActionResult{}, err
	}
	if err := store.Migrate(ctx, c.pool); err != nil {
		return ActionResult{}, err
	}
	res := ActionResult{Key: a.Key, Slot: s, EventID: a.HeadID}
	sub := g.subIDs[s]
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", OperatorLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// Serialize with the engine's retry mover (H4).
		if err := c.eng.LockRetryQueue(ctx, tx); err != nil {
			return err
		}
		heads, err := c.eng.RetryHeads(ctx, tx, sub, &a.Key)
		if err != nil {
			return err
		}
		if len(heads) == 0 && a.HeadID == 0 {
			return notBlocked(a.Key)
		}
		if len(heads) == 0 || (a.HeadID != 0 && heads[0].ID != a.HeadID) {
			res.Outcome = OutcomeAlreadyResolved
			return c.audit(ctx, tx, a, action, res)
		}
		head := heads[0].Event
		res.EventID = head.ID
		if !heads[0].After.Before(engine.Far) {
			// A parked head: wait for a worker handling it to finish with it.
			// (A timed engine retry is held by the table lock above.)
			locked, ok, err := c.eng.LockRetry(ctx, tx, sub, head.ID, true)
			if errors.Is(err, engine.ErrLocked) {
				return fmt.Errorf("%w (key %q, event %d): try again in a moment", ErrHeadBusy, a.Key, head.ID)
			}
			if err != nil {
				return err
			}
			if !ok { // resolved while we waited: never act on the next event
				res.Outcome = OutcomeAlreadyResolved
				return c.audit(ctx, tx, a, action, res)
			}
			head = locked // as the worker left it (its ev_retry)
		}
		fails, err := store.Failures(ctx, tx, g.Queue, g.Consumers[s], []int64{head.ID})
		if err != nil {
			return err
		}
		f, recorded := fails[head.ID]
		if a.HeadID == 0 && neverFailed(head, recorded) {
			return &DrainingError{Action: action, Key: a.Key, EventID: head.ID}
		}
		res.EventID = head.ID
		if err := fn(tx, g, s, head, f, &res); err != nil {
			return err
		}
		return c.audit(ctx, tx, a, action, res)
	})
	if err != nil {
		return ActionResult{}, err
	}
	c.log.InfoContext(ctx, "partitionq: operator action", "action", action, "queue", a.Queue, "group", a.Group,
		"key", a.Key, "event_id", res.EventID, "outcome", string(res.Outcome), "actor", c.actor(a.Actor))
	return res, nil
}

// removeParked deletes events from a slot's retry queue, with their failure
// records, and stores their dead letters; in tx, under the retry-queue lock.
func (c *Client) removeParked(ctx context.Context, tx pgx.Tx, g Group, s int, evs []engine.Event, dls []store.DeadLetter) error {
	for _, ev := range evs {
		if _, err := c.eng.DeleteRetry(ctx, tx, g.subIDs[s], ev.ID); err != nil {
			return err
		}
		if err := store.DeleteFailure(ctx, tx, g.Queue, g.Consumers[s], ev.ID); err != nil {
			return err
		}
	}
	return store.AddDeadLetters(ctx, tx, dls)
}

func (c *Client) deadLetterOf(g Group, s int, ev engine.Event, f store.Failure, reason string, a Action) store.DeadLetter {
	attempts := int(ev.Retry)
	if f.Attempts > attempts {
		attempts = f.Attempts
	}
	r := reason
	if a.Reason != "" {
		r = reason + ": " + a.Reason
	}
	return store.DeadLetter{Queue: g.Queue, Group: g.Group, Slot: s, EvID: ev.ID, EvTime: ev.Time, Type: ev.Type,
		Data: ev.Data, Key: ev.Key, Attempts: attempts, LastError: f.LastError, Reason: r, Actor: c.actor(a.Actor)}
}

func (c *Client) actor(a string) string {
	if a != "" {
		return a
	}
	return c.cfg.Actor
}

func (c *Client) audit(ctx context.Context, tx pgx.Tx, a Action, action string, res ActionResult) error {
	key := a.Key
	var ev *int64
	if res.EventID != 0 {
		id := res.EventID
		ev = &id
	}
	return store.Audit(ctx, tx, store.AuditEntry{Actor: c.actor(a.Actor), Action: action, Queue: a.Queue, Group: a.Group,
		Key: &key, EvID: ev, Reason: a.Reason, Outcome: string(res.Outcome)})
}
