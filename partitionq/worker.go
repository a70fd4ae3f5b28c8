package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/partitionq/internal/ticker"
)

// chunkSize is how many events a slot reads from a batch's cursor at a
// time.
const chunkSize = 1000

// Worker runs slots of one consumer group. Start it once; Stop it once or
// more. It is safe for concurrent use.
//
// A worker follows the group through resizes (Client.Resize): it runs the
// slots of every live generation, the old one's until they are handed off
// and the new one's from the cutover on, without a restart. A worker
// started with WorkerConfig.Pins or WorkerConfig.SlotCount runs the slots of one
// generation only: when a resize ends that generation (its slots drained
// to the cutover and handed off), the worker stops, and Err returns a
// *ResizedError naming the new number of slots.
type Worker struct {
	c      *Client
	cfg    WorkerConfig
	group  Group // as NewWorker read it
	pinned int   // the one generation (its N) a worker with Slots or SlotCount runs; 0: every generation
	// adaptiveDrains: Limits.DrainConcurrency was left to its default,
	// a bound that starts at drainFloor and grows to it.
	adaptiveDrains bool
	log            *slog.Logger

	mu           sync.Mutex
	started      bool
	stoppedEarly bool        // Stop ran before Start
	running      atomic.Bool // Start succeeded (read without mu: Live, Ready)
	stopSoft     context.CancelFunc
	stopHard     context.CancelFunc
	done         chan struct{}

	errMu sync.Mutex
	err   error // why the worker stopped on its own (set before done closes)

	// The generations it runs (supervise), each a runner with a lease of
	// its own, on the worker's one pool.
	pool       *pgxpool.Pool
	soft, hard context.Context
	abort      context.CancelFunc // cancels soft (set before any run starts)
	genMu      sync.Mutex
	gens       map[int]*genRun // by N
	order      []int           // the Ns, in the order their runs started
	changed    chan struct{}   // the group's generations may have changed
	sig        atomic.Value    // string: store.Signature at the last look
	status     statusCache     // the metrics' gauges (one read for every generation)
	runners    sync.WaitGroup
	keys       runner.KeyGuard // one run of a key at a time, across the runs of every generation
	calls      runner.Calls    // handler calls in flight by slot, across the runs of every generation
	// member is this worker's member token in the group (the same for
	// every generation it runs): how the group's workers tell each other
	// apart when they share the slots.
	member string
}

// genRun is the run of one generation's slots.
type genRun struct {
	n       int
	number  int // the generation's number: a later one may have the same N
	slots   []int
	stats   map[int]*runner.Stats
	metrics *workerMetrics // nil without a Registerer
	runner  *runner.Runner
	ctx     context.Context // done once the run is asked to stop (stop)
	stop    context.CancelFunc
	done    chan struct{}
	err     error // why its runner returned (set before done closes)
}

// ResizedError reports that a worker pinned to one generation's slots
// (WorkerConfig.Pins or SlotCount, partitionq work --slots) stopped because a
// resize ended that generation: its slots were drained to the cutover and
// handed off to the new ones.
type ResizedError struct {
	Queue, Group string
	From, To     int // the worker's number of slots, and the group's now
}

func (e *ResizedError) Error() string {
	return fmt.Sprintf("group %q on queue %q was resized from %d to %d slots: this worker ran slots of the %d-slot generation (WorkerConfig.Pins or SlotCount, or --slots), which are drained and handed off; start it again with slots of %d, or without --slots to follow every resize",
		e.Group, e.Queue, e.From, e.To, e.From, e.To)
}

