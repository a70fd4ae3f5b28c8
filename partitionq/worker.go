package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/slot"
	"github.com/partitionq/partitionq/partitionq/internal/ticker"
)

// Policy says what a handler failure does to the rest of its key.
type Policy string

const (
	// PolicyPause (the default) blocks the key until the failed event is
	// resolved: handled on a retry, skipped by an operator, or dead-lettered
	// after MaxAttempts. The key's later events wait, in order; every other
	// key keeps flowing. See docs/failure-policy.md.
	PolicyPause Policy = "pause"
	// PolicySkip retries the failed event later through the engine's retry
	// queue and lets the key go on: later events of the key may be handled
	// before the retry.
	PolicySkip Policy = "skip"
)

// Defaults of WorkerConfig.
const (
	ConcurrencyDefault      = 16
	BackoffMinDefault       = time.Second
	BackoffMaxDefault       = 5 * time.Minute
	MaxAttemptsSkipDefault  = 10
	HandlerTimeoutDefault   = time.Minute
	ShutdownTimeoutDefault  = 30 * time.Second
	PollIntervalDefault     = 100 * time.Millisecond
	StandbyPollDefault      = time.Second
	HeadScanIntervalDefault = time.Second
	TickIntervalDefault     = 100 * time.Millisecond
	MaintIntervalDefault    = 30 * time.Second
	ChunkSizeDefault        = 1000
)

// WorkerConfig configures a Worker. Zero values mean the defaults.
type WorkerConfig struct {
	// Queue and Group name the consumer group; it must have been set up.
	Queue, Group string

	// N, when not zero, is the number of slots the caller expects the group
	// to have; NewWorker fails with a *SlotCountMismatchError otherwise.
	N int

	// Slots lists the slots to run. Defaults to all slots of the group.
	// Each slot is run by one worker at a time: a worker asking for a slot
	// that another live worker runs waits as its standby.
	Slots []int

	// Handler handles the events. Required.
	Handler Handler

	// Concurrency is how many events of different keys of one slot may be
	// in the handler at once. Events of one key are always handled one at a
	// time. Defaults to ConcurrencyDefault (16).
	Concurrency int

	// Policy is the failure policy. Defaults to PolicyPause.
	Policy Policy

	// MaxAttempts is how many times an event is tried before it becomes a
	// dead letter; 0 means the default: unlimited (retry until an operator
	// acts) under PolicyPause, MaxAttemptsSkipDefault (10) under PolicySkip.
	// Use -1 for unlimited under PolicySkip.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the delay before retry n, which is
	// BackoffMin * 2^(n-1), capped at BackoffMax. Defaults to 1s and 5m.
	BackoffMin, BackoffMax time.Duration

	// HandlerTimeout bounds one handler call; its context is cancelled
	// after it, and the call counts as a failure. Defaults to 1 minute; -1
	// means no timeout.
	HandlerTimeout time.Duration

	// ShutdownTimeout is how long Stop lets running handlers finish before
	// cancelling their contexts. Defaults to 30s.
	ShutdownTimeout time.Duration

	// PollInterval is the wait between two empty batch polls of a slot.
	// Defaults to 100ms.
	PollInterval time.Duration

	// StandbyPoll is how often a standby tries to take a slot whose owner
	// may have died. Defaults to 1s.
	StandbyPoll time.Duration

	// HeadScanInterval (pause policy) is the longest wait between two looks
	// at a slot's blocked keys, which is how soon an operator's "retry now"
	// takes effect. Defaults to 1s.
	HeadScanInterval time.Duration

	// DrainConcurrency (PolicyPause) is how many blocked keys of one slot
	// are retried and drained at once; each holds one of the worker's own
	// connections while its head is handled (so that an operator's skip
	// waits on its row lock; see PoolConns). Raise it when many keys block
	// at once (a skewed load with failures). Defaults to min(Concurrency, 4).
	DrainConcurrency int

	// MaxBlocked bounds the pause (PolicyPause only): a key whose head first
	// failed longer ago than this is flagged (a warning in the log, and
	// BlockedKey.Flagged), or, with MaxBlockedDeadLetter, its head is
	// dead-lettered (reason "max_blocked") and the key goes on. Defaults to
	// 0: no bound, the key waits for an operator.
	MaxBlocked time.Duration

	// MaxBlockedDeadLetter makes MaxBlocked dead-letter the head rather
	// than only flag it. Defaults to false.
	MaxBlockedDeadLetter bool

	// RunTicker runs the engine's ticker and maintenance in this worker, in
	// place of pgqd. Safe when several workers run it. Defaults to false.
	RunTicker bool

	// TickInterval is how often the in-process ticker runs. Defaults to 100ms.
	TickInterval time.Duration

	// Identity names this worker in status output (the application_name of
	// its slot sessions). Defaults to "partitionq:<host>:<pid>".
	Identity string
}

