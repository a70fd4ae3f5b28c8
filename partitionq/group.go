package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/pglock"

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
	// Slots is the number N of slots (1 to MaxSlots). Setup creates the
	// group with it and refuses another N for an existing group
	// (*SlotCountMismatchError): Client.Resize changes it online.
	Slots int
	// TickMaxLag, when not zero, sets the queue's ticker_max_lag: the
	// longest a committed event waits for a tick while the ticker runs
	// (PgQ's own default is 3s). Defaults to TickMaxLagDefault on a queue
	// that Setup creates (the engine then ticks whenever the ticker runs and
	// events wait: they become visible within the ticker's interval, 100ms
	// by default), and to leaving an existing queue as it is.
	TickMaxLag time.Duration
	// DedupWindow, when not zero, sets the queue's dedup window: how long a
	// Message.DedupID sent to it is remembered (MinDedupWindow to
	// MaxDedupWindow; docs/guarantees.md, "Send once"). It is the queue's,
	// for every group. Defaults to leaving the queue as it is
	// (DedupWindowDefault until set).
	DedupWindow time.Duration
}

// Group is a consumer group as the engine and partitionq's schema know it.
type Group struct {
	Queue string
	Group string
	// Slots is the number of slots of the group's current generation: the
	// newest one, which a resize in flight moves the group to.
	Slots int
	// Generation numbers the current generation: 1 for a group never
	// resized, one more with every resize.
	Generation int
	// Consumers holds the engine consumer name of each slot of the current
	// generation, by slot ("" for a slot whose consumer a resize has not
	// registered yet: it is registered at the resize's cutover tick).
	Consumers []string
	// Resize describes the resize in flight; nil when there is none.
	Resize *ResizeState
	subIDs []int32
	gens   []generation // every live generation, oldest first; the last is the current one
}

// ResizeState is a resize in flight (see Client.Resize).
type ResizeState struct {
	// From and To are the numbers of slots before and after.
	From, To int
	// Generation is the number of the generation the resize makes.
	Generation int
	StartedAt  time.Time
	// StartedBy is the database role that started it, Actor and Reason what
	// it said.
	StartedBy, Actor, Reason string
	// Cutover is the tick at which the new slots take over: events
	// committed before it belong to the old slots, after it to the new
	// ones. 0 while no tick after the resize exists (the queue's ticker
	// makes it).
	Cutover int64
	// Remaining lists the old slots not yet handed off to the new ones: each
	// drains its events up to the cutover, then hands its blocked keys over.
	Remaining []int
}

// generation is one generation of a group's slots, as the engine has its
// consumers: consumers[s] is "" (and subIDs[s] 0) for a slot whose consumer
// is not registered (handed off, or not yet at its cutover).
type generation struct {
	n, number  int
	consumers  []string
	subIDs     []int32
	parent     int     // the N of the generation before (0: none)
	parentNum  int     // its number
	parentSubs []int32 // its consumers' subscriptions (the new slots' reads take their retries)
	cutover    int64
	resizing   bool // made by a resize in flight
}

func (g generation) registered() int {
	k := 0
	for _, c := range g.consumers {
		if c != "" {
			k++
		}
	}
	return k
}

// gen returns the live generation with n slots.
func (g Group) gen(n int) (generation, bool) {
	for _, x := range g.gens {
		if x.n == n {
			return x, true
		}
	}
	return generation{}, false
}

// old returns the old generation of a resize in flight.
func (g Group) old() (generation, bool) {
	if len(g.gens) < 2 {
		return generation{}, false
	}
	return g.gens[0], true
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
	// TickMaxLag is the ticker_max_lag the setup gave the queue (0: it left
	// the queue's as it was).
	TickMaxLag time.Duration
}

// TickMaxLagDefault is the ticker_max_lag Setup gives a queue it creates
// (GroupSpec.TickMaxLag): shorter than any ticker interval, so that every
// run of the ticker ticks while events wait. The engine skips a tick while
// its newest is younger than the lag, so a lag equal to the interval (10
// ms each) skipped about every other run, and events waited up to two
// intervals.
const TickMaxLagDefault = time.Millisecond

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
		if created {
			// A queue dropped by the engine's own drop_queue leaves the
			// records of its groups behind (generations, slots, progress);
			// they describe consumers that no longer exist. The queue is
			// new: its group starts without them.
			if err := store.DropGroupState(ctx, tx, spec.Queue, spec.Group); err != nil {
				return err
			}
		}
		existing, err := c.lookupGroup(ctx, tx, spec.Queue, spec.Group)
		switch {
		case err == nil && existing.Slots != spec.Slots:
			return &SlotCountMismatchError{Queue: spec.Queue, Group: spec.Group, Existing: existing.Slots, Requested: spec.Slots, Resizing: existing.Resize}
		case err == nil && existing.Resize != nil:
			// A resize to these slots is in flight: its cutover registers them.
			res.Group = existing
			return nil
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
		lag := spec.TickMaxLag
		if lag == 0 && created {
			lag = TickMaxLagDefault
		}
		if lag > 0 {
			if err := c.eng.SetQueueConfig(ctx, tx, spec.Queue, "ticker_max_lag", fmt.Sprintf("%d milliseconds", lag.Milliseconds())); err != nil {
				return err
			}
			res.TickMaxLag = lag
		}
		if res.DedupWindow, err = setupDedupWindow(ctx, tx, spec); err != nil {
			return err
		}
		// The group's first generation and its slots' ownership rows
		// (workers take them over from here on).
		if err := store.EnsureGeneration(ctx, tx, c.eng.Schema(), spec.Queue, spec.Group); err != nil {
			return err
		}
		g, err := c.lookupGroup(ctx, tx, spec.Queue, spec.Group)
		if err != nil {
			return err
		}
		res.Group = g
		return nil
	})
	if err != nil {
		return SetupResult{}, err
	}
	c.log.InfoContext(ctx, "partitionq: group set up", slog.String("queue", spec.Queue), slog.String("group", spec.Group),
		slog.Int("slots", spec.Slots), slog.Bool("queue_created", res.QueueCreated), slog.Int("registered", res.Registered))
	return res, nil
}

