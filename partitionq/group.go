package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/pglock"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// GroupSpec describes a consumer group to set up.
type GroupSpec struct {
	// Queue is the engine queue; it is created when missing.
	Queue string
	// Group names the consumer group. Letters, digits, '_', '.', '-'.
	Group string
	// Slots is the fixed number N of slots (1 to MaxSlots).
	Slots int
	// TickMaxLag, when not zero, sets the queue's ticker_max_lag: the
	// longest a committed event waits for a tick while the ticker runs
	// (PgQ's own default is 3s). Defaults to leaving the queue as it is.
	TickMaxLag time.Duration
	// DedupWindow, when not zero, sets the queue's dedup window: how long a
	// Message.DedupID sent to it is remembered (MinDedupWindow to
	// MaxDedupWindow; docs/guarantees.md, "Send once"). It is the queue's,
	// for every group. Defaults to leaving the queue as it is
	// (DedupWindowDefault until set).
	DedupWindow time.Duration
}

// Group is a consumer group as the engine knows it.
type Group struct {
	Queue string
	Group string
	Slots int
	// Consumers holds the engine consumer name of each slot, by slot.
	Consumers []string
	subIDs    []int32
}

// SetupResult says what Setup changed.
type SetupResult struct {
	Group
	QueueCreated bool
	// Registered is how many slot consumers were registered now (0 when the
	// group already existed).
	Registered int
	// DedupWindow is the queue's dedup window after the setup.
	DedupWindow time.Duration
}

// Setup creates the queue when missing, registers one engine consumer per
// slot, and creates partitionq's own schema (dead letters, audit). It is
// idempotent. When the group exists with another number of slots it fails
// with a *SlotCountMismatchError naming both. ctx governs the whole call,
// which runs in one transaction.
func (c *Client) Setup(ctx context.Context, spec GroupSpec) (SetupResult, error) {
	if err := ValidateQueueName(spec.Queue); err != nil {
		return SetupResult{}, err
	}
	if err := ValidateGroupName(spec.Group); err != nil {
		return SetupResult{}, err
	}
	if err := ValidateSlots(spec.Slots); err != nil {
		return SetupResult{}, err
	}
	if spec.TickMaxLag < 0 {
		return SetupResult{}, &ValidationError{Field: "GroupSpec.TickMaxLag", Value: spec.TickMaxLag.String(), Problem: "it is negative", Fix: "use 0 to keep the queue's setting, or a positive duration"}
	}
	if err := spec.checkDedupWindow(); err != nil {
		return SetupResult{}, err
	}
	if err := c.migrate(ctx); err != nil {
		return SetupResult{}, err
	}
	var res SetupResult
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// Serialize concurrent setups of one group.
		if err := pglock.XactName(ctx, tx, pglock.SetupName(spec.Queue, spec.Group)); err != nil {
			return err
		}
		created, err := c.eng.CreateQueue(ctx, tx, spec.Queue)
		if err != nil {
			return err
		}
		res.QueueCreated = created
		existing, err := c.lookupGroup(ctx, tx, spec.Queue, spec.Group)
		switch {
		case err == nil && existing.Slots != spec.Slots:
			return &SlotCountMismatchError{Queue: spec.Queue, Group: spec.Group, Existing: existing.Slots, Requested: spec.Slots}
		case err != nil && !errors.Is(err, ErrNoSuchGroup):
			return err
		}
		for s := 0; s < spec.Slots; s++ {
			isNew, err := c.eng.RegisterConsumer(ctx, tx, spec.Queue, consumerName(spec.Group, s, spec.Slots))
			if err != nil {
				return err
			}
			if isNew {
				res.Registered++
			}
		}
		if spec.TickMaxLag > 0 {
			if err := c.eng.SetQueueConfig(ctx, tx, spec.Queue, "ticker_max_lag", fmt.Sprintf("%d milliseconds", spec.TickMaxLag.Milliseconds())); err != nil {
				return err
			}
		}
		if res.DedupWindow, err = setupDedupWindow(ctx, tx, spec); err != nil {
			return err
		}
		g, err := c.lookupGroup(ctx, tx, spec.Queue, spec.Group)
		if err != nil {
			return err
		}
		res.Group = g
		// The slots' ownership rows (workers take them over from here on).
		return store.AddSlots(ctx, tx, spec.Queue, spec.Group, spec.Slots)
	})
	if err != nil {
		return SetupResult{}, err
	}
	c.log.InfoContext(ctx, "partitionq: group set up", slog.String("queue", spec.Queue), slog.String("group", spec.Group),
		slog.Int("slots", spec.Slots), slog.Bool("queue_created", res.QueueCreated), slog.Int("registered", res.Registered))
	return res, nil
}

