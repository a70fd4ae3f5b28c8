// Package demo is a multi-tenant storage service in miniature, run on
// partitionq: a producer emits FileCreated, FileOverwritten and FileDeleted
// events for many tenants (the tenant is the partition key), a worker with a
// few slots handles them, and a few events fail so that tenants block and
// unblock. Every handler call is logged, and at the end the log is judged by
// internal/ordercheck: the demo states that each tenant's events were
// handled in order because it checked, not because it assumes so.
//
// `partitionq demo` (internal/cli) drives it with the console or a
// progress summary; see docs/cli.md.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// Defaults of Config.
const (
	TenantsDefault     = 100
	RateDefault        = 200.0
	SlotsDefault       = 4
	ConcurrencyDefault = 4
	FailRateDefault    = 0.01
	MaxAttemptsDefault = 7
	BurstEveryDefault  = 30 * time.Second
	BackoffMinDefault  = 500 * time.Millisecond
	BackoffMaxDefault  = 4 * time.Second
	TickMaxLagDefault  = 250 * time.Millisecond
)

// PoisonShare is the share of failing events that never succeed (a corrupt
// file): they block their tenant until they run out of attempts or an
// operator skips them. The other failing events succeed on a later attempt.
const PoisonShare = 0.1

// Config configures a demo. Zero values mean the defaults.
type Config struct {
	// Queue and Group name the queue and consumer group the demo creates.
	// Required. The queue must not exist yet.
	Queue, Group string
	// Tenants is the number of tenants (partition keys). Defaults to 100.
	Tenants int
	// Rate is how many events per second the producer sends, on average.
	// Defaults to 200.
	Rate float64
	// Slots is the group's fixed number of slots N. Defaults to 4.
	Slots int
	// Concurrency is how many events of different tenants each slot
	// handles at once. Defaults to 4.
	Concurrency int
	// FailRate is the share of events whose handler fails at least once;
	// PoisonShare of those never succeed. 0 means the default (1%); use a
	// negative value for no failures.
	FailRate float64
	// MaxAttempts is how many times an event is tried before it becomes a
	// dead letter. Defaults to 7.
	MaxAttempts int
	// BurstEvery is how often one tenant uploads a folder: a burst of
	// events of one key on top of the rate, the first one after a third of
	// the period. Defaults to 30s; negative means no bursts.
	BurstEvery time.Duration
	// BackoffMin and BackoffMax bound the delay between two attempts of a
	// failed event. Default to 500ms and 4s.
	BackoffMin, BackoffMax time.Duration
	// TickMaxLag is the queue's ticker_max_lag. Defaults to 250ms.
	TickMaxLag time.Duration
}

// WithDefaults returns cfg with its zero fields set to the defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Tenants == 0 {
		cfg.Tenants = TenantsDefault
	}
	if cfg.Rate == 0 {
		cfg.Rate = RateDefault
	}
	if cfg.Slots == 0 {
		cfg.Slots = SlotsDefault
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = ConcurrencyDefault
	}
	if cfg.FailRate == 0 {
		cfg.FailRate = FailRateDefault
	}
	if cfg.FailRate < 0 {
		cfg.FailRate = 0
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = MaxAttemptsDefault
	}
	if cfg.BurstEvery == 0 {
		cfg.BurstEvery = BurstEveryDefault
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = BackoffMinDefault
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = max(BackoffMaxDefault, cfg.BackoffMin)
	}
	if cfg.TickMaxLag == 0 {
		cfg.TickMaxLag = TickMaxLagDefault
	}
	return cfg
}

