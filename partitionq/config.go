package partitionq

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// A worker's configuration: WorkerConfig, its groups of settings, their
// defaults and their checks. The worker itself is in worker.go.

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
	DeadHostMarginDefault = 10 * time.Second
	// DrainConcurrencyDefault is the most blocked keys a worker drains at
	// once by default (Limits.DrainConcurrency), each on a connection of
	// its own: it starts at 8 and grows to this as keys wait for a drain.
	DrainConcurrencyDefault = 24
	BatchMinEventsDefault   = 5000
	HeadScanIntervalDefault = time.Second
	TickIntervalDefault     = 100 * time.Millisecond
	// MaxRunDefault is Limits.MaxRun's default: past a few dozen events
	// a run's round trip and commit are a small part of its cost.
	MaxRunDefault = 64
)

// drainFloor is where the default, adaptive bound on a worker's drains
// starts (Limits.DrainConcurrency).
const drainFloor = 8

// maxRunMax bounds Limits.MaxRun: a run is a part of what a slot reads
// ahead (twice chunkSize).
const maxRunMax = chunkSize

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
	// operator's skip waits on its row lock; see WorkerConns). By default
	// the bound adapts: 8 drains at first, one more each time a blocked key
	// has waited 50 ms for a drain, up to DrainConcurrencyDefault (24), so
	// that a few blocked keys keep few connections and many keys blocked
	// at once (a skewed load with failures) are drained as they come; the
	// pool closes a drain's connection after a minute unused. A value set
	// here is a fixed bound.
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
		return fieldError(prefix+"DrainConcurrency", strconv.Itoa(cfg.DrainConcurrency), "it must be between 1 and 256", "use 0 for the default (8 at first, up to 24)")
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
