package partitionq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// operatorLockTimeout bounds how long an operator action waits for a worker
// that is handling the same head right now; then it fails with ErrHeadBusy
// (whose doc, and docs/guarantees.md, say 5 s).
const operatorLockTimeout = 5 * time.Second

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

// KeyState says why a key has events set aside in its slot (or, for
// KeyFlowing, that it has none).
type KeyState string

// Key states.
const (
	// KeyFlowing: the key has no events set aside; its events run as they
	// arrive (Client.Key only: BlockedKeys lists the other two states).
	KeyFlowing KeyState = "flowing"
	// KeyBlocked: the key's head event failed and is not resolved; the
	// worker tries it again on its schedule, and the key's later events
	// wait behind it.
	KeyBlocked KeyState = "blocked"
	// KeyDraining: the key's failed head was resolved (handled on a retry,
	// skipped, dead-lettered) and the events that waited behind it run
	// next, in order, as soon as a worker gets to them; the head shown has
	// never failed (no failure recorded, ev_retry 0). Nothing needs doing:
	// a running worker drains the key within its HeadScanInterval. Operator
	// actions refuse to act on it unless they name it (ActionRequest.HeadID).
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
	// Flagged is set when a worker with WorkerConfig.Retry.MaxBlocked found the
	// key blocked for longer than that (and did not dead-letter it).
	Flagged bool
}

// BlockedKeys lists the keys of a group with events set aside, blocked and
// draining (see BlockedKey.State), oldest block first. The list is derived
// from the engine's retry queue (the slot consumers' events set aside);
// partitionq keeps no table of blocked keys. It costs two queries whatever
// the number of slots. ctx governs the queries.
func (c *Client) BlockedKeys(ctx context.Context, queue, group string) ([]BlockedKey, error) {
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return nil, err
	}
	heads, err := parked.Heads(ctx, c.pool, c.eng, c.allSlots(g), nil)
	if err != nil {
		return nil, err
	}
	out := make([]BlockedKey, len(heads))
	for i, h := range heads {
		out[i] = blockedKey(h)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].BlockedSince.Before(out[j].BlockedSince) })
	return out, nil
}

// BlockedKey returns one key with events set aside (blocked or draining),
// or ErrNotBlocked.
func (c *Client) BlockedKey(ctx context.Context, queue, group, key string) (BlockedKey, error) {
	_, s, err := c.keyHome(ctx, queue, group, key)
	if err != nil {
		return BlockedKey{}, err
	}
	heads, err := parked.Heads(ctx, c.pool, c.eng, []parked.Slot{s}, &key)
	if err != nil {
		return BlockedKey{}, err
	}
	if len(heads) == 0 {
		return BlockedKey{}, notBlocked(key)
	}
	return blockedKey(heads[0]), nil
}

func blockedKey(h parked.Head) BlockedKey {
	bk := BlockedKey{Key: h.Key, Slot: h.Slot, State: KeyBlocked, Waiting: h.Waiting, BlockedSince: h.Time,
		Head: HeadEvent{ID: h.ID, Type: h.Type, Payload: []byte(h.Data), Time: h.Time, Attempts: int(h.Retry)}}
	if !h.Parked() {
		bk.Head.NextAttempt = h.After // a timed engine retry (retry-later policy)
	}
	if f := h.Failure; f != nil {
		bk.Head.Attempts, bk.Head.LastError, bk.Head.NextAttempt, bk.BlockedSince = f.Attempts, f.LastError, f.NextAttemptAt, f.FirstFailedAt
		bk.Flagged = f.FlaggedAt != nil
	}
	if h.Draining() {
		bk.State = KeyDraining
	}
	return bk
}

func notBlocked(key string) error {
	return fmt.Errorf("%w: key %s has no unresolved head in its slot", ErrNotBlocked, shorten(key))
}

