package partitionq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Send once (docs/guarantees.md): a message with a DedupID is sent at most
// once per queue within its dedup window.
const (
	// DedupWindowDefault is a queue's dedup window until GroupSpec.DedupWindow
	// sets one.
	DedupWindowDefault = store.DedupWindowDefault
	// MaxDedupWindow is the longest dedup window, of a queue or a message.
	// The dedup records of a queue are about its sends with dedup ids over
	// one window (docs/operations.md, "Dedup records").
	MaxDedupWindow = store.MaxDedupWindow
	// MinDedupWindow is the shortest dedup window.
	MinDedupWindow = store.MinDedupWindow
	// MaxDedupIDLen is the longest dedup id, in bytes.
	MaxDedupIDLen = store.MaxDedupIDLen
)

// DedupKeyError refuses a message whose DedupID was sent within its window
// with another key: a retry of a send carries the same key, so two keys
// under one dedup id are two different messages given one id by mistake.
// Nothing was sent. FirstEventID is 0 when the first message is earlier in
// the same batch.
type DedupKeyError struct {
	Queue, DedupID string
	Key            string // the refused message's key
	FirstKey       string // the key the dedup id was first sent with
	FirstEventID   int64
}

func (e *DedupKeyError) Error() string {
	first := "earlier in the same batch"
	if e.FirstEventID != 0 {
		first = fmt.Sprintf("as event %d", e.FirstEventID)
	}
	return fmt.Sprintf("dedup id %s of queue %q was sent with key %s %s, not with key %s: "+
		"a dedup id names one message, and a retry has its key: give this message a dedup id of its own, or send it with key %s",
		shorten(e.DedupID), e.Queue, shorten(e.FirstKey), first, shorten(e.Key), shorten(e.FirstKey))
}

// validateDedup checks DedupID and DedupWindow.
func (m Message) validateDedup() error {
	if m.DedupID == "" {
		if m.DedupWindow != 0 {
			return &ValidationError{Field: "dedup window", Value: m.DedupWindow.String(), Problem: "it is given without a dedup id, and only a dedup id has a window",
				Fix: "give the message a dedup id too, or leave the window out"}
		}
		return nil
	}
	if err := validateText("dedup id", m.DedupID, MaxDedupIDLen); err != nil {
		return err
	}
	if m.DedupWindow == 0 {
		return nil
	}
	return validateDedupWindow("dedup window", m.DedupWindow, "or 0 for the queue's window")
}

// validateDedupWindow checks a window of a message or a queue (field names it).
func validateDedupWindow(field string, w time.Duration, zero string) error {
	if w < MinDedupWindow || w > MaxDedupWindow {
		return &ValidationError{Field: field, Value: w.String(),
			Problem: fmt.Sprintf("a dedup window is from %s to %s", MinDedupWindow, fmtWindow(MaxDedupWindow)),
			Fix:     "give a duration in that range, " + zero}
	}
	return nil
}

// checkDedupWindow checks GroupSpec.DedupWindow.
func (s GroupSpec) checkDedupWindow() error {
	if s.DedupWindow == 0 {
		return nil
	}
	return validateDedupWindow("GroupSpec.DedupWindow", s.DedupWindow, "or 0 to keep the queue's window")
}

// setupDedupWindow sets the queue's dedup window when spec gives one, and
// returns the queue's window.
func setupDedupWindow(ctx context.Context, tx pgx.Tx, spec GroupSpec) (time.Duration, error) {
	if spec.DedupWindow != 0 {
		if err := store.SetDedupWindow(ctx, tx, spec.Queue, spec.DedupWindow); err != nil {
			return 0, err
		}
		return spec.DedupWindow, nil
	}
	return store.DedupWindow(ctx, tx, spec.Queue)
}

// fmtWindow writes a window in days when it is whole days.
func fmtWindow(w time.Duration) string {
	if w >= 24*time.Hour && w%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days (%s)", w/(24*time.Hour), w)
	}
	return w.String()
}

