package partitionq

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
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
	// Member is the worker's member token (WorkerStatus.Member).
	Member string
}

// WorkerStatus is one live worker of a group (GroupStatus.Workers).
type WorkerStatus struct {
	Name string // the worker's Identity
	Host string // the worker's host name
	PID  int32  // the worker's operating-system process id (on Host)
	// Member is the worker's member token: unique to the worker process,
	// so that replicas started with one configuration (one Identity, even)
	// tell each other apart.
	Member string
	// Pinned lists the slots of a worker started with WorkerConfig.Pins
	// (it runs only these); nil for a worker that shares the group's slots
	// with the others.
	Pinned []int
	// Slots are the slots of the current generation it owns; OldSlots,
	// during a resize, those of the old generation not yet handed off.
	Slots, OldSlots []int
	// Share is how many of the current generation's slots it holds once
	// the moves under way are done: for a worker that shares the slots,
	// the floor or the ceil of the slots no pinned worker runs over the
	// number of such workers, as the workers compute it themselves
	// (docs/architecture.md, "Sharing the slots"); for a pinned one, its
	// pins.
	Share int
}

// SlotStatus is the engine's view of one slot, read-only.
type SlotStatus struct {
	Slot int
	// Slots is the number of slots of the slot's generation: the group's
	// (GroupStatus.Slots), or during a resize the old one's for the old
	// slots listed after the current generation's.
	Slots    int
	Consumer string // the slot's engine consumer ("" for a new slot before its resize's cutover)
	// Resize says what a slot does in a resize in flight (nil when none):
	// an old slot drains to the cutover, then hands off; a new one waits for
	// its parents, then runs.
	Resize *SlotResize
	Owner  *Owner // nil when no live worker owns the slot
	// MovingTo names the worker (its Identity) the slot is being handed to
	// (a graceful move to balance the group: the owner drains the slot,
	// then the other takes it); "" when none.
	MovingTo string
	// Lag is the age of the last tick the slot finished: how far behind
	// the slot's reading is.
	Lag time.Duration
	// LastSeen is how long ago the slot last took or finished a batch.
	LastSeen time.Duration
	// InBatch is true while the slot has an open batch.
	InBatch bool
	// Pending is the exact number of events of the slot's own share that it
	// has not finished: in the stream after the last tick it finished (read
	// or not yet, ticked or not yet), less those its open batch's recorded
	// progress marks resolved. An event set aside inside the open batch counts
	// until the batch finishes; from then on it is in SetAside, not here.
	Pending int64
	// PendingMax equals Pending when the count is exact. Otherwise (the
	// census of the queue is far behind: no tick for long, or it has just
	// started on a large backlog) Pending is what was counted and
	// PendingMax bounds the true count from above; it closes in on each
	// call. Never an estimate: the true count lies between the two.
	PendingMax int64
	// Oldest is the age of the oldest of the Pending events (by the time it
	// was sent); 0 when none.
	Oldest time.Duration
	// SinceFinish is how long ago the slot's owner last finished a batch;
	// negative when no worker of this version has finished one yet.
	SinceFinish time.Duration
	// Rates are the slot's handler outcomes per second, from the database:
	// they count every worker that owned the slot in the window.
	Rates Rates
	// QueuePending is the engine's pending count: events of the whole
	// queue after the slot's position, all keys included.
	QueuePending int64
	// Position is the queue's event sequence at the last tick the slot
	// finished: it only grows, by every event of the queue (all slots) the
	// slot has read past.
	Position int64
	// BlockedKeys counts keys whose head, set aside, failed (pause policy).
	BlockedKeys int
	// DrainingKeys counts keys whose failed head was resolved and whose
	// events set aside now run in order (KeyDraining); they need no action.
	DrainingKeys int
	// SetAside counts the slot's events set aside in the engine's retry
	// queue: blocked heads and the events waiting behind them, plus the
	// timed retries of PolicyRetryLater.
	SetAside int64
	// LongestBlocked is how long the slot's longest-blocked key has been
	// blocked: since its head first failed (by the server's clock); 0 when
	// no key of the slot is blocked.
	LongestBlocked time.Duration
}

