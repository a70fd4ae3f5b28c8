package partitionq

import (
	"context"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// keyEventsLimit is how many of a key's set-aside events, dead letters and
// dedup hits Client.Key returns at most (KeyInfo's docs say 20; so do
// docs/cli.md and partitionq key --help).
const keyEventsLimit = 20

// KeyInfo is everything about one key of a group that an operator looks
// for: where it runs, whether it flows, what waits and what died.
type KeyInfo struct {
	Queue, Group, Key string
	// Slot is the key's slot, of the generation with Slots slots: during a
	// resize, the old generation's until that slot is handed off.
	Slot  int
	Slots int
	// Owner is the live worker that owns the key's slot (nil: none).
	Owner *Owner
	// State is KeyFlowing, KeyBlocked or KeyDraining.
	State KeyState
	// Blocked describes the head and its failure when State is not
	// KeyFlowing (nil otherwise).
	Blocked *BlockedKey
	// SetAside holds the key's events in its slot's retry queue in the
	// order they will run, the head first: at most 20 (Blocked.Waiting + 1
	// is how many there are; Preview lists more). Events of the key not yet
	// read from the queue are not listed.
	SetAside []PreviewEvent
	// DeadLetters holds the key's newest dead letters, newest first, at most
	// 20; DeadLetterCount counts them all and PendingDeadLetters those not
	// yet replayed (DeadLetters with DeadLetterQuery.Key lists them all).
	DeadLetters        []DeadLetter
	DeadLetterCount    int64
	PendingDeadLetters int64
	// DedupHits holds the key's dedup records that refused duplicates
	// (Message.DedupID), the most recent hit first, at most 20:
	// those of the last dedup window or so (a record lives for its window,
	// then until maintenance removes it). Duplicates counts the duplicates
	// all of them refused; DedupWindow is the queue's window.
	DedupHits   []DedupHit
	Duplicates  int64
	DedupWindow time.Duration
}

// DedupHit is a dedup record that refused duplicates.
type DedupHit struct {
	DedupID string
	// EventID is the event first sent with the dedup id.
	EventID int64
	// Hits counts the duplicates refused; LastHit is the last one.
	Hits      int64
	SentAt    time.Time
	LastHit   time.Time
	ExpiresAt time.Time
}

// Key finds one key of a group: its slot and the slot's owner, its state
// (flowing, blocked, draining), its set-aside events, its dead letters and
// its recent dedup hits. A key the group has never seen is simply flowing,
// with nothing listed. ctx governs the queries: 15, whatever the number of
// slots and events.
func (c *Client) Key(ctx context.Context, queue, group, key string) (KeyInfo, error) {
	_, home, err := c.keyHome(ctx, queue, group, key)
	if err != nil {
		return KeyInfo{}, err
	}
	s := home.Slot
	ki := KeyInfo{Queue: queue, Group: group, Key: key, Slot: s, Slots: home.N, State: KeyFlowing}
	heads, err := parked.Heads(ctx, c.pool, c.eng, []parked.Slot{home}, &key)
	if err != nil {
		return KeyInfo{}, err
	}
	for _, h := range heads {
		if !h.Parked() {
			continue // a timed retry (retry-later policy): the key flows
		}
		bk := blockedKey(h)
		ki.Blocked, ki.State = &bk, bk.State
	}
	if ki.Blocked != nil || len(heads) > 0 {
		evs, err := parked.Events(ctx, c.pool, c.eng, home, key, keyEventsLimit)
		if err != nil {
			return KeyInfo{}, err
		}
		for i, ev := range evs {
			ki.SetAside = append(ki.SetAside, PreviewEvent{ID: ev.ID, Type: ev.Type, Payload: []byte(ev.Data), Time: ev.Time, Head: i == 0})
		}
	}
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return ki, err
	}
	owners, err := c.owners(ctx, queue, group)
	if err != nil {
		return KeyInfo{}, err
	}
	if o, found := owners[lease.SlotKey{N: home.N, Slot: s}]; found && o.Live {
		ki.Owner = &Owner{Name: o.Identity, Host: o.Host, PID: int32(o.OSPid), BackendPID: int32(o.BackendPID), Addr: o.Addr,
			Since: o.Since, Epoch: o.Epoch, LeaseLeft: o.LeaseLeft}
	}
	f := store.DeadLetterFilter{Queue: queue, Group: group, Key: &key, Newest: true, Limit: keyEventsLimit}
	dls, err := store.ListDeadLetters(ctx, c.pool, f)
	if err != nil {
		return KeyInfo{}, err
	}
	for _, d := range dls {
		ki.DeadLetters = append(ki.DeadLetters, fromStore(d))
	}
	if ki.DeadLetterCount, err = store.CountMatching(ctx, c.pool, f); err != nil {
		return KeyInfo{}, err
	}
	f.Pending = true
	if ki.PendingDeadLetters, err = store.CountMatching(ctx, c.pool, f); err != nil {
		return KeyInfo{}, err
	}
	if ki.DedupWindow, err = store.DedupWindow(ctx, c.pool, queue); err != nil {
		return KeyInfo{}, err
	}
	hits, total, err := store.DedupHits(ctx, c.pool, queue, key, keyEventsLimit)
	if err != nil {
		return KeyInfo{}, err
	}
	ki.Duplicates = total
	for _, h := range hits {
		ki.DedupHits = append(ki.DedupHits, DedupHit{DedupID: h.DedupID, EventID: h.EvID, Hits: h.Hits, SentAt: h.SentAt, LastHit: h.LastHitAt, ExpiresAt: h.ExpiresAt})
	}
	return ki, nil
}