// Group reads a consumer group from the engine, including its number of
// slots. It fails with ErrNoSuchQueue or ErrNoSuchGroup when they are
// missing. ctx governs the queries.
func (c *Client) Group(ctx context.Context, queue, group string) (Group, error) {
	if err := ValidateQueueName(queue); err != nil {
		return Group{}, err
	}
	if err := ValidateGroupName(group); err != nil {
		return Group{}, err
	}
	return c.lookupGroup(ctx, c.pool, queue, group)
}

// QueueExists reports whether the queue exists in the engine.
func (c *Client) QueueExists(ctx context.Context, queue string) (bool, error) {
	if err := ValidateQueueName(queue); err != nil {
		return false, err
	}
	_, ok, err := c.eng.QueueID(ctx, c.pool, queue)
	return ok, err
}

// Groups lists the consumer groups registered on queue.
func (c *Client) Groups(ctx context.Context, queue string) ([]Group, error) {
	if err := ValidateQueueName(queue); err != nil {
		return nil, err
	}
	if _, ok, err := c.eng.QueueID(ctx, c.pool, queue); err != nil {
		return nil, err
	} else if !ok {
		return nil, noSuchQueue(queue)
	}
	subs, err := c.eng.Subscriptions(ctx, c.pool, queue, "")
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, s := range subs {
		if g, _, _, ok := parseConsumerName(s.Consumer); ok {
			names[g] = true
		}
	}
	var out []Group
	for g := range names {
		grp, err := c.lookupGroup(ctx, c.pool, queue, g)
		if err != nil {
			return nil, err
		}
		out = append(out, grp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

func (c *Client) lookupGroup(ctx context.Context, db engine.DB, queue, group string) (Group, error) {
	if _, ok, err := c.eng.QueueID(ctx, db, queue); err != nil {
		return Group{}, err
	} else if !ok {
		return Group{}, noSuchQueue(queue)
	}
	subs, err := c.eng.Subscriptions(ctx, db, queue, consumerPrefix(group))
	if err != nil {
		return Group{}, err
	}
	n := 0
	bySlot := map[int]engine.Subscription{}
	for _, s := range subs {
		g, slot, sn, ok := parseConsumerName(s.Consumer)
		if !ok || g != group {
			continue
		}
		if n != 0 && sn != n {
			return Group{}, fmt.Errorf("group %q on queue %q is inconsistent: it has consumers for %d and for %d slots: unregister the stray consumers (see docs/operations.md)", group, queue, n, sn)
		}
		n = sn
		bySlot[slot] = s
	}
	if n == 0 {
		return Group{}, noSuchGroup(queue, group)
	}
	g := Group{Queue: queue, Group: group, Slots: n, Consumers: make([]string, n), subIDs: make([]int32, n)}
	for s := 0; s < n; s++ {
		sub, ok := bySlot[s]
		if !ok {
			return Group{}, fmt.Errorf("group %q on queue %q misses the consumer of slot %d of %d: run partitionq setup again with %d slots", group, queue, s, n, n)
		}
		g.Consumers[s], g.subIDs[s] = sub.Consumer, sub.SubID
	}
	return g, nil
}

// SlotOf returns the slot of key in a group of n slots. The server computes
// it with the same expression the workers filter with, so it is exact:
// (hashtextextended(key, 0) % n + n) % n, upstream PgQue's routing. Events
// without a key (NULL ev_extra1, sent by other producers) go to slot 0.
func (c *Client) SlotOf(ctx context.Context, key string, n int) (int, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := ValidateSlots(n); err != nil {
		return 0, err
	}
	return engine.SlotOf(ctx, c.pool, key, n)
}

// slots returns the parked-state names of every slot of g.
func (c *Client) slots(g Group) []parked.Slot {
	out := make([]parked.Slot, g.Slots)
	for s := range g.Slots {
		out[s] = parked.Slot{Queue: g.Queue, Group: g.Group, Consumer: g.Consumers[s], Slot: s, SubID: g.subIDs[s]}
	}
	return out
}
