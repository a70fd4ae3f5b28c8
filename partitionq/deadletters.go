package partitionq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// DeadLetter is an event that will not be handled again unless replayed.
type DeadLetter struct {
	ID         int64 // the dead letter's own id
	Queue      string
	Group      string
	Slot       int
	EventID    int64 // the original event id
	EventTime  time.Time
	Type       string
	Payload    []byte
	Key        string
	Attempts   int    // failed attempts before it died
	LastError  string // the handler's last error, when known
	Reason     string // "max_attempts", "handler" (DeadLetter error), "skip: ...", "quarantine: ..."
	Actor      string // who acted ("worker" for automatic ones)
	DBRole     string // the database role that wrote it
	DeadAt     time.Time
	ReplayedAt *time.Time // set once replayed
	ReplayID   *int64     // the event id of the replay
}

func fromStore(d store.DeadLetter) DeadLetter {
	return DeadLetter{ID: d.ID, Queue: d.Queue, Group: d.Group, Slot: d.Slot, EventID: d.EvID, EventTime: d.EvTime,
		Type: d.Type, Payload: []byte(d.Data), Key: d.Key, Attempts: d.Attempts, LastError: d.LastError, Reason: d.Reason,
		Actor: d.Actor, DBRole: d.DBRole, DeadAt: d.DeadAt, ReplayedAt: d.ReplayedAt, ReplayID: d.ReplayEvID}
}

// DeadLetterQuery selects dead letters of one group.
type DeadLetterQuery struct {
	Queue, Group string
	Key          string // only this key when not empty
	AfterID      int64  // only ids above this one (for paging)
	Limit        int    // defaults to 100
	Pending      bool   // only those not replayed
	// Newest lists the newest first; AfterID then means "ids below this
	// one" (0: from the newest).
	Newest bool

	Type  string // only this event type, when not empty
	Error string // only those whose last error contains this text (ignoring case)
	// Reason keeps those whose reason starts with this text: "max_attempts",
	// "handler", "skip" (every "skip: ..."), "quarantine".
	Reason     string
	DeadAfter  time.Time // only those dead at or after this time, when not zero
	DeadBefore time.Time // only those dead before this time, when not zero
	IDs        []int64   // only these dead letters, when not empty
}

// narrowed reports whether q selects anything less than every dead letter
// of its group.
func (q DeadLetterQuery) narrowed() bool {
	return q.Key != "" || q.Pending || q.Type != "" || q.Error != "" || q.Reason != "" ||
		!q.DeadAfter.IsZero() || !q.DeadBefore.IsZero() || len(q.IDs) > 0
}

func (q DeadLetterQuery) validate() error {
	if q.Key != "" {
		if err := ValidateKey(q.Key); err != nil {
			return err
		}
	}
	for _, t := range []struct{ field, v string }{{"DeadLetterQuery.Type", q.Type}, {"DeadLetterQuery.Error", q.Error}, {"DeadLetterQuery.Reason", q.Reason}} {
		if err := validateText(t.field, t.v, maxText); err != nil {
			return err
		}
	}
	if !q.DeadAfter.IsZero() && !q.DeadBefore.IsZero() && !q.DeadAfter.Before(q.DeadBefore) {
		return &ValidationError{Field: "DeadLetterQuery.DeadAfter", Value: q.DeadAfter.Format(time.RFC3339), Problem: "it is not before DeadBefore, so nothing can match",
			Fix: "give a time range whose start comes before its end"}
	}
	return nil
}

// filter is the store's filter for q.
func (q DeadLetterQuery) filter() store.DeadLetterFilter {
	f := store.DeadLetterFilter{Queue: q.Queue, Group: q.Group, AfterID: q.AfterID, Limit: q.Limit, Pending: q.Pending, Newest: q.Newest,
		ErrorLike: q.Error, Reason: q.Reason, DeadAfter: q.DeadAfter, DeadBefore: q.DeadBefore}
	if q.Key != "" {
		f.Key = &q.Key
	}
	if q.Type != "" {
		f.Type = &q.Type
	}
	if len(q.IDs) > 0 {
		f.IDs = q.IDs
	}
	return f
}

// recordsOf checks that queue and group name a group whose dead letters
// and audit trail may be read, replayed or purged: a group registered in the
// engine, or one no longer registered (dropped with DropGroup, or its queue
// dropped) that left dead letters or audit entries. Reaching those needs no
// setup, which would register consumers again (and hold back the queue's
// table rotation). Otherwise it returns the engine's ErrNoSuchQueue or
// ErrNoSuchGroup.
func (c *Client) recordsOf(ctx context.Context, queue, group string) error {
	_, err := c.Group(ctx, queue, group)
	if err == nil || !(errors.Is(err, ErrNoSuchGroup) || errors.Is(err, ErrNoSuchQueue)) {
		return err
	}
	if ok, ierr := store.Installed(ctx, c.pool); ierr != nil || !ok {
		return errors.Join(err, ierr)
	}
	has, herr := store.HasRecords(ctx, c.pool, queue, group)
	if herr != nil {
		return herr
	}
	if !has {
		return err
	}
	return nil
}