func (cfg WorkerConfig) withDefaults() WorkerConfig {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = ConcurrencyDefault
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyPause
	}
	if cfg.MaxAttempts == 0 && cfg.Policy == PolicySkip {
		cfg.MaxAttempts = MaxAttemptsSkipDefault
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = BackoffMinDefault
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = max(BackoffMaxDefault, cfg.BackoffMin)
	}
	if cfg.HandlerTimeout == 0 {
		cfg.HandlerTimeout = HandlerTimeoutDefault
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = PollIntervalDefault
	}
	if cfg.StandbyPoll == 0 {
		cfg.StandbyPoll = StandbyPollDefault
	}
	if cfg.HeadScanInterval == 0 {
		cfg.HeadScanInterval = HeadScanIntervalDefault
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = TickIntervalDefault
	}
	if cfg.DrainConcurrency == 0 {
		cfg.DrainConcurrency = slot.DrainConcurrency(cfg.Concurrency)
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = "partitionq:" + host + ":" + strconv.Itoa(os.Getpid())
	}
	return cfg
}

func (cfg WorkerConfig) validate() error {
	if err := ValidateQueueName(cfg.Queue); err != nil {
		return err
	}
	if err := ValidateGroupName(cfg.Group); err != nil {
		return err
	}
	if err := validateText("WorkerConfig.Identity", cfg.Identity, maxText); err != nil {
		return err
	}
	bad := func(field, value, problem, fix string) error {
		return &ValidationError{Field: "WorkerConfig." + field, Value: value, Problem: problem, Fix: fix}
	}
	switch {
	case cfg.Handler == nil:
		return bad("Handler", "nil", "it is required", "pass a Handler or HandlerFunc")
	case cfg.Concurrency < 1 || cfg.Concurrency > 4096:
		return bad("Concurrency", strconv.Itoa(cfg.Concurrency), "it must be between 1 and 4096", "use 0 for the default (16)")
	case cfg.Policy != PolicyPause && cfg.Policy != PolicySkip:
		return bad("Policy", strconv.Quote(string(cfg.Policy)), "unknown policy", `use "pause" or "skip"`)
	case cfg.MaxAttempts < -1:
		return bad("MaxAttempts", strconv.Itoa(cfg.MaxAttempts), "it is negative", "use 0 for the default, -1 for unlimited")
	case cfg.BackoffMin < 0 || cfg.BackoffMax < cfg.BackoffMin:
		return bad("BackoffMin/BackoffMax", cfg.BackoffMin.String()+"/"+cfg.BackoffMax.String(), "they must be positive with min <= max", "use 0 for the defaults (1s, 5m)")
	case cfg.DrainConcurrency < 1 || cfg.DrainConcurrency > cfg.Concurrency:
		return bad("DrainConcurrency", strconv.Itoa(cfg.DrainConcurrency), "it must be between 1 and Concurrency", "use 0 for the default (min(Concurrency, 4))")
	case cfg.HandlerTimeout < -1:
		return bad("HandlerTimeout", cfg.HandlerTimeout.String(), "it is negative", "use 0 for the default (1m), -1 for none")
	}
	for name, d := range map[string]time.Duration{"ShutdownTimeout": cfg.ShutdownTimeout, "PollInterval": cfg.PollInterval,
		"StandbyPoll": cfg.StandbyPoll, "HeadScanInterval": cfg.HeadScanInterval, "TickInterval": cfg.TickInterval,
		"MaxBlocked": cfg.MaxBlocked} {
		if d < 0 {
			return bad(name, d.String(), "it is negative", "use 0 for the default")
		}
	}
	return nil
}