// keyHome returns the group and the slot that holds key's events set aside
// (and runs its events): the key's slot of the current generation, or,
// during a resize, of the old generation while that slot has not been
// handed off (or holds the key's parked events).
func (c *Client) keyHome(ctx context.Context, queue, group, key string) (Group, parked.Slot, error) {
	if err := ValidateKey(key); err != nil {
		return Group{}, parked.Slot{}, err
	}
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return Group{}, parked.Slot{}, err
	}
	var cands []parked.Slot
	for i := len(g.gens) - 1; i >= 0; i-- { // the current generation first
		x := g.gens[i]
		s, err := engine.SlotOf(ctx, c.pool, key, x.n)
		if err != nil {
			return Group{}, parked.Slot{}, err
		}
		cands = append(cands, parked.Slot{Queue: queue, Group: group, Consumer: x.consumers[s], N: x.n, Slot: s, SubID: x.subIDs[s]})
	}
	home := cands[0]
	if len(cands) > 1 {
		old := cands[1]
		switch {
		case home.Consumer == "":
			home = old // before the cutover the old slot runs the key
		case old.Consumer != "":
			// Both registered: the old slot until it is handed off (its
			// parked events then move to the new one).
			home = old
		}
	}
	if home.Consumer == "" {
		return Group{}, parked.Slot{}, fmt.Errorf("the slot of key %s is not registered in the engine: the group's resize has not reached its cutover", shorten(key))
	}
	return g, home, nil
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
// events waiting behind it (limit 1 or more), in the order they will run:
// after a skip of the head, the waiting events run in this order, then the
// key's events still in the stream. ErrNotBlocked when the key has no
// events set aside. ctx governs the queries.
func (c *Client) Preview(ctx context.Context, queue, group, key string, limit int) ([]PreviewEvent, error) {
	if limit < 1 {
		return nil, &ValidationError{Field: "limit", Value: strconv.Itoa(limit), Problem: "it must be 1 or more", Fix: "ask for the next 10 events, say"}
	}
	_, s, err := c.keyHome(ctx, queue, group, key)
	if err != nil {
		return nil, err
	}
	evs, err := parked.Events(ctx, c.pool, c.eng, s, key, limit+1)
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

// Outcome is what an operator action came to: ActionResult.Outcome,
// ReplayResult's, and AuditEntry.Outcome in the audit trail, where an
// action with counts (a bulk replay, a purge, a resize, a group drop) has
// them in AuditEntry.Detail.
type Outcome string

// Outcomes of operator actions.
const (
	// OutcomeSkipped: the head was moved to the dead letters; the key's
	// waiting events run next, in order.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeAlreadyResolved: the head named (ActionRequest.HeadID) was resolved
	// before this call: handled, skipped, quarantined or dead-lettered, as
	// ActionResult.Resolved says; nothing changed. An event that was never
	// resolved (it waits behind the head, has not run yet, is of another
	// key, or never existed) is a *NotHeadError instead.
	OutcomeAlreadyResolved Outcome = "already_resolved"
	// OutcomeRetryScheduled: the head's next attempt was brought forward to now.
	OutcomeRetryScheduled Outcome = "retry_scheduled"
	// OutcomeQuarantined: the head and every waiting event went to the dead letters.
	OutcomeQuarantined Outcome = "quarantined"
	// OutcomeReplayed: dead letters were sent again (a bulk replay's
	// audit entry has the count in its Detail: "3 (key=\"tenant-7\")").
	OutcomeReplayed Outcome = "replayed"
	// OutcomeAlreadyReplayed: the dead letter had been replayed before; nothing changed.
	OutcomeAlreadyReplayed Outcome = "already_replayed"
	// OutcomePurged: dead letters were deleted (Detail: how many, and
	// the filter).
	OutcomePurged Outcome = "purged"
	// OutcomeResizeStarted: a resize started (Detail: "4 to 8 slots
	// (generation 2)").
	OutcomeResizeStarted Outcome = "started"
	// OutcomeResizeCompleted: a worker completed a resize (Detail as for
	// OutcomeResizeStarted).
	OutcomeResizeCompleted Outcome = "completed"
	// OutcomeResizeAborted: a resize was aborted (Detail: "4 to 8 slots").
	OutcomeResizeAborted Outcome = "aborted"
	// OutcomeDropped: a consumer group was dropped (Detail: "3 slots, 0
	// events set aside dropped").
	OutcomeDropped Outcome = "dropped"
)

// ActionRequest asks Client.Act for an operator action on the head of a
// key: which action, on which key, who acts and why. Actor defaults to
// Config.Actor; the database role is recorded too.
type ActionRequest struct {
	// Action is the action: AuditSkip, AuditRetry, AuditQuarantine (a row
	// of AuditActions whose On is TargetKeyHead).
	Action            AuditAction
	Queue, Group, Key string
	// HeadID, when not zero, is the head event the operator saw: the action
	// applies only if it is still the key's head (else the outcome is
	// OutcomeAlreadyResolved). Zero means the current head, provided it has
	// failed: an action with HeadID zero on a draining key (whose head has
	// never failed) fails with a *DrainingError and changes nothing, so that
	// repeating "skip the head" never dead-letters a healthy event.
	HeadID int64
	// Reason says why, in the audit trail (and in the dead letters of a
	// skip or quarantine, which require it).
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
	// Resolved says how and by whom the event was resolved, for
	// OutcomeAlreadyResolved (nil otherwise).
	Resolved *Resolution
}

// How an event was resolved (Resolution.How).
const (
	ResolvedHandled      = "handled"       // a worker handled it successfully
	ResolvedSkipped      = "skipped"       // an operator skipped it (a dead letter)
	ResolvedQuarantined  = "quarantined"   // an operator quarantined its key (a dead letter)
	ResolvedDeadLettered = "dead-lettered" // the worker gave it up (out of attempts, the handler refused it, blocked too long)
)

// Resolution is how and by whom an event was resolved.
type Resolution struct {
	How string // one of the Resolved values
	// Reason is the dead letter's reason ("skip: corrupt file",
	// "max_attempts", ...); "" for a handled event.
	Reason string
	// Actor and DBRole are who resolved it: the operator's actor and login
	// role for a skip or quarantine, "worker" and the worker's role for the
	// others; "" for a handled event (which worker is not recorded).
	Actor, DBRole string
	At            time.Time // when it became a dead letter; zero for a handled event
	DeadLetterID  int64     // its dead letter; 0 for a handled event
}

// NotHeadError refuses an operator action whose ActionRequest.HeadID is not the
// key's head and was never resolved: it waits behind the head, has not been
// handled yet, is an event of another key, or the queue never had it.
// Nothing changed and nothing was recorded. Test for it with errors.As.
type NotHeadError struct {
	Action  AuditAction // AuditSkip, AuditRetry or AuditQuarantine
	Key     string
	EventID int64 // the event named
	// Head is the key's head now, and HeadState its state (KeyBlocked or
	// KeyDraining); 0 and KeyFlowing when nothing of the key is set aside.
	Head      int64
	HeadState KeyState
	// Why says what the event is, in a few words.
	Why string
}

func (e *NotHeadError) Error() string {
	head := fmt.Sprintf("its head is event %d (%s)", e.Head, e.HeadState)
	if e.Head == 0 {
		head = "the key is not blocked: nothing of it is set aside"
	}
	return fmt.Sprintf("event %d is not the head of key %s and was never resolved: %s; %s: %s changed nothing and recorded nothing",
		e.EventID, shorten(e.Key), e.Why, head, e.Action)
}

// Act runs an operator action on the head of a key (r.Action: AuditSkip,
// AuditRetry, AuditQuarantine, or any other row of AuditActions whose On
// is TargetKeyHead; each constant says what its action does), with its
// audit entry in the same transaction. A program that reads the table
// (the CLI, the console) runs every action on a key through it without
// naming each.
//
// It is safe while a worker runs the slot: if the worker is handling the
// head right now, Act waits for the outcome (up to 5 s, then ErrHeadBusy);
// an event is never both handled successfully and skipped. Calling it
// again for the same r.HeadID returns OutcomeAlreadyResolved. It fails,
// changing nothing, with ErrNotBlocked when r.HeadID is zero and the key
// has no events set aside; with a *DrainingError when r.HeadID is zero and the key's head
// has never failed; with a *NotHeadError when r.HeadID names an event that
// is not the head and was never resolved; with a *ValidationError for
// "reason" when the action needs a reason (AuditActionInfo.ReasonRequired:
// skip and quarantine, whose reason goes to the dead letters) and
// r.Reason is empty; and with an error for an action the table does not
// list as an action on a key's head. ctx governs the queries.
func (c *Client) Act(ctx context.Context, r ActionRequest) (ActionResult, error) {
	action := r.Action
	info, ok := action.Info()
	if !ok || info.On != TargetKeyHead {
		return ActionResult{}, fmt.Errorf("partitionq: %q is not an action on a key's head (see AuditActions)", action)
	}
	kind := info.kind
	if err := validateActorReason(r.Actor, r.Reason); err != nil {
		return ActionResult{}, err
	}
	if info.ReasonRequired && strings.TrimSpace(r.Reason) == "" {
		return ActionResult{}, &ValidationError{Field: "reason", Value: shorten(r.Reason),
			Problem: fmt.Sprintf("%s moves events to the dead letters, so it needs a reason", info.Name),
			Fix:     "say why in ActionRequest.Reason (the CLI's --reason), e.g. \"corrupt file, INC-42\": it is kept in the audit trail and the dead letters"}
	}
	_, s, err := c.keyHome(ctx, r.Queue, r.Group, r.Key)
	if err != nil {
		return ActionResult{}, err
	}
	if err := c.migrate(ctx); err != nil {
		return ActionResult{}, err
	}
	actor := c.actor(r.Actor)
	pr, err := parked.Act(ctx, c.pool, c.eng, s,
		parked.Action{Kind: kind, Key: r.Key, HeadID: r.HeadID, Reason: r.Reason, Actor: actor, LockTimeout: operatorLockTimeout},
		func(ctx context.Context, tx pgx.Tx, pr parked.ActionResult) error {
			return c.audit(ctx, tx, r, action, pr.EventID, Outcome(pr.Outcome))
		})
	var nf *parked.NeverFailedError
	if errors.As(err, &nf) {
		return ActionResult{}, &DrainingError{Action: action, Key: r.Key, EventID: nf.EventID}
	}
	var nh *parked.NotHeadError
	if errors.As(err, &nh) {
		return c.notHead(ctx, s, r, action, nh)
	}
	if err != nil {
		return ActionResult{}, err
	}
	res := ActionResult{Outcome: Outcome(pr.Outcome), Key: r.Key, Slot: s.Slot, EventID: pr.EventID, Count: pr.Count, NextIDs: pr.NextIDs}
	c.log.InfoContext(ctx, "partitionq: operator action", "action", string(action), "queue", r.Queue, "group", r.Group,
		"key", r.Key, "event_id", res.EventID, "outcome", string(res.Outcome), "actor", actor)
	return res, nil
}

func (c *Client) actor(a string) string {
	if a != "" {
		return a
	}
	return c.cfg.Actor
}

func (c *Client) audit(ctx context.Context, tx pgx.Tx, a ActionRequest, action AuditAction, evID int64, outcome Outcome) error {
	key := a.Key
	var ev *int64
	if evID != 0 {
		ev = &evID
	}
	return store.Audit(ctx, tx, store.AuditEntry{Actor: c.actor(a.Actor), Action: string(action), Queue: a.Queue, Group: a.Group,
		Key: &key, EvID: ev, Reason: a.Reason, Outcome: string(outcome)})
}

// notHead answers an action whose event is not the key's head: resolved
// before (OutcomeAlreadyResolved, with how and by whom, recorded in the
// audit trail), or never (a *NotHeadError, nothing recorded).
func (c *Client) notHead(ctx context.Context, slot parked.Slot, a ActionRequest, action AuditAction, nh *parked.NotHeadError) (ActionResult, error) {
	refuse := func(why string) (ActionResult, error) {
		e := &NotHeadError{Action: action, Key: a.Key, EventID: nh.EventID, Why: why, HeadState: KeyFlowing}
		if h := nh.Head; h != nil {
			e.Head, e.HeadState = h.ID, KeyBlocked
			if h.Draining() {
				e.HeadState = KeyDraining
			}
		}
		return ActionResult{}, e
	}
	var res *Resolution
	if d, ok, err := store.DeadLetterOfEvent(ctx, c.pool, a.Queue, a.Group, a.Key, nh.EventID); err != nil {
		return ActionResult{}, err
	} else if ok {
		res = &Resolution{How: ResolvedDeadLettered, Reason: d.Reason, Actor: d.Actor, DBRole: d.DBRole, At: d.DeadAt, DeadLetterID: d.ID}
		switch {
		case strings.HasPrefix(d.Reason, "skip:"):
			res.How = ResolvedSkipped
		case strings.HasPrefix(d.Reason, "quarantine:"):
			res.How = ResolvedQuarantined
		}
	} else {
		fate, err := store.EventFate(ctx, c.pool, c.eng.Schema(), a.Queue, slot.Consumer, a.Key, nh.EventID)
		if err != nil {
			return ActionResult{}, err
		}
		switch fate {
		case store.FateFinished:
			res = &Resolution{How: ResolvedHandled}
		case store.FateSetAside:
			return refuse(fmt.Sprintf("event %d waits behind the head", nh.EventID))
		case store.FateUnfinished:
			return refuse(fmt.Sprintf("event %d has not been handled yet (it is in the stream, after its slot's position)", nh.EventID))
		case store.FateOtherKey:
			return refuse(fmt.Sprintf("event %d is an event of another key", nh.EventID))
		case store.FateUnknown:
			return refuse(fmt.Sprintf("event %d is older than the events the engine keeps, so what became of it cannot be told", nh.EventID))
		default:
			return refuse(fmt.Sprintf("the queue has no event %d", nh.EventID))
		}
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		return c.audit(ctx, tx, a, action, nh.EventID, OutcomeAlreadyResolved)
	})
	if err != nil {
		return ActionResult{}, err
	}
	c.log.InfoContext(ctx, "partitionq: operator action", "action", string(action), "queue", a.Queue, "group", a.Group,
		"key", a.Key, "event_id", nh.EventID, "outcome", string(OutcomeAlreadyResolved), "how", res.How, "actor", c.actor(a.Actor))
	return ActionResult{Outcome: OutcomeAlreadyResolved, Key: a.Key, Slot: slot.Slot, EventID: nh.EventID, Resolved: res}, nil
}
