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
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/store"
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
	// PolicyRetryLater retries the failed event later through the engine's
	// retry queue and lets the key go on: later events of the key may be
	// handled before the retry.
	PolicyRetryLater Policy = "retry-later"
)

// Defaults of WorkerConfig.
const (
	ConcurrencyDefault           = 16
	BackoffMinDefault            = time.Second
	BackoffMaxDefault            = 5 * time.Minute
	MaxAttemptsRetryLaterDefault = 10
	HandlerTimeoutDefault        = time.Minute
	// ShutdownTimeoutDefault leaves a stop room to record progress and
	// release the slots within a platform's grace period of 30s
	// (Kubernetes' terminationGracePeriodSeconds) after the handlers' time.
	ShutdownTimeoutDefault = 20 * time.Second
	// LivenessTimeoutDefault is how long a loop of the worker may go
	// without a turn before Worker.Live reports it stuck
	// (WorkerConfig.Limits.LivenessTimeout); at least twice the lease.
	LivenessTimeoutDefault = time.Minute
	PollIntervalDefault    = 500 * time.Millisecond
	StandbyPollDefault     = time.Second
	LeaseDurationDefault   = 5 * time.Second
	// DeadHostMarginDefault is how much longer than the lease the server
	// keeps a dead host's sessions by default
	// (WorkerConfig.Ownership.DeadHostTimeout).
	DeadHostMarginDefault   = 10 * time.Second
	DrainConcurrencyDefault = 8
	BatchMinEventsDefault   = 5000
	HeadScanIntervalDefault = time.Second
	TickIntervalDefault     = 100 * time.Millisecond
	// MaxRunDefault is Limits.MaxRun's default: past a few dozen events
	// a run's round trip and commit are a small part of its cost.
	MaxRunDefault = 64
)

// maxRunMax bounds Limits.MaxRun: a run is a part of what a slot reads
// ahead (twice chunkSize).
const maxRunMax = chunkSize

// chunkSize is how many events a slot reads from a batch's cursor at a
// time.
const chunkSize = 1000