// backoff is the delay after failed attempt n (from 1).
func backoff(minD, maxD time.Duration, n int) time.Duration {
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	return min(d, maxD)
}

// Worker runs slots of one consumer group. Start it once; Stop it once or
// more. It is safe for concurrent use.
type Worker struct {
	c     *Client
	cfg   WorkerConfig
	group Group
	slots []int
	stats []*slot.Stats // by position in slots
	log   *slog.Logger

	mu           sync.Mutex
	started      bool
	stoppedEarly bool // Stop ran before Start
	stopSoft     context.CancelFunc
	stopHard     context.CancelFunc
	done         chan struct{}
}

// NewWorker validates cfg and reads the group from the engine. ctx governs
// that read. It fails with ErrNoSuchQueue or ErrNoSuchGroup when the group
// is not set up, and with a *ValidationError for a bad config.
func (c *Client) NewWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := c.Group(ctx, cfg.Queue, cfg.Group)
	if err != nil {
		return nil, err
	}
	if cfg.N != 0 && cfg.N != g.Slots {
		return nil, &SlotCountMismatchError{Queue: cfg.Queue, Group: cfg.Group, Existing: g.Slots, Requested: cfg.N}
	}
	slots, err := pickSlots(cfg.Slots, g.Slots)
	if err != nil {
		return nil, err
	}
	w := &Worker{c: c, cfg: cfg, group: g, slots: slots, done: make(chan struct{}),
		log: c.log.With(slog.String("queue", cfg.Queue), slog.String("group", cfg.Group))}
	for range slots {
		w.stats = append(w.stats, &slot.Stats{})
	}
	return w, nil
}

// PoolConns is the most connections a worker running slots slots with the
// given in-slot concurrency (and the default DrainConcurrency) opens of its
// own: one held per owned slot, one per concurrent drain of blocked keys of
// each slot, and two for the ticker and short reads. With another
// DrainConcurrency d it is slots*(1+d)+2. Count them, with the client's
// pool, against the server's max_connections.
//
// A worker keeps these connections in a pool of its own (made from the
// client's pool's configuration), never in the client's pool: they are
// held while handlers run, and a handler that queries the database through
// the client's pool must never wait for a connection that only its own
// return would free.
func PoolConns(slots, concurrency int) int {
	if concurrency <= 0 {
		concurrency = ConcurrencyDefault
	}
	return workerConns(slots, slot.DrainConcurrency(concurrency))
}