// NewWorker validates cfg and reads the group from the engine. ctx governs
// that read. It fails with ErrNoSuchQueue or ErrNoSuchGroup when the group
// is not set up, and with a *ValidationError for a bad config.
func (c *Client) NewWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	adaptiveDrains := cfg.Limits.DrainConcurrency == 0
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := c.Group(ctx, cfg.Queue, cfg.Group)
	if err != nil {
		return nil, err
	}
	w := &Worker{c: c, cfg: cfg, group: g, adaptiveDrains: adaptiveDrains, done: make(chan struct{}), gens: map[int]*genRun{}, changed: make(chan struct{}, 1),
		log: c.log.With(slog.String("queue", cfg.Queue), slog.String("group", cfg.Group)), member: newMemberToken()}
	switch {
	case cfg.SlotCount != 0:
		if _, ok := g.gen(cfg.SlotCount); !ok || (g.Resize != nil && cfg.SlotCount == g.Resize.To && g.Resize.Cutover == 0) {
			return nil, &SlotCountMismatchError{Queue: cfg.Queue, Group: cfg.Group, Existing: g.Slots, Requested: cfg.SlotCount}
		}
		w.pinned = cfg.SlotCount
	case len(cfg.Pins) > 0:
		w.pinned = g.Slots
		if g.Resize != nil && g.Resize.Cutover == 0 {
			w.pinned = g.Resize.From // the new generation has no consumers yet
		}
	}
	if w.pinned != 0 {
		if _, err := pickSlots(cfg.Pins, w.pinned); err != nil {
			return nil, err
		}
	}
	w.status.read = func(ctx context.Context) (GroupStatus, error) { return c.Status(ctx, cfg.Queue, cfg.Group) }
	w.status.readHot = func(ctx context.Context, gs GroupStatus) (HotKeys, error) { return c.hotKeys(ctx, gs, 1) }
	w.sig.Store("")
	return w, nil
}

// Connections a worker opens of its own, beside the client's pool: the
// lease session, the readers of open batches, one to open and finish
// batches and record progress, the drains of blocked keys, and one for the
// ticker.
const (
	workerReaders = 2
	workerFixed   = 1 + workerReaders + 2 + 1
)

// WorkerConns is the most connections a worker opens of its own with the
// default Limits.DrainConcurrency: a few for its lease, reads, finishes and ticker
// (6), plus one per blocked key it drains at once (at most 24; 8 until
// many keys block at once, and unused drain connections close after a
// minute). It depends on
// neither the number of slots nor the in-slot concurrency: a worker with
// 256 slots needs no more. With another DrainConcurrency d it is 6+d. While the group is being resized a
// worker running both generations' slots opens up to 6 more (a lease and
// readers for each generation). Count them, with the client's pool,
// against the server's max_connections.
//
// A worker keeps these connections in a pool of its own (made from the
// client's pool's configuration), never in the client's pool: drains hold
// theirs while handlers run, and a handler that queries the database
// through the client's pool must never wait for a connection that only its
// own return would free. Its connection attempts time out after the client's
// pool's connect_timeout, or 5s when that sets none: a worker must not wait
// forever on a server it cannot reach.
func WorkerConns() int { return workerConns(DrainConcurrencyDefault) }

func workerConns(drains int) int { return workerFixed + drains }