// Rates are handler outcomes per second over the last 10 seconds and the
// last minute (whole seconds before the current one), as the workers record
// them in the database when they record progress and finish batches: they
// include every worker process. Handled counts handler calls that
// succeeded, Failed those that failed (each failed attempt once).
type Rates struct {
	Handled10s, Failed10s float64
	Handled1m, Failed1m   float64
}

// SlotResize is one slot's part in a resize in flight.
type SlotResize struct {
	// Old: the slot is of the old generation: it drains its events up to
	// the cutover tick, then hands its blocked keys to the new slots and
	// leaves the engine. AtCutover: it has drained to the cutover.
	Old, AtCutover bool
	// Parents are the old slots a new slot takes keys from (those equal to
	// it modulo gcd of the two N: one when the new N is a multiple of the
	// old, docs/architecture.md); Waiting lists those not
	// handed off yet: the new slot starts once none is left.
	Parents, Waiting []int
}

// GroupStatus is a group's status.
type GroupStatus struct {
	Queue, Group string
	// Slots is the number of slots (of the current generation), Generation
	// its number, Resize the resize in flight (nil: none).
	Slots      int
	Generation int
	Resize     *ResizeState
	Engine     string // engine schema
	// SlotStatus lists the current generation's slots, by slot, then during
	// a resize the old generation's slots not yet handed off.
	SlotStatus []SlotStatus
	// Workers are the group's live workers, in the order they started,
	// with the slots each owns and its share.
	Workers     []WorkerStatus
	DeadLetters int64 // not yet replayed
	// Pending is the sum of the slots' Pending (PendingMax of their
	// PendingMax), Rates the sum of their Rates.
	Pending, PendingMax int64
	Rates               Rates
	// Head is the queue's event sequence at its newest tick: the change of
	// Head over time is the rate at which events arrive (all keys).
	Head int64
	// Ticks is the queue's newest tick; Ticks.Stalled says that events wait
	// and nothing makes ticks (no slot reads them until a ticker runs).
	Ticks TickStatus
	// At is when the status was read: the database's clock at the read of
	// the rates, whose windows end at the start of At's second.
	At time.Time
}