// Group reads a consumer group from the engine, including its number of
// slots and its slots' consumers. It fails with ErrNoSuchQueue or
// ErrNoSuchGroup when they are missing. ctx governs the queries. Groups
// lists the groups of a queue, or of every queue.
func (c *Client) Group(ctx context.Context, queue, group string) (Group, error) {
	if err := ValidateQueueName(queue); err != nil {
		return Group{}, err
	}
	if err := ValidateGroupName(group); err != nil {
		return Group{}, err
	}
	return c.lookupGroup(ctx, c.pool, queue, group)
}

func (c *Client) lookupGroup(ctx context.Context, db engine.DB, queue, group string) (Group, error) {
	if _, ok, err := c.eng.QueueID(ctx, db, queue); err != nil {
		return Group{}, err
	} else if !ok {
		return Group{}, noSuchQueue(queue)
	}
	// The generations first, then the consumers: a resize moves on
	// between the two reads (a slot handed off unregisters its consumer,
	// the last one ends the old generation), and read in this order every
	// consumer found belongs to a generation read.
	rows, err := store.Generations(ctx, db, queue, group)
	if err != nil {
		return Group{}, err
	}
	subs, err := c.eng.Subscriptions(ctx, db, queue, consumerPrefix(group))
	if err != nil {
		return Group{}, err
	}
	byN := map[int]map[int]engine.Subscription{}
	for _, s := range subs {
		g, slot, sn, ok := parseConsumerName(s.Consumer)
		if !ok || g != group {
			continue
		}
		if byN[sn] == nil {
			byN[sn] = map[int]engine.Subscription{}
		}
		byN[sn][slot] = s
	}
	recorded := len(rows) > 0
	if !recorded { // a group set up before generations were recorded: its consumers are its first
		if len(byN) == 0 {
			return Group{}, noSuchGroup(queue, group)
		}
		if len(byN) > 1 {
			ns := make([]int, 0, len(byN))
			for n := range byN {
				ns = append(ns, n)
			}
			sort.Ints(ns)
			return Group{}, fmt.Errorf("group %q on queue %q is inconsistent: it has consumers for %d and for %d slots and no record of a resize: unregister the stray consumers (see docs/operations.md)", group, queue, ns[0], ns[1])
		}
		for n := range byN {
			rows = []store.Generation{{Slots: n, Number: 1}}
		}
	}
	g := Group{Queue: queue, Group: group}
	for _, r := range rows {
		x := generation{n: r.Slots, number: r.Number, consumers: make([]string, r.Slots), subIDs: make([]int32, r.Slots),
			parent: r.Parent, parentNum: r.ParentNumber, parentSubs: r.ParentSubs, cutover: r.Cutover, resizing: r.Resizing}
		for s, sub := range byN[r.Slots] {
			if s < r.Slots {
				x.consumers[s], x.subIDs[s] = sub.Consumer, sub.SubID
			}
		}
		delete(byN, r.Slots)
		g.gens = append(g.gens, x)
		if r.Resizing {
			g.Resize = &ResizeState{From: r.Parent, To: r.Slots, Generation: r.Number, StartedAt: r.CreatedAt,
				StartedBy: r.CreatedBy, Actor: r.Actor, Reason: r.Reason, Cutover: r.Cutover}
		}
	}
	for n := range byN {
		return Group{}, fmt.Errorf("group %q on queue %q has engine consumers for %d slots, which is none of its generations: unregister the stray consumers (see docs/operations.md)", group, queue, n)
	}
	cur := g.gens[len(g.gens)-1]
	g.Slots, g.Generation, g.Consumers, g.subIDs = cur.n, cur.number, cur.consumers, cur.subIDs
	if g.Resize != nil {
		old := g.gens[0]
		for s, c := range old.consumers {
			if c != "" {
				g.Resize.Remaining = append(g.Resize.Remaining, s)
			}
		}
	}
	// A generation not being resized has every slot's consumer.
	for _, x := range g.gens {
		if (g.Resize == nil || (x.n != g.Resize.From && x.n != g.Resize.To)) && x.registered() != x.n {
			if x.registered() == 0 {
				return Group{}, noSuchGroup(queue, group)
			}
			for s, c := range x.consumers {
				if c == "" {
					return Group{}, fmt.Errorf("group %q on queue %q misses the consumer of slot %d of %d: run partitionq setup again with %d slots", group, queue, s, x.n, x.n)
				}
			}
		}
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

// allSlots returns the parked-state names of every registered slot of
// every live generation of g (both, during a resize).
func (c *Client) allSlots(g Group) []parked.Slot {
	var out []parked.Slot
	for _, x := range g.gens {
		out = append(out, genSlots(g, x)...)
	}
	return out
}

func genSlots(g Group, x generation) []parked.Slot {
	var out []parked.Slot
	for s := range x.n {
		if x.consumers[s] != "" {
			out = append(out, parked.Slot{Queue: g.Queue, Group: g.Group, Consumer: x.consumers[s], N: x.n, Generation: x.number, Slot: s, SubID: x.subIDs[s]})
		}
	}
	return out
}