// WorkerConfig configures a Worker. Zero values mean the defaults.
//
// The fields that say what the worker runs and who it is are flat; the
// settings are grouped by concern: Retry (what a handler failure does),
// Limits (how much runs at once, and how long things may take), Ownership
// (how slots move between workers) and Ticker. Every group is a value
// whose zero value means its defaults. NewWorker fills in the defaults
// and then checks the fields in declaration order, groups included: of
// several wrong fields, the first is the one its *ValidationError names
// (for example "WorkerConfig.Limits.Concurrency"), every time.
type WorkerConfig struct {
	// Queue and Group name the consumer group; it must have been set up.
	Queue, Group string

	// SlotCount, when not zero, is the number of slots (N) the caller
	// expects the group to have; NewWorker fails with a
	// *SlotCountMismatchError otherwise. It pins the worker to that
	// generation, as Pins does: when a resize ends it, the worker stops
	// (Err returns a *ResizedError). Defaults to 0: the group's number of
	// slots, following every resize.
	SlotCount int

	// Pins, when set, lists the only slots this worker runs (a pinned
	// worker): it takes each when it is free, and waits as its standby
	// while another live worker runs it; it stays out of the sharing of
	// the other slots, and stops when a resize ends its generation.
	// Defaults to none: the worker shares the group's slots with the other
	// workers that run it, and follows every resize (docs/architecture.md,
	// "Sharing the slots"). Rarely needed.
	Pins []int

	// Handler handles the events, one call per event. Required. Three
	// kinds of handler take the events another way: InTx(h) for a
	// TxHandler (each event in a transaction of the worker's, its writes
	// committed with its completion: exactly-once effects in the same
	// database), Runs(h) for a RunHandler (runs of a key's consecutive
	// events, one call per run) and RunsInTx(h) for a TxRunHandler (each
	// run in a transaction).
	Handler Handler

	// Retry says what a handler failure does: the policy, the attempts,
	// the backoff, and the bound on a blocked key.
	Retry RetryConfig

	// Limits bounds how much the worker does at once and how long it
	// waits: the in-slot concurrency, the drains of blocked keys, the
	// batch size, the handler and shutdown timeouts, the poll interval.
	Limits LimitsConfig

	// Ownership sets how slots move between workers: the lease, the
	// standbys' polling, and how soon the server drops a dead host.
	Ownership OwnershipConfig

	// Ticker, when not nil, runs the engine's ticker and maintenance in
	// this worker, in place of pgqd or partitionq tick, with these settings
	// (zero fields take TickerConfig's defaults: a tick every 100ms,
	// maintenance every 30s). Safe when several workers run it: each round
	// is done by one of them. The client's role must be allowed to tick
	// (the engine's admin, docs/security.md): Start fails at once
	// otherwise. Defaults to nil: no ticker in this worker.
	Ticker *TickerConfig

	// DisableProgress turns off the recording of progress inside open
	// batches: after a fault, the slot's whole open batch runs again rather
	// than only its unfinished events. Defaults to false (progress recorded).
	DisableProgress bool

	// Identity names this worker in status output (and is the
	// application_name of its sessions). Defaults to "partitionq:<host>:<pid>".
	Identity string

	// Registerer, when set, receives the worker's Prometheus metrics for
	// its slots (labelled queue, group and slot; docs/operations.md lists
	// them) from Start until the worker stops. The counters and the handler
	// duration histogram are kept on the handler path; the gauges of the
	// group's state come from one Status read per scrape at most once a
	// second, bounded by 2s (a scrape whose read fails or times out leaves
	// them out). Two workers of one process may share a Registerer when
	// they run different groups or disjoint slots of one group; for the
	// same slots, Start fails with an error saying so. Defaults to nil: no
	// metrics, and no cost.
	Registerer prometheus.Registerer

	// TracerProvider, when set, gives the tracer (named TracerName) of one
	// span per handler call, of kind consumer, named "process <queue>",
	// with the event's id, key, slot, type and attempt, the queue and the
	// group as attributes; a failed call records its error and sets the
	// span's status to Error. The handler's ctx carries the span, so spans
	// the handler starts are its children. Defaults to nil: no spans.
	TracerProvider trace.TracerProvider
}

// RetryConfig says what a handler failure does (WorkerConfig.Retry). Zero
// values mean the defaults.
type RetryConfig struct {
	// Policy is the failure policy. Defaults to PolicyPause.
	Policy Policy

	// MaxAttempts is how many times an event is tried before it becomes a
	// dead letter; 0 means the default: unlimited (retry until an operator
	// acts) under PolicyPause, MaxAttemptsRetryLaterDefault (10) under
	// PolicyRetryLater. Use -1 for unlimited under PolicyRetryLater.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the delay before retry n, which is
	// BackoffMin * 2^(n-1), capped at BackoffMax. Defaults to 1s and 5m
	// (BackoffMax at least BackoffMin).
	BackoffMin, BackoffMax time.Duration

	// MaxBlocked bounds the pause (PolicyPause only): how long a key's
	// head may stay failed, and what happens past that. Defaults to no
	// bound: the key waits for an operator.
	MaxBlocked BlockedLimit

	// HeadScanInterval (pause policy) is the longest wait between two looks
	// at a slot's blocked keys, which is how soon an operator's "retry now"
	// takes effect. Defaults to 1s.
	HeadScanInterval time.Duration
}

// BlockedLimit bounds how long a key stays blocked under the pause policy
// (RetryConfig.MaxBlocked). The zero value means no bound.
type BlockedLimit struct {
	// After is how long ago a key's head may have first failed: past it,
	// the key is flagged (a warning in the log, and BlockedKey.Flagged),
	// or its head dead-lettered with DeadLetter. 0 means no bound.
	After time.Duration

	// DeadLetter dead-letters the head (reason "max_blocked") past After,
	// and the key goes on, rather than only flag it. Defaults to false.
	DeadLetter bool
}

