package partitionq

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Bounds of HotKeys (docs/operations.md and docs/cli.md state them): a
// group with at most hotKeysExactMax pending events has them all counted by
// key; a larger backlog is sampled, about hotKeysSample events (by page),
// each key's count estimated with a 95% interval; the key of each slot's
// oldest pending event is looked for among the first hotKeysWindow events
// after the slots' positions.
const (
	hotKeysExactMax = 200_000
	hotKeysSample   = 30_000
	hotKeysWindow   = 20_000
)

// KeyPending is a key's pending events: the events of its slot's share
// that the slot has not finished (as SlotStatus.Pending counts them).
type KeyPending struct {
	Key  string
	Slot int
	// Pending is the count, or the estimate when HotKeys.Exact is false.
	Pending int64
	// Error is the half-width of the estimate's 95% interval (Pending ±
	// Error); 0 when counted exactly.
	Error int64
}

// KeyAge is the key of a slot's oldest pending event.
type KeyAge struct {
	Slot int
	Key  string
	Age  time.Duration // how long ago that event was sent
}

// HotKeys are the keys that weigh on a group's slots.
type HotKeys struct {
	Queue, Group string
	// Pending is the group's pending events (Status's); Exact says whether
	// they were all counted by key (up to 200,000 pending events), else
	// Sampled of them were read (about 30,000) and each key's count is
	// estimated.
	Pending int64
	Exact   bool
	Sampled int64
	// Top are the keys with the most pending events, the most first, at
	// most the top asked for.
	Top []KeyPending
	// Busiest is, by slot, the slot's key with the most pending events
	// (Key "" and Pending 0 for a slot with none).
	Busiest []KeyPending
	// Oldest is, for each slot with a pending event among the first 20,000
	// events after the slots' positions, the key of its oldest one, the
	// oldest first.
	Oldest []KeyAge
}

// HotKeys lists the keys of a group with the most pending events (top of
// them), each slot's busiest key, and the keys of the slots' oldest
// pending events, in bounded time: counted exactly up to 200,000 pending
// events, estimated from a sample above (HotKeys.Exact says which;
// KeyPending.Error bounds each estimate at 95%). Keyless events count under
// the key "". It reads no payload. ctx governs the queries.
func (c *Client) HotKeys(ctx context.Context, queue, group string, top int) (HotKeys, error) {
	if top < 1 || top > 10000 {
		return HotKeys{}, &ValidationError{Field: "top", Value: strconv.Itoa(top), Problem: "it must be between 1 and 10000", Fix: "ask for the top 10, say"}
	}
	st, err := c.Status(ctx, queue, group) // brings the census up to date; the total
	if err != nil {
		return HotKeys{}, err
	}
	return c.hotKeys(ctx, st, top)
}

// hotKeys is HotKeys on the group of a status just read.
func (c *Client) hotKeys(ctx context.Context, st GroupStatus, top int) (HotKeys, error) {
	queue, group := st.Queue, st.Group
	// While the census catches up the group's total is a range: estimates
	// scale to its middle, and their error takes in its half-width.
	total, spread := (st.Pending+st.PendingMax)/2, (st.PendingMax-st.Pending+1)/2
	exactMax := int64(hotKeysExactMax)
	if st.PendingMax > hotKeysExactMax {
		exactMax = 0 // sampled, scaled to the total's middle
	}
	rows, err := store.GroupKeys(ctx, c.pool, c.eng.Schema(), queue, group, st.Slots, top, total, exactMax, hotKeysSample, hotKeysWindow)
	if err != nil {
		return HotKeys{}, c.backlogErr(err)
	}
	hk := HotKeys{Queue: queue, Group: group, Pending: st.Pending, Busiest: make([]KeyPending, st.Slots)}
	for i := range hk.Busiest {
		hk.Busiest[i].Slot = i
	}
	var keys []KeyPending
	for _, r := range rows {
		switch r.Kind {
		case "meta":
			hk.Sampled, hk.Exact = r.Pending, r.Err == 0
		case "key":
			kp := KeyPending{Key: r.Key, Slot: r.Slot, Pending: r.Pending, Error: r.Err}
			if r.Err > 0 && total > 0 && st.PendingMax > st.Pending {
				kp.Error += int64(float64(r.Pending) / float64(total) * float64(spread))
			}
			keys = append(keys, kp)
			if r.Slot >= 0 && r.Slot < len(hk.Busiest) && kp.Pending > hk.Busiest[r.Slot].Pending {
				hk.Busiest[r.Slot] = kp
			}
		case "oldest":
			hk.Oldest = append(hk.Oldest, KeyAge{Slot: r.Slot, Key: r.Key, Age: r.Oldest})
		}
	}
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].Pending != keys[j].Pending {
			return keys[i].Pending > keys[j].Pending
		}
		return keys[i].Key < keys[j].Key
	})
	hk.Top = keys[:min(top, len(keys))]
	sort.SliceStable(hk.Oldest, func(i, j int) bool { return hk.Oldest[i].Age > hk.Oldest[j].Age })
	if hk.Exact {
		hk.Sampled = 0
	}
	return hk, nil
}
