package partitionq

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// DropGroupRequest names a group to drop.
type DropGroupRequest struct {
	Queue, Group string
	// Force drops the group even when events are set aside in its retry
	// queue (blocked keys and the events waiting behind them): they are
	// dropped with it. Without Force such a group is refused.
	Force  bool
	Reason string
	Actor  string
}

// DropGroup unregisters every slot consumer of a group, so that it no
// longer holds back the queue's table rotation (for example the old group
// after a change of N: docs/operations.md). It refuses while a live worker
// owns any slot, and, without Force, while events are set aside. The queue,
// its other groups and the group's dead letters and audit trail stay, and
// stay within reach (DeadLetters, Replay, PurgeMatching, Audit) without setting the
// group up again. ctx governs the call,
// which runs in one transaction and is recorded in the audit trail.
func (c *Client) DropGroup(ctx context.Context, r DropGroupRequest) error {
	if err := validateActorReason(r.Actor, r.Reason); err != nil {
		return err
	}
	g, err := c.Group(ctx, r.Queue, r.Group)
	if err != nil {
		return err
	}
	owners, err := c.owners(ctx, r.Queue, r.Group)
	if err != nil {
		return err
	}
	for k, o := range owners {
		if o.Live {
			return fmt.Errorf("slot %d of group %q is owned by a live worker (%s on %s, process %d): stop the group's workers first", k.Slot, r.Group, o.Identity, o.Host, o.OSPid)
		}
	}
	slots := c.allSlots(g)
	subs := make([]int32, len(slots))
	for i, s := range slots {
		subs[i] = s.SubID
	}
	if err := c.migrate(ctx); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		counts, err := c.eng.RetryCountsOf(ctx, tx, subs)
		if err != nil {
			return err
		}
		var aside int64
		for _, rc := range counts {
			aside += rc.Timed + rc.Parked
		}
		if aside > 0 && !r.Force {
			return &SetAsideError{Queue: r.Queue, Group: r.Group, Count: aside}
		}
		for _, s := range slots {
			if err := c.eng.UnregisterConsumer(ctx, tx, r.Queue, s.Consumer); err != nil {
				return fmt.Errorf("unregister %q: %w", s.Consumer, err)
			}
		}
		if err := parked.Drop(ctx, tx, slots); err != nil {
			return err
		}
		if err := store.DropGroupState(ctx, tx, r.Queue, r.Group); err != nil {
			return err
		}
		return store.Audit(ctx, tx, store.AuditEntry{Actor: c.actor(r.Actor), Action: string(AuditDropGroup), Queue: r.Queue, Group: r.Group,
			Reason: r.Reason, Outcome: fmt.Sprintf("dropped %d slots, %d events set aside dropped", len(slots), aside)})
	})
}

// SetAsideError refuses to drop a group (DropGroupRequest without Force)
// while events are set aside in its retry queue: blocked keys and the
// events waiting behind them. Nothing changed.
type SetAsideError struct {
	Queue, Group string
	Count        int64 // the events set aside
}

func (e *SetAsideError) Error() string {
	return fmt.Sprintf("group %q has %d events set aside (blocked keys and their waiting events): resolve them (BlockedKeys, then Act: skip or quarantine) "+
		"or drop them with the group (DropGroupRequest.Force)", e.Group, e.Count)
}