// LimitsConfig bounds how much a worker does at once and how long it
// waits (WorkerConfig.Limits). Zero values mean the defaults.
//
// PollInterval is here rather than in OwnershipConfig: it bounds how long
// a worker may wait before it sees new events (the delivery latency
// without notifications), and has nothing to do with which worker owns a
// slot.
type LimitsConfig struct {
	// Concurrency is how many events of different keys of one slot may be
	// in the handler at once (with a run handler, how many runs). Events of
	// one key are always handled one at a time. Defaults to
	// ConcurrencyDefault (16).
	Concurrency int

	// MaxRun is the most events of one key a RunHandler or TxRunHandler
	// gets in one call: a run takes up to this many of the key's events
	// that the worker holds when it starts, never waiting for more.
	// Ignored with Handler and TxHandler. Defaults to MaxRunDefault (64).
	MaxRun int

	// DrainConcurrency (PolicyPause) is how many blocked keys the worker
	// retries and drains at once, across all its slots; each holds one of
	// the worker's own connections while its head is handled (so that an
	// operator's skip waits on its row lock; see WorkerConns). Raise it when
	// many keys block at once (a skewed load with failures). Defaults to 8.
	DrainConcurrency int

	// BatchMinEvents lets a slot that is behind take several ticks as one
	// batch of about this many events or more (fewer, larger batches while
	// it catches up); a slot that is level takes one tick at a time.
	// Defaults to 5000; -1 takes one tick per batch always.
	BatchMinEvents int

	// HandlerTimeout bounds one handler call; its context is cancelled
	// after it, and the call counts as a failure. Defaults to 1 minute; -1
	// means no timeout.
	HandlerTimeout time.Duration

	// ShutdownTimeout is how long Stop lets running handlers finish before
	// cancelling their contexts. A stop then records the progress of the
	// batches left open and releases the slots: under a platform that kills
	// the process a grace period after asking it to stop (Kubernetes'
	// terminationGracePeriodSeconds, 30s by default), keep ShutdownTimeout
	// about 10s below that period. Defaults to 20s.
	ShutdownTimeout time.Duration

	// PollInterval is the longest wait between two looks for new events
	// (one cheap read for all of the worker's slots). partitionq's ticker
	// (WorkerConfig.Ticker, partitionq tick) and PgQue's own ticker
	// announce every tick, which wakes the worker at once; with another
	// ticker (pgqd), or through a connection pooler (which does not pass
	// notifications on), this is the latency. Defaults to 500ms.
	PollInterval time.Duration

	// LivenessTimeout is how long one of the worker's loops may go without
	// starting a turn before Worker.Live reports the worker stuck: the loop
	// that renews its lease and takes slots, and the loop that looks for new
	// ticks and opens batches, of each generation it runs. Their turns are
	// a second or so apart. A database that refuses connections or answers
	// with errors does not hold them up (it makes the worker not Ready); a
	// statement that never returns does (a connection that a network
	// partition froze). A turn of the lease loop may wait for a renewal and
	// a claim, each bounded by LeaseDuration/5 (at least 1s) plus the
	// connection string's connect_timeout (5s when it sets none), so this
	// must be at least twice Ownership.LeaseDuration. Defaults to 1 minute
	// (twice the lease when that is longer).
	LivenessTimeout time.Duration
}