// DeadLetters lists dead letters of a group, oldest first (or newest
// first with Newest). A group no longer registered (dropped) is read as
// long as it left dead letters or audit entries.
func (c *Client) DeadLetters(ctx context.Context, q DeadLetterQuery) ([]DeadLetter, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	if err := c.recordsOf(ctx, q.Queue, q.Group); err != nil {
		return nil, err
	}
	if ok, err := store.Installed(ctx, c.pool); err != nil || !ok {
		return nil, err
	}
	f := q.filter()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	dls, err := store.ListDeadLetters(ctx, c.pool, f)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(dls))
	for i, d := range dls {
		out[i] = fromStore(d)
	}
	return out, nil
}

// DeadLetterByID returns one dead letter of a group (dropped ones
// included, see DeadLetters), or ErrNoDeadLetter.
func (c *Client) DeadLetterByID(ctx context.Context, queue, group string, id int64) (DeadLetter, error) {
	if err := c.recordsOf(ctx, queue, group); err != nil {
		return DeadLetter{}, err
	}
	if ok, err := store.Installed(ctx, c.pool); err != nil {
		return DeadLetter{}, err
	} else if !ok {
		return DeadLetter{}, noDeadLetter(id)
	}
	d, err := store.GetDeadLetter(ctx, c.pool, queue, group, id)
	if errors.Is(err, store.ErrNoDeadLetter) {
		return DeadLetter{}, noDeadLetter(id)
	}
	return fromStore(d), err
}

func noDeadLetter(id int64) error {
	return fmt.Errorf("%w %d in this group: list them with partitionq dlq list", ErrNoDeadLetter, id)
}

// ReplayResult says what Replay did.
type ReplayResult struct {
	Outcome    Outcome // OutcomeReplayed or OutcomeAlreadyReplayed
	NewEventID int64   // the event id of the replay
}

// ReplayRequest names one dead letter to send again (Client.Replay). To
// replay several at once, or those a filter selects, use
// Client.ReplayMatching.
type ReplayRequest struct {
	Queue, Group string
	// ID is the dead letter's own id (DeadLetter.ID), not its event's.
	ID int64
	// Reason and Actor are recorded in the audit trail; Actor defaults to
	// Config.Actor.
	Reason, Actor string
}

// Replay sends the dead letter r names again, with its key, type and
// payload, at the tail of its key's order (after every event of the key
// sent before). It is idempotent: a dead letter is replayed once; later
// calls return OutcomeAlreadyReplayed and the first replay's event id. The
// replay is an event of the queue: every group registered on the queue
// gets it. A dropped group's dead letters may be replayed (into the groups
// that remain on its queue, say the new group after a change of N) while
// the queue exists. It fails with ErrNoDeadLetter when the group has no
// dead letter r.ID. ctx governs the whole call.
func (c *Client) Replay(ctx context.Context, r ReplayRequest) (ReplayResult, error) {
	queue, group, id, reason, actor := r.Queue, r.Group, r.ID, r.Reason, r.Actor
	if err := validateActorReason(actor, reason); err != nil {
		return ReplayResult{}, err
	}
	if err := c.recordsOf(ctx, queue, group); err != nil {
		return ReplayResult{}, err
	}
	if err := c.migrate(ctx); err != nil {
		return ReplayResult{}, err
	}
	// The dead letter is read without a lock (the operator may not update
	// it); partitionq.record_replay locks it and refuses a second replay,
	// which a concurrent one that committed first makes: then the next try
	// finds it replayed.
	var res ReplayResult
	var err error
	for try := 0; try < 2; try++ {
		res, err = c.replayOnce(ctx, queue, group, id, reason, actor)
		if db.Code(err) != store.CodeReplayedAlready {
			break
		}
	}
	return res, err
}

func (c *Client) replayOnce(ctx context.Context, queue, group string, id int64, reason, actor string) (ReplayResult, error) {
	var res ReplayResult
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		d, err := store.GetDeadLetter(ctx, tx, queue, group, id)
		if errors.Is(err, store.ErrNoDeadLetter) {
			return noDeadLetter(id)
		}
		if err != nil {
			return err
		}
		if d.ReplayedAt != nil && d.ReplayEvID != nil {
			res = ReplayResult{Outcome: OutcomeAlreadyReplayed, NewEventID: *d.ReplayEvID}
		} else {
			if _, ok, err := c.eng.QueueID(ctx, tx, queue); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("%w %q: dead letter %d cannot be replayed into it: create the queue again (partitionq setup) to replay it", ErrNoSuchQueue, queue, id)
			}
			evID, err := c.eng.Insert(ctx, tx, queue, engine.NewEvent{Key: d.Key, Type: d.Type, Data: d.Data})
			if err != nil {
				return err
			}
			res = ReplayResult{Outcome: OutcomeReplayed, NewEventID: evID}
			// Checks the replay's event and writes the audit entry.
			_, err = store.RecordReplay(ctx, tx, c.eng.Schema(), queue, group, []int64{id}, []int64{evID}, reason, c.actor(actor), "")
			return err
		}
		key := d.Key
		return store.Audit(ctx, tx, store.AuditEntry{Actor: c.actor(actor), Action: string(AuditReplay), Queue: queue, Group: group,
			Key: &key, EvID: &d.EvID, Reason: reason, Outcome: string(res.Outcome)})
	})
	return res, err
}

