package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/dbtest"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// ---------------------------------------------------------------- one database

// The runner's tests share one database with the engine and partitionq's
// schema, as parked's and store's do: the first test that needs
// it makes it and TestMain drops it. Each test works on a queue of its own.
// A runner commits its own transactions (it opens, reads and finishes
// batches on its pool), so unlike parked's tests these cannot roll back
// what they check: the queue of each test is its sandbox.
var shared dbtest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Close(m.Run())) }

// ---------------------------------------------------------------- a group

const group = "g"

var queues atomic.Int64

// groupRig is a consumer group of n slots on a queue of its own, set up
// (committed) as Client.Setup does: the queue, whose ticker ticks as soon
// as events wait, one engine consumer per slot, the first generation with
// an ownership row per slot.
type groupRig struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	eng   *engine.Engine
	queue string
	n     int
	gen   int
	cons  []string
	subs  []int32
	sent  int64 // the queue's newest tick after the last send
}

func newGroup(t *testing.T, n int) *groupRig {
	t.Helper()
	pool, eng := shared.Get(t)
	ctx := context.Background()
	g := &groupRig{t: t, ctx: ctx, pool: pool, eng: eng, queue: fmt.Sprintf("runner_%d", queues.Add(1)), n: n}
	for s := range n {
		g.cons = append(g.cons, fmt.Sprintf("%s#%d/%d", group, s, n))
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, g.queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, g.queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		for _, c := range g.cons {
			if _, err := eng.RegisterConsumer(ctx, tx, g.queue, c); err != nil {
				return err
			}
		}
		return store.EnsureGeneration(ctx, tx, eng.Schema(), g.queue, group)
	})
	if err != nil {
		t.Fatal(err)
	}
	subs, err := eng.Subscriptions(ctx, pool, g.queue, group+"#")
	if err != nil {
		t.Fatal(err)
	}
	bySub := map[string]int32{}
	for _, s := range subs {
		bySub[s.Consumer] = s.SubID
	}
	for _, c := range g.cons {
		sub, ok := bySub[c]
		if !ok {
			t.Fatalf("no subscription of consumer %s: %+v", c, subs)
		}
		g.subs = append(g.subs, sub)
	}
	if err := pool.QueryRow(ctx, `select number from partitionq.generation where queue = $1 and grp = $2 and slots = $3`,
		g.queue, group, n).Scan(&g.gen); err != nil {
		t.Fatal(err)
	}
	return g
}