// OwnershipConfig sets how slots move between workers
// (WorkerConfig.Ownership). Zero values mean the defaults.
type OwnershipConfig struct {
	// LeaseDuration is how long a slot stays its owner's without a renewal
	// of the owner's lease (renewed every LeaseDuration/5). A worker that
	// cannot renew stops every handler of its slots LeaseDuration/5 before
	// the lease can run out, so before another worker may take its slots;
	// a standby takes the slots of a worker that died within about
	// LeaseDuration + StandbyPoll. Defaults to 5s.
	LeaseDuration time.Duration

	// StandbyPoll is how often a standby tries to take a slot whose owner
	// may have died (a graceful stop hands its slots over at once). Defaults
	// to 1s.
	StandbyPoll time.Duration

	// DeadHostTimeout bounds how long the server keeps the sessions of a
	// worker whose host vanished (power loss, a network partition the
	// server does not see): the worker sets its own sessions' TCP
	// keepalives and user timeout (settings any role may set for its own
	// session), so the server ends a dead host's sessions, its lease
	// session among them, within about this long of its last traffic, and
	// its slots move to a standby within about the larger of this and
	// LeaseDuration (plus StandbyPoll), with no server configuration.
	// Behind a pooler the worker sets nothing (the pooler's own timeouts
	// apply; the lease, which has no session there, expires by time alone).
	// Defaults to LeaseDuration + 10s; a negative value leaves the server's
	// settings.
	DeadHostTimeout time.Duration
}