func pickSlots(want []int, n int) ([]int, error) {
	if len(want) == 0 {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, s := range want {
		if s < 0 || s >= n {
			return nil, &ValidationError{Field: "WorkerConfig.Pins", Value: strconv.Itoa(s),
				Problem: fmt.Sprintf("the group has slots 0 to %d", n-1), Fix: "list slots of the group, or none for all"}
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out, nil
}

// Start starts the worker's slots (and its ticker when Ticker is set)
// and returns once the worker holds its lease: each slot runs when this
// worker owns it, or waits as its standby. ctx is the worker's lifetime:
// cancelling it is the same as Stop. Start fails if the worker was started
// before, and when the server refuses to register the worker (for example
// a role without the rights of sql/roles.sql's worker role); when the
// server cannot be reached, Start returns and the worker keeps trying (the
// attempts are logged).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("partitionq: worker already started")
	}
	if w.stoppedEarly {
		return errors.New("partitionq: worker was stopped before it started: make a new one")
	}
	if w.cfg.Ticker != nil { // refuse at once: a ticker without the rights would fail every tick
		if err := ticker.CheckRights(ctx, w.c.eng, w.c.pool); err != nil {
			return err
		}
	}
	// The worker's own connections (see WorkerConns): none is opened before
	// it is needed; room for a second generation's lease and readers
	// during a resize.
	pcfg := w.c.pool.Config()
	pcfg.MaxConns = int32(workerConns(w.cfg.Limits.DrainConcurrency) + workerFixed)
	pcfg.MinConns, pcfg.MinIdleConns = 0, 0
	// Drains open connections as keys block; a minute after the last
	// use each is closed (the lease and reads use theirs all the time).
	if pcfg.MaxConnIdleTime <= 0 || pcfg.MaxConnIdleTime > time.Minute {
		pcfg.MaxConnIdleTime = time.Minute
	}
	if pcfg.ConnConfig.RuntimeParams == nil {
		pcfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = w.cfg.Identity
	if w.cfg.Ownership.DeadHostTimeout > 0 {
		pcfg.AfterConnect = deadHostTimeouts(w.cfg.Ownership.DeadHostTimeout, pcfg.AfterConnect)
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = connstr.ConnectTimeoutDefault
	}
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), pcfg)
	if err != nil {
		return fmt.Errorf("partitionq: the worker's connection pool: %w", err)
	}
	soft, stopSoft := context.WithCancel(ctx)
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	w.pool, w.soft, w.hard, w.abort = pool, soft, hard, stopSoft
	var readies []chan error
	for _, x := range w.wanted(w.group) {
		ready, err := w.startGen(x)
		if err != nil {
			stopSoft()
			w.runners.Wait()
			stopHard()
			pool.Close()
			w.stoppedEarly = true
			close(w.done)
			return err
		}
		readies = append(readies, ready)
	}
	for _, ready := range readies {
		if err := <-ready; err != nil {
			stopSoft()
			w.runners.Wait()
			stopHard()
			pool.Close()
			w.unregisterAll()
			w.stoppedEarly = true // done is closed: Start again needs a new worker
			close(w.done)
			return err
		}
	}
	w.started = true
	w.running.Store(true)
	w.stopSoft, w.stopHard = stopSoft, stopHard

	var wg sync.WaitGroup
	if t := w.cfg.Ticker; t != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticker.Run(soft, ticker.Config{Eng: w.c.eng, Pool: pool, Log: w.log,
				Interval: t.Interval, MaintInterval: t.MaintInterval})
		}()
	}
	superDone := make(chan struct{})
	go func() { defer close(superDone); w.supervise() }()
	wg.Add(1)
	go func() { defer wg.Done(); w.watchTicks(soft, pool) }() // warns when no tick comes (tickwatch.go)
	go func() {
		<-soft.Done()
		t := time.AfterFunc(w.cfg.Limits.ShutdownTimeout, stopHard)
		<-superDone
		w.runners.Wait()
		wg.Wait()
		t.Stop()
		stopHard()
		closePool(pool, w.log)
		w.unregisterAll()
		close(w.done)
	}()
	w.log.Info("partitionq: worker started", slog.Any("slots", w.slotsLogged()), slog.String("policy", string(w.cfg.Retry.Policy)),
		slog.Int("concurrency", w.cfg.Limits.Concurrency))
	return nil
}

// poolCloseWait bounds how long a stopping worker waits for its own
// connections to close.
const poolCloseWait = 2 * time.Second

// closePool closes the worker's own pool, waiting up to poolCloseWait. A
// connection whose statement a stop cancelled is closed by pgx in the
// background after a cancel request to the server, which a busy server
// can keep waiting for many seconds (pgx allows 15): the worker's slots
// are released by then, so the stop goes on and the pool finishes
// closing on its own.
func closePool(pool *pgxpool.Pool, log *slog.Logger) {
	closed := make(chan struct{})
	go func() { defer close(closed); pool.Close() }()
	t := time.NewTimer(poolCloseWait)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		log.Warn("partitionq: the worker's connections are still closing; the stop goes on without waiting for them", slog.Duration("waited", poolCloseWait))
	}
}

// wanted returns the generations of g the worker runs: every one with a
// registered consumer (during a resize the old one's slots not handed off,
// and the new one's from the cutover on), or only its pinned one.
func (w *Worker) wanted(g Group) []generation {
	var out []generation
	for _, x := range g.gens {
		if x.registered() == 0 || (w.pinned != 0 && x.n != w.pinned) {
			continue
		}
		out = append(out, x)
	}
	return out
}