// send sends one event per key given, in that order, in one transaction,
// and ticks, so that they are in one batch of each slot; it returns their
// ids. An event's data is its key and its place among the key's events of
// this send ("a1", "a2").
func (g *groupRig) send(keys ...string) []int64 {
	g.t.Helper()
	evs := make([]engine.NewEvent, len(keys))
	count := map[string]int{}
	for i, k := range keys {
		count[k]++
		evs[i] = engine.NewEvent{Key: k, Type: "T", Data: fmt.Sprintf("%s%d", k, count[k])}
	}
	var ids []int64
	var xid string
	err := pgx.BeginFunc(g.ctx, g.pool, func(tx pgx.Tx) error {
		var err error
		if ids, err = g.eng.InsertMany(g.ctx, tx, g.queue, evs); err != nil {
			return err
		}
		return tx.QueryRow(g.ctx, `select pg_current_xact_id()::text`).Scan(&xid)
	})
	if err != nil {
		g.t.Fatal(err)
	}
	// Tick until a tick sees the events. The tests tick at once, each its
	// own queue, but the engine's ticker ticks every queue: another test's
	// tick that began before the events committed may leave the queue
	// looking ticked (PgQ compares event sequence numbers, taken before
	// the commit), so the engine is asked to tick it regardless.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := g.eng.ForceTick(g.ctx, g.pool, g.queue); err != nil {
			g.t.Fatal(err)
		}
		if _, err := g.eng.TickAndAnnounce(g.ctx, g.pool); err != nil {
			g.t.Fatal(err)
		}
		err := g.pool.QueryRow(g.ctx, fmt.Sprintf(`select t.tick_id from %[1]s.tick t join %[1]s.queue q on q.queue_id = t.tick_queue
			where q.queue_name = $1 and pg_visible_in_snapshot($2::xid8, t.tick_snapshot::text::pg_snapshot)
			order by t.tick_id limit 1`, g.eng.Schema()), g.queue, xid).Scan(&g.sent)
		if err == nil {
			return ids
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			g.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("no tick of queue %s sees the events sent after 10 s", g.queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRead waits until every slot given finished its batches up to the
// tick of the last send: its events are all resolved or set aside, and
// what its batches left is committed. (A slot's consumer moves past a tick
// only when its batch is finished, or, for a slot a probe's read found no
// event of its own for, without one.)
func (g *groupRig) waitRead(slots ...int) {
	g.t.Helper()
	cons := make([]string, len(slots))
	for i, s := range slots {
		cons[i] = g.cons[s]
	}
	waitFor(g.t, fmt.Sprintf("slots %v read up to tick %d", slots, g.sent), func() bool {
		pos, err := g.eng.Positions(g.ctx, g.pool, g.queue, cons)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, p := range pos {
			if p < g.sent {
				return false
			}
		}
		return true
	})
}

// keyPerSlot returns a key of every slot of the group: the first of
// prefix0, prefix1, ... that the server routes to it.
func (g *groupRig) keyPerSlot(prefix string) map[int]string {
	g.t.Helper()
	var keys []string
	for i := range 10 * g.n {
		keys = append(keys, fmt.Sprintf("%s%d", prefix, i))
	}
	slotOf := g.slotsOf(keys)
	keyOf := map[int]string{}
	for _, k := range keys {
		if _, ok := keyOf[slotOf[k]]; !ok {
			keyOf[slotOf[k]] = k
		}
	}
	if len(keyOf) < g.n {
		g.t.Fatalf("%d keys cover only %d of %d slots", len(keys), len(keyOf), g.n)
	}
	return keyOf
}

// slotsOf asks the server for the slot of every key, with the routing
// expression of docs/architecture.md.
func (g *groupRig) slotsOf(keys []string) map[string]int {
	g.t.Helper()
	rows, err := g.pool.Query(g.ctx, `select k, ((hashtextextended(k, 0) % $2 + $2) % $2)::int from unnest($1::text[]) k`, keys, g.n)
	if err != nil {
		g.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var s int
		if err := rows.Scan(&k, &s); err != nil {
			g.t.Fatal(err)
		}
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		g.t.Fatal(err)
	}
	return out
}

// slot is slot s as package parked names it, for reads of its retry queue.
func (g *groupRig) slot(s int) parked.Slot {
	return parked.Slot{Queue: g.queue, Group: group, Consumer: g.cons[s], N: g.n, Slot: s, SubID: g.subs[s]}
}

// parkedIDs returns the ids of key's parked events in slot s, in the order
// they run.
func (g *groupRig) parkedIDs(s int, key string) []int64 {
	g.t.Helper()
	evs, err := parked.Events(g.ctx, g.pool, g.eng, g.slot(s), key, 100)
	if err != nil {
		g.t.Fatal(err)
	}
	var ids []int64
	for _, ev := range evs {
		ids = append(ids, ev.ID)
	}
	return ids
}

// config is a runner's configuration for slots of the group, with short
// intervals: the public package's defaults but for the times.
func (g *groupRig) config(slots []int, policy runner.Policy, h runner.Handler) runner.Config {
	stats := map[int]*runner.Stats{}
	for _, s := range slots {
		stats[s] = &runner.Stats{}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("PQ_TEST_LOG") != "" { // the runner's debug log, as the public package's tests take it
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", g.t.Name())
	}
	// A pool of the runner's own, as a worker has: the lease session holds
	// one of its connections for good, and the package's pool is small
	// (max(4, CPUs)) and shared by the tests running at once.
	pcfg := g.pool.Config()
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(g.ctx, pcfg)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(pool.Close) // after the runner's stop, registered later
	return runner.Config{
		Eng: g.eng, Pool: pool, Log: log,
		Queue: g.queue, Group: group, N: g.n, Generation: g.gen, Slots: slots, Consumers: g.cons, SubIDs: g.subs,
		Stats: stats, Identity: g.t.Name(), SchemaVersion: store.Latest(),
		Concurrency: 4, DrainConcurrency: 2, Policy: policy,
		Backoff:      func(int) time.Duration { return 10 * time.Millisecond },
		Handle:       h,
		Keys:         &runner.KeyGuard{},
		PollInterval: 50 * time.Millisecond, StandbyPoll: 50 * time.Millisecond, HeadScanInterval: 50 * time.Millisecond,
		ChunkSize: 100, BatchMaxEvents: 5000, MaxReaders: 2,
		Progress: true, ProgressMax: 4096, FlushInterval: 5 * time.Millisecond,
		LeaseTTL: 5 * time.Second, LeaseRenew: time.Second, LeaseMargin: time.Second,
	}
}

// running is a Runner running; stop stops it (at the latest in the
// test's cleanup).
type running struct {
	t          *testing.T
	stats      map[int]*runner.Stats
	cancelStop context.CancelFunc
	cancelHard context.CancelFunc
	done       chan error
	once       sync.Once
}

// handled counts the events the runner's slots handled.
func (r *running) handled() int64 {
	var n int64
	for _, st := range r.stats {
		n += st.Handled.Load()
	}
	return n
}

// start runs a runner with cfg and waits until it owns all its slots.
func (g *groupRig) start(cfg runner.Config) *running {
	g.t.Helper()
	stop, cancelStop := context.WithCancel(context.Background())
	hard, cancelHard := context.WithCancel(context.Background())
	r := &running{t: g.t, stats: cfg.Stats, cancelStop: cancelStop, cancelHard: cancelHard, done: make(chan error, 1)}
	ready := make(chan error, 1)
	rn := runner.New(cfg)
	go func() { r.done <- rn.Run(stop, hard, func(err error) { ready <- err }) }()
	g.t.Cleanup(r.stop)
	if err := <-ready; err != nil {
		g.t.Fatal(err)
	}
	waitFor(g.t, "the runner owns its slots", func() bool {
		for _, st := range cfg.Stats {
			if !st.Owned.Load() {
				return false
			}
		}
		return true
	})
	return r
}

// stop stops the runner gracefully, cancelling its handlers' contexts at
// once (its shutdown timeout is zero), and waits for Run to return.
func (r *running) stop() {
	r.once.Do(func() {
		r.cancelStop()
		r.cancelHard()
		select {
		case err := <-r.done:
			if err != nil {
				r.t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			r.t.Errorf("Run did not return within 30 s of its stop")
		}
	})
}

// waitFor waits until cond holds, failing the test after 10 s
// (pgtest.WaitFor).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	pgtest.WaitFor(t, 10*time.Second, what, func() (bool, error) { return cond(), nil })
}

// ---------------------------------------------------------------- what ran

// call is one handler call as the handler saw it.
type call struct {
	id      int64
	key     string
	slot    int
	batch   int64
	attempt int
	ok      bool
}

// calls records handler calls; safe for concurrent use.
type calls struct {
	mu  sync.Mutex
	all []call
}

func (c *calls) add(x call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, x)
}

func (c *calls) list() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.all...)
}

// of returns the calls of key, in the order they were made.
func (c *calls) of(key string) []call {
	var out []call
	for _, x := range c.list() {
		if x.key == key {
			out = append(out, x)
		}
	}
	return out
}

// handler records every call and returns what fail says (nil: done).
func (c *calls) handler(fail func(runner.Call) *runner.Result) runner.Handler {
	return func(_ context.Context, rc runner.Call) runner.Result {
		res := runner.Result{}
		if fail != nil {
			if r := fail(rc); r != nil {
				res = *r
			}
		}
		c.add(call{id: rc.Event.ID, key: rc.Event.Key, slot: rc.Slot, batch: rc.Batch, attempt: rc.Attempt, ok: res.Err == nil})
		return res
	}
}