// AuditEntry is one recorded operator action.
type AuditEntry struct {
	ID     int64
	At     time.Time
	DBRole string // the database role that acted
	Actor  string // the free-text actor given
	// Action is what was done: one of the AuditActions (AuditSkip, ...,
	// AuditDropGroup).
	Action  AuditAction
	Queue   string
	Group   string
	Key     string // "" for an action on no single key (purge, resize, drop_group, a bulk replay of several keys)
	EventID int64  // 0 for an action on no single event
	Reason  string
	// Outcome is what the action came to (OutcomeSkipped, ...,
	// OutcomeDropped; each action's row of AuditActions lists its own),
	// and Detail the counts the database recorded with it, "" for none: a
	// bulk replay's "3 (key=\"tenant-7\")", a purge's, a resize's "4 to 8
	// slots (generation 2)", a group drop's "3 slots, 0 events set aside
	// dropped". An outcome this version does not know (written by a later
	// one) is Outcome whole, with no Detail.
	Outcome Outcome
	Detail  string
}

// OutcomeText is the outcome as the audit trail shows it (the CLI's
// audit, its --json "outcome", the console): Outcome with its Detail,
// "purged 3 (key=\"tenant-7\")", "started: 4 to 8 slots (generation 2)".
func (e AuditEntry) OutcomeText() string {
	switch {
	case e.Detail == "":
		return string(e.Outcome)
	case resizeOutcome(e.Outcome):
		return string(e.Outcome) + ": " + e.Detail
	default:
		return string(e.Outcome) + " " + e.Detail
	}
}

// auditOutcomes are the outcomes the audit trail records, longest first
// (no prefix of a later one matches an earlier one's text).
var auditOutcomes = []Outcome{OutcomeAlreadyResolved, OutcomeAlreadyReplayed, OutcomeRetryScheduled, OutcomeQuarantined,
	OutcomeResizeCompleted, OutcomeResizeStarted, OutcomeResizeAborted, OutcomeReplayed, OutcomeSkipped, OutcomePurged, OutcomeDropped}

func resizeOutcome(o Outcome) bool {
	return o == OutcomeResizeStarted || o == OutcomeResizeCompleted || o == OutcomeResizeAborted
}

// splitOutcome splits an outcome as the database records it into its
// Outcome and Detail (OutcomeText joins them again): the resizes' outcomes
// are followed by ": ", the others by a space.
func splitOutcome(text string) (Outcome, string) {
	for _, o := range auditOutcomes {
		if text == string(o) {
			return o, ""
		}
		sep := " "
		if resizeOutcome(o) {
			sep = ": "
		}
		if d, ok := strings.CutPrefix(text, string(o)+sep); ok && d != "" {
			return o, d
		}
	}
	return Outcome(text), ""
}

// Audit returns the newest operator actions on a group, newest first, at
// most limit (1 or more); a dropped group's too, see DeadLetters. ctx
// governs the queries.
func (c *Client) Audit(ctx context.Context, queue, group string, limit int) ([]AuditEntry, error) {
	if limit < 1 {
		return nil, &ValidationError{Field: "limit", Value: strconv.Itoa(limit), Problem: "it must be 1 or more", Fix: "ask for the newest 100 entries, say"}
	}
	if err := c.recordsOf(ctx, queue, group); err != nil {
		return nil, err
	}
	if ok, err := store.Installed(ctx, c.pool); err != nil || !ok {
		return nil, err
	}
	es, err := store.ListAudit(ctx, c.pool, queue, group, limit)
	if err != nil {
		return nil, err
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{ID: e.ID, At: e.At, DBRole: e.DBRole, Actor: e.Actor, Action: AuditAction(e.Action), Queue: e.Queue,
			Group: e.Group, Reason: e.Reason}
		out[i].Outcome, out[i].Detail = splitOutcome(e.Outcome)
		if e.Key != nil {
			out[i].Key = *e.Key
		}
		if e.EvID != nil {
			out[i].EventID = *e.EvID
		}
	}
	return out, nil
}

func (c *Client) countDeadLetters(ctx context.Context, queue, group string) (int64, error) {
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return 0, err
	}
	return store.CountDeadLetters(ctx, c.pool, queue, group)
}