// startGen starts the run of generation x's slots; ready receives the
// runner's registration result.
func (w *Worker) startGen(x generation) (chan error, error) {
	slots, err := pickSlots(w.cfg.Pins, x.n)
	if err != nil {
		return nil, err
	}
	if w.pinned == 0 {
		slots = slots[:0]
		for s := range x.n {
			if x.consumers[s] != "" {
				slots = append(slots, s)
			}
		}
	}
	gr := &genRun{n: x.n, number: x.number, slots: slots, stats: map[int]*runner.Stats{}, done: make(chan struct{})}
	for _, s := range slots {
		gr.stats[s] = &runner.Stats{}
	}
	if w.cfg.Registerer != nil {
		gr.metrics = newWorkerMetrics(w, gr)
		if err := gr.metrics.register(w.cfg.Registerer); err != nil {
			return nil, err
		}
	}
	stop, cancel := context.WithCancel(w.soft)
	gr.ctx, gr.stop = stop, cancel
	r := w.newRunner(x, gr)
	gr.runner = r
	ready := make(chan error, 1)
	w.genMu.Lock()
	w.gens[x.n] = gr
	w.order = append(w.order, x.n)
	w.genMu.Unlock()
	w.runners.Add(1)
	go func() {
		defer w.runners.Done()
		err := r.Run(stop, w.hard, func(err error) { ready <- err })
		gr.err = err
		close(gr.done)
		if err != nil && w.soft.Err() == nil {
			w.fail(err) // a runner that could not register: the worker stops
		}
		signal(w.changed)
	}()
	return ready, nil
}

// supervise follows the group's generations until the worker stops: when
// a lease renewal (or a notification) shows they changed, it starts the
// runs of new generations and stops those of generations that ended.
//
// A look that fails is tried again a second later, whatever the renewals
// show: a renewal signals a change once (when it sees the group's
// signature change), so waiting for the next one after a failed read
// missed the new generation for good (its slots stayed unowned).
func (w *Worker) supervise() {
	var retry <-chan time.Time
	for {
		select {
		case <-w.soft.Done():
			return
		case <-w.changed:
		case <-retry:
		}
		retry = nil
		ctx, cancel := context.WithTimeout(w.soft, 10*time.Second)
		g, err := w.c.lookupGroup(ctx, w.c.pool, w.cfg.Queue, w.cfg.Group)
		cancel()
		if err != nil {
			if w.soft.Err() == nil {
				w.log.Warn("partitionq: reading the group's generations failed; trying again in a second", slog.Any("error", err))
			}
			retry = time.After(time.Second)
			continue
		}
		want := map[int]generation{}
		for _, x := range w.wanted(g) {
			want[x.n] = x
		}
		w.genMu.Lock()
		var stop []*genRun
		for n, gr := range w.gens {
			select {
			case <-gr.done:
				delete(w.gens, n)
				continue
			default:
			}
			if x, ok := want[n]; !ok || x.number != gr.number {
				// Its generation ended: every slot of it was handed off. (A
				// later generation with the same N starts once this run is
				// done: its done signals changed.)
				stop = append(stop, gr)
			}
		}
		var start []generation
		for n, x := range want {
			if w.gens[n] == nil {
				start = append(start, x)
			}
		}
		w.genMu.Unlock()
		for _, gr := range stop {
			w.log.Info("partitionq: a generation of the group ended: its slots were handed off", slog.Int("slots", gr.n), slog.Int("now", g.Slots))
			gr.stop()
		}
		sort.Slice(start, func(i, j int) bool { return start[i].number < start[j].number })
		for _, x := range start {
			w.log.Info("partitionq: running the slots of a new generation of the group", slog.Int("slots", x.n), slog.Int("generation", x.number))
			if _, err := w.startGen(x); err != nil {
				w.log.Warn("partitionq: starting a generation's slots failed", slog.Int("slots", x.n), slog.Any("error", err))
			}
		}
		if w.pinned != 0 && len(want) == 0 {
			w.fail(&ResizedError{Queue: w.cfg.Queue, Group: w.cfg.Group, From: w.pinned, To: g.Slots})
			return
		}
	}
}

// fail stops the worker on its own, with err (the first one) as Err.
func (w *Worker) fail(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
	w.abort() // not under w.mu: Start may hold it while it waits for this runner
}