// Validate checks a config with its defaults filled in.
func (cfg Config) Validate() error {
	bad := func(field string, value any, problem string) error {
		return &partitionq.ValidationError{Field: "demo " + field, Value: fmt.Sprint(value), Problem: problem, Fix: "use 0 for the default"}
	}
	if err := partitionq.ValidateQueueName(cfg.Queue); err != nil {
		return err
	}
	if err := partitionq.ValidateGroupName(cfg.Group); err != nil {
		return err
	}
	if err := partitionq.ValidateSlots(cfg.Slots); err != nil {
		return err
	}
	switch {
	case cfg.Tenants < 1 || cfg.Tenants > 100_000:
		return bad("tenants", cfg.Tenants, "it must be between 1 and 100000")
	case cfg.Rate <= 0 || cfg.Rate > 100_000:
		return bad("rate", cfg.Rate, "it must be above 0 and at most 100000 events per second")
	case cfg.Concurrency < 1 || cfg.Concurrency > 4096:
		return bad("concurrency", cfg.Concurrency, "it must be between 1 and 4096")
	case cfg.FailRate > 0.5:
		return bad("failure rate", cfg.FailRate, "it must be between 0 and 0.5")
	case cfg.MaxAttempts < 1 || cfg.MaxAttempts > 100:
		return bad("max attempts", cfg.MaxAttempts, "it must be between 1 and 100, so that every event ends handled or dead")
	case cfg.BackoffMin < 0 || cfg.BackoffMax < cfg.BackoffMin:
		return bad("backoff", cfg.BackoffMin.String()+"/"+cfg.BackoffMax.String(), "they must be positive with min <= max")
	case cfg.TickMaxLag < 0:
		return bad("tick max lag", cfg.TickMaxLag, "it is negative")
	}
	return nil
}

// ErrQueueExists: the demo's queue exists already. The demo needs a queue of
// its own, so that the order check sees every event of the queue.
var ErrQueueExists = errors.New("the demo's queue exists already")

// Demo is one run of the storage service. Its methods are safe for
// concurrent use; Start it once.
type Demo struct {
	c   *partitionq.Client
	cfg Config
	run string // this run's id, in every payload

	led  *ledger
	svc  *service
	prod *producer

	mu       sync.Mutex
	started  time.Time
	worker   *partitionq.Worker
	stopProd context.CancelFunc
	prodDone chan struct{}
	prodErr  error
}

// New validates cfg (after filling its defaults) and returns a demo on c.
func New(c *partitionq.Client, cfg Config) (*Demo, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	led := newLedger()
	d := &Demo{c: c, cfg: cfg, run: run, led: led, prodDone: make(chan struct{})}
	d.svc = newService(run, cfg.FailRate, led)
	d.prod = newProducer(c, cfg, run, led)
	return d, nil
}

// Config returns the demo's config, defaults filled in.
func (d *Demo) Config() Config { return d.cfg }

// Client returns the client the demo runs on.
func (d *Demo) Client() *partitionq.Client { return d.c }

// Tenants returns the partition keys of the tenants, in order.
func (d *Demo) Tenants() []string { return d.prod.keys() }

// Setup creates the queue and the consumer group. It fails with
// ErrQueueExists when the queue exists. ctx governs the calls.
func (d *Demo) Setup(ctx context.Context) error {
	_, err := d.c.Groups(ctx, partitionq.GroupsQuery{Queue: d.cfg.Queue})
	switch {
	case err == nil:
		return fmt.Errorf("%w: queue %q: the demo needs a queue of its own: pick another name", ErrQueueExists, d.cfg.Queue)
	case !errors.Is(err, partitionq.ErrNoSuchQueue):
		return err
	}
	_, err = d.c.Setup(ctx, partitionq.GroupSpec{Queue: d.cfg.Queue, Group: d.cfg.Group, Slots: d.cfg.Slots, TickMaxLag: d.cfg.TickMaxLag})
	return err
}

// PoolSize is the size of the pool the demo is given: the producer's
// sends, status reads and the console's. The worker opens connections of
// its own (see partitionq.WorkerConns).
const PoolSize = 6

// Start starts the worker (which runs the engine's ticker too) and the
// producer, and returns. ctx bounds the producer only: when it ends, the
// producer stops; the worker runs until Stop, so that it can handle what
// was sent.
func (d *Demo) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.worker != nil {
		return errors.New("demo: already started")
	}
	w, err := d.c.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: d.cfg.Queue, Group: d.cfg.Group, SlotCount: d.cfg.Slots,
		Handler:  d.svc,
		Ticker:   &partitionq.TickerConfig{Interval: 50 * time.Millisecond},
		Identity: "demo-worker:" + strconv.Itoa(os.Getpid()),
		Retry: partitionq.RetryConfig{Policy: partitionq.PolicyPause, MaxAttempts: d.cfg.MaxAttempts,
			BackoffMin: d.cfg.BackoffMin, BackoffMax: d.cfg.BackoffMax, HeadScanInterval: 250 * time.Millisecond},
		Limits: partitionq.LimitsConfig{Concurrency: d.cfg.Concurrency,
			HandlerTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second, PollInterval: 50 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	d.worker = w
	d.started = time.Now()
	pctx, cancel := context.WithCancel(ctx)
	d.stopProd = cancel
	go func() {
		err := d.prod.loop(pctx)
		d.mu.Lock()
		d.prodErr = err
		d.mu.Unlock()
		close(d.prodDone)
	}()
	return nil
}