// Status reads the status of every slot of a group. It runs a fixed number
// of queries whatever the number of slots, and whatever the backlog: each
// slot's Pending comes from the queue's census (partitionq's count of every
// tick range's events by slot, kept by the ticker and brought up to date
// here, at most 100,000 events a call: its only write), the events after
// the census's newest tick (at most 100,000 read; beyond, PendingMax bounds
// what was not read), and the open batches' recorded progress
// (docs/operations.md). ctx governs the queries.
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
	all := c.allSlots(g)
	subs := make([]int32, len(all))
	for i, s := range all {
		subs[i] = s.SubID
	}
	counts, err := c.eng.RetryCountsOf(ctx, c.pool, subs)
	if err != nil {
		return GroupStatus{}, err
	}
	gs := GroupStatus{Queue: queue, Group: group, Slots: g.Slots, Generation: g.Generation, Engine: c.eng.Schema(), At: time.Now()}
	if g.Resize != nil {
		r := *g.Resize
		gs.Resize = &r
	}
	at := map[lease.SlotKey]int{} // position in gs.SlotStatus
	byName := map[string]int{}
	add := func(x generation, s int) {
		at[lease.SlotKey{N: x.n, Slot: s}] = len(gs.SlotStatus)
		if x.consumers[s] != "" {
			byName[x.consumers[s]] = len(gs.SlotStatus)
		}
		gs.SlotStatus = append(gs.SlotStatus, SlotStatus{Slot: s, Slots: x.n, Consumer: x.consumers[s]})
	}
	cur := g.gens[len(g.gens)-1]
	for s := range cur.n {
		add(cur, s)
	}
	old, resizing := g.old()
	if resizing {
		for s := range old.n {
			if old.consumers[s] != "" {
				add(old, s)
			}
		}
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
		if resizing && s.Slots == old.n {
			s.Resize = &SlotResize{Old: true, AtCutover: g.Resize.Cutover != 0 && in.LastTick == g.Resize.Cutover && in.CurrentBatch == nil}
		}
	}
	if resizing {
		left := map[int]bool{}
		for _, s := range g.Resize.Remaining {
			left[s] = true
		}
		for s := range cur.n {
			r := &SlotResize{Parents: store.Parents(old.n, cur.n, s)}
			for _, p := range r.Parents {
				if left[p] {
					r.Waiting = append(r.Waiting, p)
				}
			}
			gs.SlotStatus[s].Resize = r
		}
	}
	ts, err := c.eng.TickState(ctx, c.pool, queue)
	if err != nil {
		return GroupStatus{}, err
	}
	gs.Ticks = tickStatus(ts)
	for _, x := range g.gens {
		if err := c.backlog(ctx, g, x, at, &gs); err != nil {
			return GroupStatus{}, err
		}
	}
	if err := c.workers(ctx, g, owners, &gs); err != nil {
		return GroupStatus{}, err
	}
	anyParked := false
	for _, sl := range all {
		s := &gs.SlotStatus[at[lease.SlotKey{N: sl.N, Slot: sl.Slot}]]
		if o, ok := owners[lease.SlotKey{N: sl.N, Slot: sl.Slot}]; ok && o.Live {
			s.Owner = &Owner{Name: o.Identity, Host: o.Host, PID: int32(o.OSPid), BackendPID: int32(o.BackendPID), Addr: o.Addr,
				Since: o.Since, Epoch: o.Epoch, LeaseLeft: o.LeaseLeft, Member: o.Member}
			for _, w := range gs.Workers {
				if o.MovingTo != "" && w.Member == o.MovingTo {
					s.MovingTo = w.Name
				}
			}
		}
		rc := counts[sl.SubID]
		s.SetAside = rc.Timed + rc.Parked
		anyParked = anyParked || rc.Parked > 0
	}
	if anyParked { // blocked or draining: the heads tell (two more queries)
		heads, err := parked.Heads(ctx, c.pool, c.eng, all, nil)
		if err != nil {
			return GroupStatus{}, err
		}
		for _, h := range heads {
			s := &gs.SlotStatus[at[lease.SlotKey{N: h.N, Slot: h.Slot}]]
			switch {
			case !h.Parked():
			case h.Draining():
				s.DrainingKeys++
			default:
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

// backlog fills in, for the slots of generation x, every slot's exact
// Pending and Oldest, its last finish and its rates: the recorded progress
// and the scan of the event tables run in one repeatable-read transaction,
// so that they see the same moment.
func (c *Client) backlog(ctx context.Context, g Group, x generation, at map[lease.SlotKey]int, gs *GroupStatus) error {
	if x.registered() == 0 {
		return nil
	}
	installed, err := store.Installed(ctx, c.pool)
	if err != nil {
		return err
	}
	for s := range x.n {
		if i, ok := at[lease.SlotKey{N: x.n, Slot: s}]; ok {
			gs.SlotStatus[i].SinceFinish = -1
		}
	}
	if installed {
		if _, err := store.Census(ctx, c.pool, c.eng.Schema(), g.Queue, x.n, censusBudget); err != nil {
			return c.backlogErr(err)
		}
	}
	return pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		spec := store.BacklogSpec{Engine: c.eng.Schema(), Queue: g.Queue, Grp: g.Group, N: x.n, Budget: backlogBudget,
			Batch: make([]int64, x.n), Below: make([]int64, x.n)}
		if installed {
			var slots []int32
			for s := 0; s < x.n; s++ {
				if _, ok := at[lease.SlotKey{N: x.n, Slot: s}]; ok {
					slots = append(slots, int32(s))
				}
			}
			stats, now, err := slotstats.Read(ctx, tx, g.Queue, g.Group, x.number, slots)
			if code := db.Code(err); code == db.CodeUndefinedTable || code == db.CodeUndefinedColumn {
				return fmt.Errorf("%w: partitionq's schema in this database is older than this version (no slot rates): run partitionq setup once as its owner to upgrade it", err)
			}
			if err != nil {
				return err
			}
			if !now.IsZero() {
				gs.At = now // the rates' window ends at the read's second, not Status's first
			}
			for _, st := range stats {
				i, ok := at[lease.SlotKey{N: x.n, Slot: st.Slot}]
				if !ok {
					continue
				}
				s := &gs.SlotStatus[i]
				s.SinceFinish = st.SinceFinish
				s.Rates = Rates(st.Rates)
				gs.Rates = Rates(slotstats.Rates(gs.Rates).Add(st.Rates))
				spec.Batch[st.Slot], spec.Below[st.Slot] = st.Batch, st.Done.Below
				for _, id := range st.Done.Above {
					spec.DoneSlots, spec.DoneIDs = append(spec.DoneSlots, int32(st.Slot)), append(spec.DoneIDs, id)
				}
			}
		}
		if !installed { // a group registered by hand: the census is partitionq's
			return store.ErrSchemaMissing
		}
		bl, err := store.GroupBacklog(ctx, tx, spec)
		if err != nil {
			return c.backlogErr(err)
		}
		for s, b := range bl {
			i, ok := at[lease.SlotKey{N: x.n, Slot: s}]
			if !ok || x.consumers[s] == "" {
				continue
			}
			gs.SlotStatus[i].Pending, gs.SlotStatus[i].PendingMax, gs.SlotStatus[i].Oldest = b.Pending, b.PendingMax, b.Oldest
			gs.Pending += b.Pending
			gs.PendingMax += b.PendingMax
		}
		return nil
	})
}

// Bounds of one Status call's work on the backlog (docs/operations.md
// states them): the census of the queue is brought up to date by at most
// censusBudget events (the ticker keeps it up to date as it ticks), and at
// most backlogBudget events after the census's newest tick are read;
// beyond, SlotStatus.PendingMax bounds what was not read.
const (
	censusBudget  = 100_000
	backlogBudget = 100_000
)

func (c *Client) backlogErr(err error) error {
	if db.IsInsufficientPrivilege(err) || db.Code(err) == db.CodeUndefinedFunction {
		return fmt.Errorf("%w: status counts each slot's pending events through partitionq.census and partitionq.group_backlog: run partitionq setup once as the owner (schema version %d), then sql/roles.sql (it grants them to partitionq_viewer and partitionq_worker)",
			err, store.Latest())
	}
	return err
}

// workers fills in the group's live workers (GroupStatus.Workers): who
// they are, the slots each owns (owners) and its share of the current
// generation, computed as the workers compute it.
func (c *Client) workers(ctx context.Context, g Group, owners map[lease.SlotKey]lease.Owner, gs *GroupStatus) error {
	if owners == nil { // partitionq's schema is not installed
		return nil
	}
	ws, err := lease.Workers(ctx, c.pool, g.Queue, g.Group)
	if err != nil {
		return err
	}
	cur := g.gens[len(g.gens)-1]
	v, _, err := lease.ReadView(ctx, c.pool, g.Queue, g.Group, cur.number, 0)
	if err != nil {
		return err
	}
	shares := lease.Shares(v)
	for _, w := range ws {
		ws := WorkerStatus{Name: w.Identity, Host: w.Host, PID: int32(w.OSPid), Member: w.Member, Pinned: w.Pins, Share: shares[w.Member]}
		if w.Pins != nil {
			for _, p := range w.Pins {
				if p < cur.n {
					ws.Share++
				}
			}
		}
		for k, o := range owners {
			if o.Member != w.Member || !o.Live {
				continue
			}
			if k.N == cur.n {
				ws.Slots = append(ws.Slots, k.Slot)
			} else {
				ws.OldSlots = append(ws.OldSlots, k.Slot)
			}
		}
		sort.Ints(ws.Slots)
		sort.Ints(ws.OldSlots)
		gs.Workers = append(gs.Workers, ws)
	}
	return nil
}

// owners reads the recorded owner of every slot of a group (none when
// partitionq's schema is not installed yet).
func (c *Client) owners(ctx context.Context, queue, group string) (map[lease.SlotKey]lease.Owner, error) {
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return nil, err
	}
	return lease.Owners(ctx, c.pool, queue, group)
}