// onRenew runs in every lease renewal of the worker's runners: one more
// read in a transaction the lease makes anyway, which wakes the supervisor
// when the group's generations changed.
func (w *Worker) onRenew(ctx context.Context, tx pgx.Tx) error {
	sig, err := store.Signature(ctx, tx, w.cfg.Queue, w.cfg.Group)
	if err != nil {
		return err
	}
	if old, _ := w.sig.Swap(sig).(string); old != sig {
		signal(w.changed)
	}
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// unregisterAll takes the worker's metrics off its Registerer, so that a
// new worker of the same slots can register them.
func (w *Worker) unregisterAll() {
	w.genMu.Lock()
	defer w.genMu.Unlock()
	for _, n := range w.order {
		if gr := w.genByN(n); gr != nil && gr.metrics != nil {
			w.cfg.Registerer.Unregister(gr.metrics)
		}
	}
}

// genByN returns the run of generation n started last (genMu held).
func (w *Worker) genByN(n int) *genRun {
	return w.gens[n]
}

func (w *Worker) slotsLogged() []string {
	w.genMu.Lock()
	defer w.genMu.Unlock()
	var out []string
	for _, n := range w.order {
		if gr := w.gens[n]; gr != nil {
			out = append(out, fmt.Sprintf("%s of %d", slotList(gr.slots), n))
		}
	}
	return out
}

func (w *Worker) newRunner(x generation, gr *genRun) *runner.Runner {
	maxAttempts := max(w.cfg.Retry.MaxAttempts, 0)
	policy := runner.Pause
	if w.cfg.Retry.Policy == PolicyRetryLater {
		policy = runner.Skip
	}
	hto := max(w.cfg.Limits.HandlerTimeout, 0)
	maxEvents := max(w.cfg.Limits.BatchMinEvents, 0)
	lease := w.cfg.Ownership.LeaseDuration
	return runner.New(runner.Config{
		Eng: w.c.eng, Pool: w.pool, Log: w.log.With(slog.Int("slots", x.n)), Queue: w.cfg.Queue, Group: w.cfg.Group, N: x.n,
		Generation: x.number, Slots: gr.slots, Consumers: x.consumers, SubIDs: x.subIDs, Stats: gr.stats, Identity: w.cfg.Identity,
		Parent: x.parent, ParentGeneration: x.parentNum, ParentSubs: x.parentSubs, SchemaVersion: store.Latest(), OnRenew: w.onRenew,
		Member: w.member, Balance: len(w.cfg.Pins) == 0, LeaveTimeout: w.cfg.Limits.ShutdownTimeout,
		Concurrency: w.cfg.Limits.Concurrency, DrainConcurrency: w.cfg.Limits.DrainConcurrency, DrainFloor: w.drainFloor(), Policy: policy, MaxAttempts: maxAttempts,
		Backoff:        func(n int) time.Duration { return backoff(w.cfg.Retry.BackoffMin, w.cfg.Retry.BackoffMax, n) },
		HandlerTimeout: hto, Handle: w.handleFunc(gr), HandleRun: w.handleRunFunc(gr), MaxRun: w.cfg.Limits.MaxRun, Keys: &w.keys, Calls: &w.calls,
		PollInterval: w.cfg.Limits.PollInterval, StandbyPoll: w.cfg.Ownership.StandbyPoll, HeadScanInterval: w.cfg.Retry.HeadScanInterval,
		MaxBlocked: w.cfg.Retry.MaxBlocked.After, MaxBlockedDeadLetter: w.cfg.Retry.MaxBlocked.DeadLetter,
		ChunkSize: chunkSize, BatchMaxEvents: maxEvents, MaxReaders: workerReaders,
		Progress: !w.cfg.DisableProgress, ProgressMax: progressMax, FlushInterval: flushInterval,
		LeaseTTL: lease, LeaseRenew: lease / 5, LeaseMargin: lease / 5,
	})
}

// Progress recording limits: at most progressMax resolved ids above a
// slot's watermark are recorded (a few KiB), and flushes are at least
// flushInterval apart (each carries everything since the last).
const (
	progressMax   = 4096
	flushInterval = 5 * time.Millisecond
)

// drainFloor is where the runners' bound on drains starts: 0 (fixed) for
// a DrainConcurrency set in the config.
func (w *Worker) drainFloor() int {
	if !w.adaptiveDrains {
		return 0
	}
	return drainFloor
}

func (w *Worker) handleFunc(gr *genRun) runner.Handler {
	if w.takesRuns() {
		return nil
	}
	if h, ok := w.cfg.Handler.(inTx); ok {
		return w.instrument(gr.metrics, w.txHandleFunc(h.h))
	}
	return w.instrument(gr.metrics, func(ctx context.Context, c runner.Call) runner.Result {
		return result(w.cfg.Handler.Handle(ctx, w.event(c)))
	})
}

// takesRuns reports whether the worker's handler takes runs.
func (w *Worker) takesRuns() bool {
	switch w.cfg.Handler.(type) {
	case runs, runsInTx:
		return true
	}
	return false
}

func (w *Worker) handleRunFunc(gr *genRun) runner.RunHandler {
	switch h := w.cfg.Handler.(type) {
	case runs:
		return w.instrumentRun(gr.metrics, w.runHandleFunc(h.h))
	case runsInTx:
		return w.instrumentRun(gr.metrics, w.txRunHandleFunc(h.h))
	}
	return nil
}

func (w *Worker) event(c runner.Call) *Event {
	ev := c.Event
	return &Event{ID: ev.ID, Queue: w.cfg.Queue, Group: w.cfg.Group, Slot: c.Slot, Slots: c.N, Key: ev.Key,
		Type: ev.Type, Payload: []byte(ev.Data), Time: ev.Time, Attempt: c.Attempt, Epoch: c.Epoch, batch: c.Batch}
}

func result(err error) runner.Result {
	if err == nil {
		return runner.Result{}
	}
	dl, after := classify(err)
	return runner.Result{Err: err, DeadLetter: dl, RetryAfter: after}
}

// Stop stops the worker gracefully: no new batch or event is taken,
// running handlers get ShutdownTimeout to finish (then their contexts are
// cancelled), a batch not fully handled is left open for the next owner
// (nothing is lost; its handled events are delivered again), and the slots
// are released. It returns when all of that is done or ctx ends first. It is
// safe to call more than once, and before Start.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		if !w.stoppedEarly {
			w.stoppedEarly = true
			close(w.done)
		}
		w.mu.Unlock()
		return nil
	}
	// started: w.done closes when the runners have stopped
	w.mu.Unlock()
	w.stopSoft()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.stopHard()
		return ctx.Err()
	}
}

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err returns why the worker stopped on its own (nil while it runs, and
// after a Stop): a runner's error, or a *ResizedError for a worker pinned to
// a generation that a resize ended.
func (w *Worker) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

// Run starts the worker and blocks until ctx is cancelled or the worker
// stops on its own, then stops it gracefully (see Stop) and returns (Err
// when it stopped on its own).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-w.done:
	}
	if err := w.Stop(context.Background()); err != nil {
		return err
	}
	return w.Err()
}