// workerConns is the size of a worker's own pool: one connection per slot,
// one per concurrent drain of each slot, two for the ticker and short reads.
func workerConns(slots, drains int) int { return slots*(1+drains) + 2 }

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
			return nil, &ValidationError{Field: "WorkerConfig.Slots", Value: strconv.Itoa(s),
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

// Start starts the worker's slots (and its ticker when RunTicker is set)
// and returns at once: each slot runs when this worker owns it, or waits as
// its standby. ctx is the worker's lifetime: cancelling it is the same as
// Stop. Start fails if the worker was started before.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("partitionq: worker already started")
	}
	if w.stoppedEarly {
		return errors.New("partitionq: worker was stopped before it started: make a new one")
	}
	// The worker's own connections (see PoolConns): none is opened before
	// a slot, a drain or the ticker needs it.
	pcfg := w.c.pool.Config()
	pcfg.MaxConns = int32(workerConns(len(w.slots), w.cfg.DrainConcurrency))
	pcfg.MinConns, pcfg.MinIdleConns = 0, 0
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), pcfg)
	if err != nil {
		return fmt.Errorf("partitionq: the worker's connection pool: %w", err)
	}
	w.started = true
	soft, stopSoft := context.WithCancel(ctx)
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	w.stopSoft, w.stopHard = stopSoft, stopHard

	var wg sync.WaitGroup
	if w.cfg.RunTicker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticker.Run(soft, ticker.Config{Eng: w.c.eng, Pool: pool, Log: w.log,
				Interval: w.cfg.TickInterval, MaintInterval: MaintIntervalDefault})
		}()
	}
	maxAttempts := w.cfg.MaxAttempts
	if maxAttempts < 0 {
		maxAttempts = 0
	}
	policy := slot.Pause
	if w.cfg.Policy == PolicySkip {
		policy = slot.Skip
	}
	hto := w.cfg.HandlerTimeout
	if hto < 0 {
		hto = 0
	}
	for i, s := range w.slots {
		scfg := slot.Config{
			Eng: w.c.eng, Pool: pool, Log: w.log,
			Queue: w.cfg.Queue, Group: w.cfg.Group, Consumer: w.group.Consumers[s],
			Slot: s, N: w.group.Slots, SubID: w.group.subIDs[s],
			Concurrency: w.cfg.Concurrency, Policy: policy, MaxAttempts: maxAttempts,
			Backoff:        func(n int) time.Duration { return backoff(w.cfg.BackoffMin, w.cfg.BackoffMax, n) },
			HandlerTimeout: hto, Handle: w.handleFunc(s),
			PollInterval: w.cfg.PollInterval, StandbyPoll: w.cfg.StandbyPoll, HeadScanInterval: w.cfg.HeadScanInterval,
			MaxBlocked: w.cfg.MaxBlocked, MaxBlockedDeadLetter: w.cfg.MaxBlockedDeadLetter, DrainConcurrency: w.cfg.DrainConcurrency,
			ChunkSize: ChunkSizeDefault, AppName: w.cfg.Identity, Stats: w.stats[i],
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot.Run(soft, hard, scfg)
		}()
	}
	go func() {
		<-soft.Done()
		t := time.AfterFunc(w.cfg.ShutdownTimeout, stopHard)
		wg.Wait()
		t.Stop()
		stopHard()
		pool.Close()
		close(w.done)
	}()
	w.log.Info("partitionq: worker started", slog.Any("slots", w.slots), slog.String("policy", string(w.cfg.Policy)),
		slog.Int("concurrency", w.cfg.Concurrency))
	return nil
}

func (w *Worker) handleFunc(s int) slot.Handler {
	return func(ctx context.Context, ev engine.Event, attempt int) slot.Result {
		err := w.cfg.Handler.Handle(ctx, &Event{ID: ev.ID, Queue: w.cfg.Queue, Group: w.cfg.Group, Slot: s, Key: ev.Key,
			Type: ev.Type, Payload: []byte(ev.Data), Time: ev.Time, Attempt: attempt})
		if err == nil {
			return slot.Result{}
		}
		dl, after := classify(err)
		return slot.Result{Err: err, DeadLetter: dl, RetryAfter: after}
	}
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

// Run starts the worker and blocks until ctx is cancelled, then stops it
// gracefully (see Stop) and returns.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.Background())
}

// SlotStats are the counters of one slot in this worker process.
type SlotStats struct {
	Slot         int
	Owned        bool  // this worker owns the slot now (else it is standby)
	Processed    int64 // events handled successfully
	Failed       int64 // handler failures
	SetAside     int64 // events set aside behind a blocked key (pause)
	DeadLettered int64
	Batches      int64
	LastBatch    time.Time // when this worker last finished a batch of the slot
}

// Stats returns this worker's counters, by slot.
func (w *Worker) Stats() []SlotStats {
	out := make([]SlotStats, len(w.slots))
	for i, s := range w.slots {
		st := w.stats[i]
		out[i] = SlotStats{Slot: s, Owned: st.Owned.Load(), Processed: st.Processed.Load(), Failed: st.Failed.Load(),
			SetAside: st.Parked.Load(), DeadLettered: st.DeadLettered.Load(), Batches: st.Batches.Load()}
		if ns := st.LastBatch.Load(); ns != 0 {
			out[i].LastBatch = time.Unix(0, ns)
		}
	}
	return out
}
