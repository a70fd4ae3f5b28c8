package partitionq

import (
	"context"
	"sort"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// GroupOverview sums up one consumer group for the list of groups
// (Groups): enough to see which group needs a look, not a slot-by-slot
// status (see Status; Group has its consumers).
type GroupOverview struct {
	Queue, Group string
	Slots        int // N
	// Owned counts the slots a live worker owns; Slots - Owned are not
	// being handled.
	Owned int
	// Workers names the live workers owning slots of the group (their
	// Identity), sorted, each once.
	Workers []string
	// Backlog is the engine's pending count of the group's slowest slot:
	// events of the queue (all keys) after that slot's last finished tick.
	// It bounds from above what any one slot has left to read.
	Backlog int64
	// Lag is the largest slot lag: the age of the oldest last finished tick.
	Lag time.Duration
	// SetAside counts the group's events in the engine's retry queue
	// (blocked heads, the events waiting behind them, timed retries).
	SetAside int64
	// BlockedKeys counts keys whose head, set aside, failed; DrainingKeys
	// those whose failed head was resolved and whose events set aside now
	// run.
	BlockedKeys, DrainingKeys int
	// DeadLetters counts the group's dead letters not yet replayed.
	DeadLetters int64
	// Generation is the current generation's number; Resize, when not nil,
	// the resize in flight (Slots is then its new number of slots).
	Generation int
	Resize     *ResizeState
	// Broken, when not empty, says why the group's consumers do not form a
	// whole group (a slot's consumer missing, or consumers for two values of
	// N); its other counts then cover the consumers found.
	Broken string
	// Dropped is set for a group that has no consumers any more (dropped,
	// DropGroup) but dead letters not yet replayed: they wait for a
	// decision (replay or purge), which works on a dropped group. Its Slots
	// and other counts are 0.
	Dropped bool
}

// GroupsQuery says which consumer groups Groups lists.
type GroupsQuery struct {
	// Queue, when not empty, lists the groups of this queue only; the
	// queue must exist (Groups fails with ErrNoSuchQueue otherwise).
	// Defaults to "": every group of every queue.
	Queue string
}

// Groups lists the consumer groups of q.Queue, or of every queue when it is
// empty, sorted by queue and group, with their owners, backlog, blocked keys
// and dead letters, and the dropped groups that left dead letters not yet
// replayed (Dropped). It fails with ErrNoSuchQueue when q.Queue is set and
// the queue does not exist: that is checked first, with a read of the
// engine's catalog that every role may make, so even a role that may not
// read the groups (a producer) learns whether its queue exists. It reads
// the groups all at once: at most seven queries (ten when some key has
// events set aside), one more with q.Queue, whatever the number of queues,
// groups and slots. ctx governs the queries. Group reads one group with its consumers.
func (c *Client) Groups(ctx context.Context, q GroupsQuery) ([]GroupOverview, error) {
	if q.Queue != "" {
		if err := ValidateQueueName(q.Queue); err != nil {
			return nil, err
		}
		if _, ok, err := c.eng.QueueID(ctx, c.pool, q.Queue); err != nil {
			return nil, err
		} else if !ok {
			return nil, noSuchQueue(q.Queue)
		}
	}
	cons, err := c.eng.AllConsumers(ctx, c.pool, q.Queue)
	if err != nil {
		return nil, err
	}
	type gk struct{ queue, group string }
	type slotCons struct {
		sub  int32
		name string
	}
	gens, err := store.AllGenerations(ctx, c.pool, q.Queue)
	if err != nil {
		return nil, err
	}
	gensOf := map[gk][]store.Generation{}
	for _, x := range gens {
		k := gk{x.Queue, x.Group}
		gensOf[k] = append(gensOf[k], x.Generation)
	}
	byGroup := map[gk]*GroupOverview{}
	slotsOf := map[gk]map[lease.SlotKey]slotCons{}
	var order []gk
	var subs []int32
	for _, in := range cons {
		g, slot, n, ok := parseConsumerName(in.Consumer)
		if !ok {
			continue
		}
		k := gk{in.Queue, g}
		ov := byGroup[k]
		if ov == nil {
			ov = &GroupOverview{Queue: in.Queue, Group: g, Slots: n, Generation: 1}
			for _, x := range gensOf[k] { // the newest generation's
				ov.Slots, ov.Generation = x.Slots, x.Number
				if x.Resizing {
					ov.Resize = &ResizeState{From: x.Parent, To: x.Slots, Generation: x.Number, StartedAt: x.CreatedAt,
						StartedBy: x.CreatedBy, Actor: x.Actor, Reason: x.Reason, Cutover: x.Cutover}
				}
			}
			byGroup[k], slotsOf[k] = ov, map[lease.SlotKey]slotCons{}
			order = append(order, k)
		}
		known := n == ov.Slots || (ov.Resize != nil && n == ov.Resize.From)
		if !known {
			ov.Broken = "it has consumers for two numbers of slots and no resize records them: unregister the stray consumers (see docs/operations.md)"
			continue
		}
		if ov.Resize != nil && n == ov.Resize.From {
			ov.Resize.Remaining = append(ov.Resize.Remaining, slot)
		}
		slotsOf[k][lease.SlotKey{N: n, Slot: slot}] = slotCons{in.SubID, in.Consumer}
		subs = append(subs, in.SubID)
		ov.Backlog = max(ov.Backlog, in.PendingEvents)
		ov.Lag = max(ov.Lag, in.Lag)
	}
	for _, k := range order {
		ov := byGroup[k]
		if ov.Resize != nil {
			sort.Ints(ov.Resize.Remaining)
			continue // some slots of both generations may have no consumer
		}
		if ov.Broken == "" && len(slotsOf[k]) != ov.Slots {
			ov.Broken = "some slots have no consumer: run partitionq setup again with the same number of slots"
		}
	}
	installed, err := store.Installed(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	if installed {
		owners, err := lease.AllOwners(ctx, c.pool, q.Queue)
		if err != nil {
			return nil, err
		}
		workers := map[gk]map[string]bool{}
		for _, o := range owners {
			k := gk{o.Queue, o.Group}
			ov := byGroup[k]
			if _, known := slotsOf[k][lease.SlotKey{N: o.N, Slot: o.Slot}]; ov == nil || !o.Live || !known {
				continue
			}
			ov.Owned++
			if workers[k] == nil {
				workers[k] = map[string]bool{}
			}
			workers[k][o.Identity] = true
		}
		for k, names := range workers {
			for n := range names {
				byGroup[k].Workers = append(byGroup[k].Workers, n)
			}
			sort.Strings(byGroup[k].Workers)
		}
		counts, err := store.CountAllDeadLetters(ctx, c.pool, q.Queue)
		if err != nil {
			return nil, err
		}
		for _, dc := range counts {
			k := gk{dc.Queue, dc.Group}
			ov := byGroup[k]
			if ov == nil { // a dropped group whose dead letters wait
				ov = &GroupOverview{Queue: dc.Queue, Group: dc.Group, Dropped: true}
				byGroup[k] = ov
				order = append(order, k)
			}
			ov.DeadLetters = dc.Pending
		}
	}
	if len(subs) > 0 {
		rc, err := c.eng.RetryCountsOf(ctx, c.pool, subs)
		if err != nil {
			return nil, err
		}
		var parkedSlots []parked.Slot
		for _, k := range order {
			for sk, sc := range slotsOf[k] {
				r := rc[sc.sub]
				byGroup[k].SetAside += r.Timed + r.Parked
				if r.Parked > 0 {
					parkedSlots = append(parkedSlots, parked.Slot{Queue: k.queue, Group: k.group, Consumer: sc.name, N: sk.N, Slot: sk.Slot, SubID: sc.sub})
				}
			}
		}
		if len(parkedSlots) > 0 && installed {
			heads, err := parked.Heads(ctx, c.pool, c.eng, parkedSlots, nil)
			if err != nil {
				return nil, err
			}
			for _, h := range heads {
				ov := byGroup[gk{h.Queue, h.Group}]
				switch {
				case ov == nil || !h.Parked():
				case h.Draining():
					ov.DrainingKeys++
				default:
					ov.BlockedKeys++
				}
			}
		}
	}
	out := make([]GroupOverview, 0, len(order))
	for _, k := range order {
		out = append(out, *byGroup[k])
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Group < out[j].Group
	})
	return out, nil
}