// withDefaults fills in the defaults of every group; the defaults
// themselves are the constants above.
func (cfg WorkerConfig) withDefaults() WorkerConfig {
	cfg.Retry = cfg.Retry.withDefaults()
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.Ownership = cfg.Ownership.withDefaults()
	orDefault(&cfg.Limits.LivenessTimeout, max(LivenessTimeoutDefault, 2*cfg.Ownership.LeaseDuration))
	if cfg.Ticker != nil { // a copy: the caller's TickerConfig stays as it was
		t := cfg.Ticker.withDefaults()
		cfg.Ticker = &t
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = "partitionq:" + host + ":" + strconv.Itoa(os.Getpid())
	}
	return cfg
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func (cfg RetryConfig) withDefaults() RetryConfig {
	orDefault(&cfg.Policy, PolicyPause)
	if cfg.MaxAttempts == 0 && cfg.Policy == PolicyRetryLater {
		cfg.MaxAttempts = MaxAttemptsRetryLaterDefault
	}
	orDefault(&cfg.BackoffMin, BackoffMinDefault)
	orDefault(&cfg.BackoffMax, max(BackoffMaxDefault, cfg.BackoffMin))
	orDefault(&cfg.HeadScanInterval, HeadScanIntervalDefault)
	return cfg
}

func (cfg LimitsConfig) withDefaults() LimitsConfig {
	orDefault(&cfg.Concurrency, ConcurrencyDefault)
	orDefault(&cfg.MaxRun, MaxRunDefault)
	orDefault(&cfg.DrainConcurrency, DrainConcurrencyDefault)
	orDefault(&cfg.BatchMinEvents, BatchMinEventsDefault)
	orDefault(&cfg.HandlerTimeout, HandlerTimeoutDefault)
	orDefault(&cfg.ShutdownTimeout, ShutdownTimeoutDefault)
	orDefault(&cfg.PollInterval, PollIntervalDefault)
	return cfg
}

func (cfg OwnershipConfig) withDefaults() OwnershipConfig {
	orDefault(&cfg.LeaseDuration, LeaseDurationDefault)
	orDefault(&cfg.StandbyPoll, StandbyPollDefault)
	orDefault(&cfg.DeadHostTimeout, cfg.LeaseDuration+DeadHostMarginDefault)
	return cfg
}

// fieldError is the *ValidationError of one config field.
func fieldError(field, value, problem, fix string) error {
	return &ValidationError{Field: field, Value: value, Problem: problem, Fix: fix}
}

// validate checks cfg (with its defaults) field by field in declaration
// order, groups included, and names the first wrong field: the same
// mistakes always get the same error.
func (cfg WorkerConfig) validate() error {
	const p = "WorkerConfig."
	if err := ValidateQueueName(cfg.Queue); err != nil {
		return err
	}
	if err := ValidateGroupName(cfg.Group); err != nil {
		return err
	}
	switch {
	case cfg.SlotCount < 0 || cfg.SlotCount > MaxSlots:
		return fieldError(p+"SlotCount", strconv.Itoa(cfg.SlotCount), fmt.Sprintf("it must be between 1 and %d", MaxSlots),
			"give the group's number of slots (partitionq status shows it), or 0 to take the group's and follow its resizes")
	case cfg.Handler == nil:
		return fieldError(p+"Handler", "nil", "it is required", "pass a Handler or HandlerFunc (or InTx, Runs or RunsInTx of a TxHandler, RunHandler or TxRunHandler)")
	}
	if err := cfg.Retry.validate(p + "Retry."); err != nil {
		return err
	}
	if err := cfg.Limits.validate(p+"Limits.", cfg.Ownership.LeaseDuration); err != nil {
		return err
	}
	if err := cfg.Ownership.validate(p + "Ownership."); err != nil {
		return err
	}
	if cfg.Ticker != nil {
		if err := cfg.Ticker.validate(p + "Ticker."); err != nil {
			return err
		}
	}
	return validateText(p+"Identity", cfg.Identity, maxText)
}

// validate checks cfg (with its defaults) in declaration order, naming
// its fields after prefix ("WorkerConfig.Retry.").
func (cfg RetryConfig) validate(prefix string) error {
	switch {
	case cfg.Policy == "skip":
		return fieldError(prefix+"Policy", `"skip"`, "it is the retry-later policy's old name", `use PolicyRetryLater ("retry-later")`)
	case cfg.Policy != PolicyPause && cfg.Policy != PolicyRetryLater:
		return fieldError(prefix+"Policy", strconv.Quote(string(cfg.Policy)), "unknown policy", `use "pause" or "retry-later"`)
	case cfg.MaxAttempts < -1:
		return fieldError(prefix+"MaxAttempts", strconv.Itoa(cfg.MaxAttempts), "it is negative", "use 0 for the default, -1 for unlimited")
	case cfg.BackoffMin < 0:
		return fieldError(prefix+"BackoffMin", cfg.BackoffMin.String(), "it is negative", "use 0 for the default (1s)")
	case cfg.BackoffMax < cfg.BackoffMin:
		return fieldError(prefix+"BackoffMax", cfg.BackoffMax.String(), "it is less than the minimum ("+cfg.BackoffMin.String()+")",
			"give at least BackoffMin, or 0 for the default (5m, at least BackoffMin)")
	case cfg.MaxBlocked.After < 0:
		return fieldError(prefix+"MaxBlocked.After", cfg.MaxBlocked.After.String(), "it is negative", "use 0 for no bound")
	case cfg.HeadScanInterval < 0:
		return fieldError(prefix+"HeadScanInterval", cfg.HeadScanInterval.String(), "it is negative", "use 0 for the default (1s)")
	}
	return nil
}

// validate checks cfg (with its defaults) in declaration order, naming
// its fields after prefix ("WorkerConfig.Limits."); lease is the lease
// duration (LivenessTimeout must be at least twice it).
func (cfg LimitsConfig) validate(prefix string, lease time.Duration) error {
	switch {
	case cfg.Concurrency < 1 || cfg.Concurrency > 4096:
		return fieldError(prefix+"Concurrency", strconv.Itoa(cfg.Concurrency), "it must be between 1 and 4096", "use 0 for the default (16)")
	case cfg.MaxRun < 1 || cfg.MaxRun > maxRunMax:
		return fieldError(prefix+"MaxRun", strconv.Itoa(cfg.MaxRun), fmt.Sprintf("it must be between 1 and %d", maxRunMax), "use 0 for the default (64)")
	case cfg.DrainConcurrency < 1 || cfg.DrainConcurrency > 256:
		return fieldError(prefix+"DrainConcurrency", strconv.Itoa(cfg.DrainConcurrency), "it must be between 1 and 256", "use 0 for the default (8)")
	case cfg.BatchMinEvents < -1:
		return fieldError(prefix+"BatchMinEvents", strconv.Itoa(cfg.BatchMinEvents), "it is negative", "use 0 for the default (5000), -1 for one tick per batch")
	case cfg.HandlerTimeout < -1:
		return fieldError(prefix+"HandlerTimeout", cfg.HandlerTimeout.String(), "it is negative", "use 0 for the default (1m), -1 for none")
	case cfg.ShutdownTimeout < 0:
		return fieldError(prefix+"ShutdownTimeout", cfg.ShutdownTimeout.String(), "it is negative", "use 0 for the default (20s)")
	case cfg.PollInterval < 0:
		return fieldError(prefix+"PollInterval", cfg.PollInterval.String(), "it is negative", "use 0 for the default (500ms)")
	case cfg.LivenessTimeout < 2*lease:
		return fieldError(prefix+"LivenessTimeout", cfg.LivenessTimeout.String(), "it is less than twice the lease ("+(2*lease).String()+")",
			"give at least twice Ownership.LeaseDuration, or 0 for the default (1m, at least twice the lease)")
	}
	return nil
}

// validate checks cfg (with its defaults) in declaration order, naming
// its fields after prefix ("WorkerConfig.Ownership.").
func (cfg OwnershipConfig) validate(prefix string) error {
	switch {
	case cfg.LeaseDuration < 500*time.Millisecond:
		return fieldError(prefix+"LeaseDuration", cfg.LeaseDuration.String(), "it must be at least 500ms", "use 0 for the default (5s)")
	case cfg.StandbyPoll < 0:
		return fieldError(prefix+"StandbyPoll", cfg.StandbyPoll.String(), "it is negative", "use 0 for the default (1s)")
	case cfg.DeadHostTimeout >= 0 && cfg.DeadHostTimeout < 2*time.Second:
		return fieldError(prefix+"DeadHostTimeout", cfg.DeadHostTimeout.String(), "it must be at least 2s", "use 0 for the default (the lease + 10s), a negative value to leave the server's TCP settings")
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
	log    *slog.Logger

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
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := c.Group(ctx, cfg.Queue, cfg.Group)
	if err != nil {
		return nil, err
	}
	w := &Worker{c: c, cfg: cfg, group: g, done: make(chan struct{}), gens: map[int]*genRun{}, changed: make(chan struct{}, 1),
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
// (6), plus one per blocked key it drains at once (8). It depends on
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
		pool.Close()
		w.unregisterAll()
		close(w.done)
	}()
	w.log.Info("partitionq: worker started", slog.Any("slots", w.slotsLogged()), slog.String("policy", string(w.cfg.Retry.Policy)),
		slog.Int("concurrency", w.cfg.Limits.Concurrency))
	return nil
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
func (w *Worker) supervise() {
	for {
		select {
		case <-w.soft.Done():
			return
		case <-w.changed:
		}
		ctx, cancel := context.WithTimeout(w.soft, 10*time.Second)
		g, err := w.c.lookupGroup(ctx, w.c.pool, w.cfg.Queue, w.cfg.Group)
		cancel()
		if err != nil {
			if w.soft.Err() == nil {
				w.log.Warn("partitionq: reading the group's generations failed; trying again at the next lease renewal", slog.Any("error", err))
			}
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
		Generation: x.recorded, Slots: gr.slots, Consumers: x.consumers, SubIDs: x.subIDs, Stats: gr.stats, Identity: w.cfg.Identity,
		Parent: x.parent, ParentSubs: x.parentSubs, SchemaVersion: store.Latest(), OnRenew: w.onRenew,
		Member: w.member, Balance: len(w.cfg.Pins) == 0, LeaveTimeout: w.cfg.Limits.ShutdownTimeout,
		Concurrency: w.cfg.Limits.Concurrency, DrainConcurrency: w.cfg.Limits.DrainConcurrency, Policy: policy, MaxAttempts: maxAttempts,
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