// ProducerDone is closed when the producer has stopped: after
// StopProducing, when Start's ctx ended, or on a send error.
func (d *Demo) ProducerDone() <-chan struct{} { return d.prodDone }

// StopProducing stops the producer, waits for it, and returns the error
// that stopped it, if any (nil for a stop that was asked for).
func (d *Demo) StopProducing() error {
	d.mu.Lock()
	stop := d.stopProd
	d.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	<-d.prodDone
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prodErr
}

// Stop stops the producer (if it runs; its error is StopProducing's to
// report) and then the worker, gracefully. ctx bounds the wait. It is safe
// to call more than once.
func (d *Demo) Stop(ctx context.Context) error {
	_ = d.StopProducing()
	d.mu.Lock()
	w := d.worker
	d.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Stop(ctx)
}

// Progress is a snapshot of a run.
type Progress struct {
	Elapsed  time.Duration // since Start
	Sent     int64         // events sent
	Handled  int64         // distinct events handled successfully
	Calls    int64         // handler calls
	Failures int64         // failed handler calls
	// From the engine (Client.Status): keys blocked now, events set aside
	// behind them, dead letters not replayed, and the largest slot lag.
	BlockedKeys int
	Waiting     int64
	DeadLetters int64
	MaxLag      time.Duration
}

// Progress reads a snapshot. ctx governs the status query.
func (d *Demo) Progress(ctx context.Context) (Progress, error) {
	p := d.led.progress()
	d.mu.Lock()
	if !d.started.IsZero() {
		p.Elapsed = time.Since(d.started)
	}
	d.mu.Unlock()
	st, err := d.c.Status(ctx, d.cfg.Queue, d.cfg.Group)
	if err != nil {
		return Progress{}, err
	}
	p.DeadLetters = st.DeadLetters
	for _, s := range st.SlotStatus {
		p.BlockedKeys += s.BlockedKeys
		p.Waiting += s.SetAside
		p.MaxLag = max(p.MaxLag, s.Lag)
	}
	return p, nil
}

// StallBound is how long the last events of a run may go without any of
// them resolving before WaitResolved gives up: a poisoned head that has
// just failed for the first time still has every backoff ahead of it.
func (d *Demo) StallBound() time.Duration {
	total := time.Duration(0)
	step := d.cfg.BackoffMin
	for i := 1; i < d.cfg.MaxAttempts; i++ {
		total += step
		step = min(2*step, d.cfg.BackoffMax)
	}
	return total + 10*time.Second
}

// ErrStalled: WaitResolved saw no event resolve for StallBound.
var ErrStalled = errors.New("no event was resolved for too long")

// Unresolved counts the events neither handled nor dead: the producer's,
// and the replays of dead letters that operators made (a replay is an event
// of its own). ctx governs the dead-letter queries.
func (d *Demo) Unresolved(ctx context.Context) (int64, error) {
	dead, replays, err := d.deadLetters(ctx)
	if err != nil {
		return 0, err
	}
	return d.led.unresolved(dead, replays), nil
}

// WaitResolved waits until every event sent is handled or dead, calling
// report with a fresh Progress and the unresolved count about every
// interval. It returns ErrStalled when none resolves for StallBound, and
// ctx's error when ctx ends first.
func (d *Demo) WaitResolved(ctx context.Context, interval time.Duration, report func(Progress, int64)) error {
	lastReport := time.Now()
	var best int64
	bestAt, first := time.Now(), true
	for {
		left, err := d.Unresolved(ctx)
		if err != nil {
			return err
		}
		switch {
		case left == 0:
			return nil
		case left < 0:
			return fmt.Errorf("demo: %d events unresolved: the ledger counts an event twice (a bug)", left)
		}
		if first || left < best {
			best, bestAt, first = left, time.Now(), false
		} else if time.Since(bestAt) > d.StallBound() {
			return fmt.Errorf("%w (%s): %d events left", ErrStalled, d.StallBound(), left)
		}
		if report != nil && time.Since(lastReport) >= interval {
			lastReport = time.Now()
			if p, err := d.Progress(ctx); err == nil {
				report(p, left)
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
