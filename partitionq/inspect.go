package partitionq

import (
	"context"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Owner is the live worker that owns a slot.
type Owner struct {
	Name string // the worker's Identity
	Host string // the worker's host name
	PID  int32  // the worker's operating-system process id (on Host)
	// BackendPID is the PostgreSQL server process of the worker's lease
	// session (0 behind a connection pooler): not the worker's own process.
	BackendPID int32
	Addr       string    // the lease session's client address, "local" for a socket, "" when the role may not see it
	Since      time.Time // when the worker took the slot
	// Epoch is the slot's ownership epoch: raised by every takeover; the
	// fencing token handlers see as Event.Epoch.
	Epoch int64
	// LeaseLeft is how long the worker's lease lasts without a renewal
	// (renewed about every LeaseDuration/5).
	LeaseLeft time.Duration
}

// SlotStatus is the engine's view of one slot, read-only.
type SlotStatus struct {
	Slot     int
	Consumer string // the slot's engine consumer
	Owner    *Owner // nil when no live worker owns the slot
	// Lag is the age of the last tick the slot finished: how far behind
	// the slot's reading is.
	Lag time.Duration
	// LastSeen is how long ago the slot last took or finished a batch.
	LastSeen time.Duration
	// InBatch is true while the slot has an open batch.
	InBatch bool
	// QueuePending is the engine's pending count: events of the whole
	// queue after the slot's position, all keys included.
	QueuePending int64
	// PendingEstimate is QueuePending / N: an estimate of the slot's own
	// share, exact only when keys spread evenly. Labelled "est." in output.
	PendingEstimate int64
	// Position is the queue's event sequence at the last tick the slot
	// finished: it only grows, by every event of the queue (all slots) the
	// slot has read past. The change of Position over time, divided by N,
	// estimates the slot's read rate.
	Position int64
	// BlockedKeys counts keys whose parked head failed (pause policy).
	BlockedKeys int
	// DrainingKeys counts keys whose failed head was resolved and whose
	// parked events now run in order (KeyDraining); they need no action.
	DrainingKeys int
	// SetAside counts the slot's events in the engine's retry queue: parked
	// heads and the events waiting behind them, plus skip-policy retries.
	SetAside int64
	// LongestBlocked is how long the slot's longest-blocked key has been
	// blocked: since its head first failed (by the server's clock); 0 when
	// no key of the slot is blocked.
	LongestBlocked time.Duration
}

// GroupStatus is a group's status.
type GroupStatus struct {
	Queue, Group string
	Slots        int
	Engine       string // engine schema
	SlotStatus   []SlotStatus
	DeadLetters  int64 // not yet replayed
	// Head is the queue's event sequence at its newest tick: the change of
	// Head over time is the rate at which events arrive (all keys).
	Head int64
	At   time.Time
}

// Status reads the status of every slot of a group. It is read-only and
// cheap: a fixed number of catalog and engine queries whatever the number
// of slots, no scan of the event tables. ctx governs the queries.
func (c *Client) Status(ctx context.Context, queue, group string) (GroupStatus, error) {
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return GroupStatus{}, err
	}
	infos, err := c.eng.ConsumerInfos(ctx, c.pool, queue, consumerPrefix(group))
	if err != nil {
		return GroupStatus{}, err
	}
	owners, err := c.owners(ctx, queue, group)
	if err != nil {
		return GroupStatus{}, err
	}
	counts, err := c.eng.RetryCountsOf(ctx, c.pool, g.subIDs)
	if err != nil {
		return GroupStatus{}, err
	}
	gs := GroupStatus{Queue: queue, Group: group, Slots: g.Slots, Engine: c.eng.Schema(), At: time.Now()}
	byName := map[string]int{}
	for i, name := range g.Consumers {
		byName[name] = i
		gs.SlotStatus = append(gs.SlotStatus, SlotStatus{Slot: i, Consumer: name})
	}
	for _, in := range infos {
		i, ok := byName[in.Consumer]
		if !ok {
			continue
		}
		s := &gs.SlotStatus[i]
		s.Lag, s.LastSeen, s.InBatch = in.Lag, in.LastSeen, in.CurrentBatch != nil
		s.QueuePending, s.Position = in.PendingEvents, in.Position
		gs.Head = max(gs.Head, in.Head)
		s.PendingEstimate = in.PendingEvents / int64(g.Slots)
	}
	anyParked := false
	for i, sub := range g.subIDs {
		s := &gs.SlotStatus[i]
		if o, ok := owners[i]; ok && o.Live {
			s.Owner = &Owner{Name: o.Identity, Host: o.Host, PID: int32(o.OSPid), BackendPID: int32(o.BackendPID), Addr: o.Addr,
				Since: o.Since, Epoch: o.Epoch, LeaseLeft: o.LeaseLeft}
		}
		rc := counts[sub]
		s.SetAside = rc.Timed + rc.Parked
		anyParked = anyParked || rc.Parked > 0
	}
	if anyParked { // blocked or draining: the heads tell (two more queries)
		heads, err := parked.Heads(ctx, c.pool, c.eng, c.slots(g), nil)
		if err != nil {
			return GroupStatus{}, err
		}
		for _, h := range heads {
			switch {
			case !h.Parked():
			case h.Draining():
				gs.SlotStatus[h.Slot].DrainingKeys++
			default:
				s := &gs.SlotStatus[h.Slot]
				s.BlockedKeys++
				if h.Failure != nil {
					s.LongestBlocked = max(s.LongestBlocked, h.Failure.Age)
				}
			}
		}
	}
	if gs.DeadLetters, err = c.countDeadLetters(ctx, queue, group); err != nil {
		return GroupStatus{}, err
	}
	return gs, nil
}

// owners reads the recorded owner of every slot of a group (none when
// partitionq's schema is not installed yet).
func (c *Client) owners(ctx context.Context, queue, group string) (map[int]lease.Owner, error) {
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return nil, err
	}
	return lease.Owners(ctx, c.pool, queue, group)
}