// sendOnce sends ms, some of which carry a DedupID, in one transaction (a
// savepoint of db when it is the caller's): it claims the dedup ids
// first, then inserts the events of the messages that own theirs (and of
// those without one) on the same path as other sends (COPY for large
// batches where the session may), then records each claimed id's event.
// An event is inserted only for a message whose send owns its id; a
// rolled-back send leaves no record.
func (c *Client) sendOnce(ctx context.Context, db engine.DB, queue string, ms []Message, evs []engine.NewEvent) ([]SendResult, error) {
	if err := c.migrate(ctx); err != nil {
		return nil, err
	}
	// The first message carrying an id claims it; the later ones of the
	// batch are its duplicates.
	first := map[string]int{}
	var claims []store.DedupClaim
	for i, m := range ms {
		if m.DedupID == "" {
			continue
		}
		j, seen := first[m.DedupID]
		if !seen {
			first[m.DedupID] = i
			claims = append(claims, store.DedupClaim{ID: m.DedupID, Key: m.Key, Count: 1, Window: m.DedupWindow})
			continue
		}
		if ms[j].Key != m.Key {
			return nil, batchError(len(ms), i, &DedupKeyError{Queue: queue, DedupID: m.DedupID, Key: m.Key, FirstKey: ms[j].Key})
		}
	}
	if len(claims) < countDedupIDs(ms) { // an id repeated in the batch: its hits
		counts := map[string]int{}
		for _, m := range ms {
			if m.DedupID != "" {
				counts[m.DedupID]++
			}
		}
		for k := range claims {
			claims[k].Count = counts[claims[k].ID]
		}
	}
	// One lock order for every send: two batches sharing ids cannot deadlock on them.
	slices.SortFunc(claims, func(a, b store.DedupClaim) int { return strings.Compare(a.ID, b.ID) })
	begin, ok := db.(txBeginner)
	if !ok {
		return nil, fmt.Errorf("partitionq: a send with dedup ids needs a pool or a transaction, not %T", db)
	}

	// A large batch claims its ids with a plain insert, a third of the
	// server's work of INSERT ... ON CONFLICT, which fails when an id has a
	// record (a duplicate, an expired record not yet removed) or a
	// concurrent send commits one meanwhile: the second try takes the ON
	// CONFLICT path. A small one takes that path at once.
	upsert := len(claims) < engine.BulkInsertMin
	res, err := c.sendOnceTx(ctx, begin, queue, ms, evs, first, claims, upsert)
	if !upsert && errors.Is(err, store.ErrClaimRace) {
		res, err = c.sendOnceTx(ctx, begin, queue, ms, evs, first, claims, true)
	}
	if err != nil {
		return nil, err
	}
	dups := 0
	for _, r := range res {
		if r.Duplicate {
			dups++
		}
	}
	c.countDuplicates(queue, dups)
	return res, nil
}

// sendOnceTx is one try of sendOnce, in one transaction (or savepoint) of
// begin: claim (upsert: on the ON CONFLICT path), insert, record.
func (c *Client) sendOnceTx(ctx context.Context, begin txBeginner, queue string, ms []Message, evs []engine.NewEvent,
	first map[string]int, claims []store.DedupClaim, upsert bool) ([]SendResult, error) {
	res := make([]SendResult, len(ms))
	err := pgx.BeginFunc(ctx, begin, func(tx pgx.Tx) error {
		found, err := store.ClaimDedup(ctx, tx, queue, claims, upsert)
		if err != nil {
			return err
		}
		var send []int // the messages whose events are inserted
		for i, m := range ms {
			switch o := found[m.DedupID]; {
			case m.DedupID == "":
				send = append(send, i)
			case first[m.DedupID] != i:
				// a later message of the batch: its first's result, below
			case o.Claimed:
				send = append(send, i)
			case o.Key != m.Key:
				return batchError(len(ms), i, &DedupKeyError{Queue: queue, DedupID: m.DedupID, Key: m.Key, FirstKey: o.Key, FirstEventID: o.EvID})
			default:
				res[i] = SendResult{ID: o.EvID, Duplicate: true}
			}
		}
		picked := make([]engine.NewEvent, len(send))
		for k, i := range send {
			picked[k] = evs[i]
		}
		ids, err := c.insert(ctx, tx, queue, picked)
		if err != nil {
			return err
		}
		var recIDs []string
		var recEvs []int64
		for k, i := range send {
			res[i].ID = ids[k]
			if ms[i].DedupID != "" {
				recIDs, recEvs = append(recIDs, ms[i].DedupID), append(recEvs, ids[k])
			}
		}
		if err := store.RecordDedup(ctx, tx, c.eng.Schema(), queue, recIDs, recEvs); err != nil {
			return err
		}
		for i, m := range ms {
			if f, ok := first[m.DedupID]; ok && f != i {
				res[i] = SendResult{ID: res[f].ID, Duplicate: true}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// txBeginner is a pool (a transaction) or a transaction (a savepoint).
type txBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// countDedupIDs counts the messages of ms with a DedupID.
func countDedupIDs(ms []Message) int {
	n := 0
	for _, m := range ms {
		if m.DedupID != "" {
			n++
		}
	}
	return n
}
