package partitionq

import (
	"context"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/ownership"
)

// Owner is the live session that owns a slot.
type Owner struct {
	Name  string    // the worker's Identity (application_name of its session)
	PID   int32     // server process id of the owning session
	Addr  string    // client address, "local" for a socket, "" when the role may not see it
	Since time.Time // when the owning session connected (zero when the role may not see it)
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
// cheap: a few catalog and engine queries, no scan of the event tables.
// ctx governs the queries.
func (c *Client) Status(ctx context.Context, queue, group string) (GroupStatus, error) {
	g, err := c.Group(ctx, queue, group)
	if err != nil {
		return GroupStatus{}, err
	}
	infos, err := c.eng.ConsumerInfos(ctx, c.pool, queue, consumerPrefix(group))
	if err != nil {
		return GroupStatus{}, err
	}
	owners, err := ownership.Owners(ctx, c.pool, g.subIDs)
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
	for i, sub := range g.subIDs {
		s := &gs.SlotStatus[i]
		if o, ok := owners[sub]; ok {
			s.Owner = &Owner{Name: o.ApplicationName, PID: o.PID, Addr: o.ClientAddr}
			if o.BackendStart != nil {
				s.Owner.Since = *o.BackendStart
			}
		}
		timed, parked, err := c.eng.RetryCount(ctx, c.pool, sub)
		if err != nil {
			return GroupStatus{}, err
		}
		s.SetAside = timed + parked
		if parked > 0 {
			heads, err := c.eng.RetryHeads(ctx, c.pool, sub, nil)
			if err != nil {
				return GroupStatus{}, err
			}
			ids := make([]int64, len(heads))
			for j, h := range heads {
				ids[j] = h.ID
			}
			fails, err := c.failures(ctx, queue, g.Consumers[i], ids)
			if err != nil {
				return GroupStatus{}, err
			}
			for _, h := range heads {
				if _, ok := fails[h.ID]; neverFailed(h.Event, ok) {
					s.DrainingKeys++
				} else {
					s.BlockedKeys++
				}
			}
		}
	}
	if gs.DeadLetters, err = c.countDeadLetters(ctx, queue, group); err != nil {
		return GroupStatus{}, err
	}
	return gs, nil
}