// SlotStats are the counters of one slot in this worker process.
type SlotStats struct {
	Slot int
	// Slots is the number of slots of the slot's generation (the group's,
	// or, for a worker that ran both sides of a resize, the old one's).
	Slots        int
	Owned        bool  // this worker owns the slot now (else it is standby)
	Handled      int64 // events the handler returned nil for
	Failed       int64 // handler failures
	SetAside     int64 // events set aside behind a blocked key (pause)
	DeadLettered int64
	Batches      int64
	// Resumed counts events of batches left open by a previous owner (a
	// worker that stopped or lost the slot mid-batch) that its recorded
	// progress showed resolved: they were not run again.
	Resumed   int64
	LastBatch time.Time // when this worker last finished a batch of the slot
}

// Stats returns this worker's counters, by generation (in the order their
// runs started) and slot.
func (w *Worker) Stats() []SlotStats {
	w.genMu.Lock()
	defer w.genMu.Unlock()
	var out []SlotStats
	seen := map[int]bool{}
	for _, n := range w.order {
		gr := w.gens[n]
		if gr == nil || seen[n] {
			continue
		}
		seen[n] = true
		for _, s := range gr.slots {
			st := gr.stats[s]
			ss := SlotStats{Slot: s, Slots: n, Owned: st.Owned.Load(), Handled: st.Handled.Load(), Failed: st.Failed.Load(),
				SetAside: st.Parked.Load(), DeadLettered: st.DeadLettered.Load(), Batches: st.Batches.Load(), Resumed: st.Resumed.Load()}
			if ns := st.LastBatch.Load(); ns != 0 {
				ss.LastBatch = time.Unix(0, ns)
			}
			out = append(out, ss)
		}
	}
	return out
}
