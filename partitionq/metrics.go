package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
)

// Metrics of a worker (WorkerConfig.Registerer). Every series has the
// labels queue, group, slots (the number of slots of the slot's
// generation: during a resize the old and the new generation both have a
// slot 0) and slot; docs/operations.md lists them.
const (
	metricHandled        = "partitionq_events_handled_total"
	metricFailed         = "partitionq_events_failed_total"
	metricDeadLetters    = "partitionq_dead_letters_total"
	metricDuration       = "partitionq_handler_duration_seconds"
	metricRunEvents      = "partitionq_handler_run_events"
	metricOwned          = "partitionq_slot_owned"
	metricPending        = "partitionq_slot_pending_events"
	metricLag            = "partitionq_slot_lag_seconds"
	metricBlocked        = "partitionq_blocked_keys"
	metricSetAside       = "partitionq_set_aside_events"
	metricLongestBlocked = "partitionq_slot_longest_blocked_seconds"
	metricBusiestKey     = "partitionq_slot_busiest_key_pending_events"
	// metricMoves counts the times a slot came to the worker from another,
	// with a label reason (lease.Reasons: join, leave, crash, resize).
	metricMoves = "partitionq_slot_moves_total"
)

// metricDuplicates is the client's counter (Config.Registerer), labelled
// by queue.
const metricDuplicates = "partitionq_send_duplicates_total"

// registerClientMetrics registers the client's counter of duplicates on
// reg, or returns the one a client registered there before (clients of one
// process share it).
func registerClientMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricDuplicates,
		Help: "Messages refused as duplicates of a send within the dedup window (Message.DedupID): nothing inserted."}, []string{"queue"})
	err := reg.Register(cv)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return cv, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("partitionq: Config.Registerer: cannot register %s: %w", metricDuplicates, err)
}

// countDuplicates adds n to the duplicates of queue.
func (c *Client) countDuplicates(queue string, n int) {
	if c.duplicates != nil && n > 0 {
		c.duplicates.WithLabelValues(queue).Add(float64(n))
	}
}

// The gauges read from the database come from one Client.Status read of the
// whole group, kept for statusMaxAge (so scrapes from several Prometheus
// servers, or a fast scrape interval, cost at most one read a second) and
// bounded by statusTimeout (so a scrape never hangs on a slow or unreachable
// database: the gauges are left out of that scrape instead).
const (
	statusMaxAge  = time.Second
	statusTimeout = 2 * time.Second
)

// hotKeysMaxAge is how long the busiest keys (a count by key, or a sample,
// of the group's backlog: Client.HotKeys) are kept between two reads.
const hotKeysMaxAge = 15 * time.Second

// durationBuckets are the upper bounds of the handler duration histogram,
// in seconds: 1ms to a minute (HandlerTimeoutDefault).
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// runEventsBuckets are the upper bounds of the histogram of a run
// handler's events per call: 1 to Limits.MaxRun's bound.
var runEventsBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// slotPendingEvents is the value of partitionq_slot_pending_events: the
// events of the slot's own share not yet finished (Status's exact count).
func slotPendingEvents(s SlotStatus) int64 { return s.Pending }

// slotDescs are the descriptions of one slot's series. Each carries the
// slot's labels as constant labels, so that the registry itself refuses a
// second worker in the process registering the same slots (see register).
type slotDescs struct {
	handled, failed, dead                           *prometheus.Desc
	owned, pending, lag, blocked, setAside, longest *prometheus.Desc
	busiest                                         *prometheus.Desc
	moves                                           *prometheus.Desc // with the label reason
	duration                                        prometheus.Histogram
	runEvents                                       prometheus.Histogram // nil without a run handler
}

// workerMetrics is a worker's prometheus.Collector: the counters come from
// the worker's per-slot counters (the numbers Worker.Stats returns, kept on
// the handler path), the histogram is observed on the handler path through
// a child resolved once per slot, and the gauges come from the cached
// status read. Safe for concurrent use.
type workerMetrics struct {
	w         *Worker
	gr        *genRun
	slots     []slotDescs            // by position in gr.slots
	durations []prometheus.Histogram // by slot number (nil for slots the worker does not run)
	runEvents []prometheus.Histogram // by slot number (nil without a run handler)
}

// statusCache is the one Client.Status read of a worker's metrics: shared
// by the collectors of every generation it runs.
type statusCache struct {
	// read, readHot and now are Client.Status, Client.HotKeys (of a status
	// just read) and time.Now (replaced in tests).
	read    func(ctx context.Context) (GroupStatus, error)
	readHot func(ctx context.Context, gs GroupStatus) (HotKeys, error)
	now     func() time.Time

	mu     sync.Mutex
	readAt time.Time // when the cached status was read (zero: never)
	status GroupStatus
	err    error

	hotAt time.Time // when the busiest keys were read (zero: never)
	hot   HotKeys
	hotOK bool
}

// newWorkerMetrics makes the collector of the slots of one generation run.
func newWorkerMetrics(w *Worker, gr *genRun) *workerMetrics {
	m := &workerMetrics{w: w, gr: gr, durations: make([]prometheus.Histogram, gr.n)}
	if w.takesRuns() {
		m.runEvents = make([]prometheus.Histogram, gr.n)
	}
	for _, s := range gr.slots {
		labels := prometheus.Labels{"queue": w.cfg.Queue, "group": w.cfg.Group, "slots": strconv.Itoa(gr.n), "slot": strconv.Itoa(s)}
		desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
		d := slotDescs{
			handled: desc(metricHandled, "Events the handler finished successfully, in this process."),
			failed:  desc(metricFailed, "Handler calls that failed (each attempt of an event counts), in this process."),
			dead:    desc(metricDeadLetters, "Events this process moved to the dead letters (out of attempts, DeadLetterNow, blocked too long)."),
			moves: prometheus.NewDesc(metricMoves, "Times the slot came to this worker from another, by reason: join (handed over to balance the group), leave (released by a worker that stopped), crash (taken from a worker whose lease expired), resize (a new generation's slot).",
				[]string{"reason"}, labels),
			owned:    desc(metricOwned, "1 when a live worker (any process) owns the slot, 0 when nobody runs it."),
			pending:  desc(metricPending, "Events of the slot's share not yet handled."),
			lag:      desc(metricLag, "Age of the last tick the slot finished: how far behind its reading is."),
			blocked:  desc(metricBlocked, "Keys of the slot blocked behind a failed event (pause policy)."),
			setAside: desc(metricSetAside, "Events of the slot set aside in the engine's retry queue: blocked heads, the events waiting behind them, and timed retries."),
			busiest:  desc(metricBusiestKey, "Pending events of the slot's busiest key (the key with the most; its name is not a label): exact, or a sampled estimate above 200,000 pending events in the group."),
			longest:  desc(metricLongestBlocked, "How long the slot's longest-blocked key has been blocked (since its head first failed); 0 when none is."),
			duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricDuration, ConstLabels: labels, Buckets: durationBuckets,
				Help: "Time of one handler call (with a TxHandler, its transaction included)."}),
		}
		if m.runEvents != nil {
			d.runEvents = prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricRunEvents, ConstLabels: labels, Buckets: runEventsBuckets,
				Help: "Events of one run handler call (RunHandler, TxRunHandler)."})
			m.runEvents[s] = d.runEvents
		}
		m.slots = append(m.slots, d)
		m.durations[s] = d.duration
	}
	return m
}

// register adds m to reg. A second worker of the process that registers
// any of the same slots of the same group on reg fails here (the registry
// refuses a description it holds already), and the error names the fix.
func (m *workerMetrics) register(reg prometheus.Registerer) error {
	if err := reg.Register(m); err != nil {
		return fmt.Errorf("partitionq: WorkerConfig.Registerer: the metrics of queue %q group %q slots %s cannot be registered "+
			"(another worker of this process registered the same slots there already?): give the workers disjoint Slots, "+
			"or each its own Registerer: %w",
			m.w.cfg.Queue, m.w.cfg.Group, slotList(m.gr.slots), err)
	}
	return nil
}

func slotList(slots []int) string {
	b := make([]byte, 0, 4*len(slots))
	for i, s := range slots {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(s), 10)
	}
	return string(b)
}

// observe records one handler call of slot that took d. No allocation.
func (m *workerMetrics) observe(slot int, d time.Duration) {
	if slot >= 0 && slot < len(m.durations) {
		if h := m.durations[slot]; h != nil {
			h.Observe(d.Seconds())
		}
	}
}

// observeRun records one run handler call of slot that took d and had n
// events. No allocation.
func (m *workerMetrics) observeRun(slot int, d time.Duration, n int) {
	m.observe(slot, d)
	if slot >= 0 && slot < len(m.runEvents) {
		if h := m.runEvents[slot]; h != nil {
			h.Observe(float64(n))
		}
	}
}

// Describe implements prometheus.Collector.
func (m *workerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.slots {
		for _, desc := range []*prometheus.Desc{d.handled, d.failed, d.dead, d.moves, d.owned, d.pending, d.lag, d.blocked, d.setAside, d.longest, d.busiest} {
			ch <- desc
		}
		d.duration.Describe(ch)
		if d.runEvents != nil {
			d.runEvents.Describe(ch)
		}
	}
}

// Collect implements prometheus.Collector: the worker's counters and
// histograms, then the gauges from at most one status read (cached).
func (m *workerMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	for i, s := range m.gr.slots {
		d, st := &m.slots[i], m.gr.stats[s]
		counter(d.handled, st.Handled.Load())
		counter(d.failed, st.Failed.Load())
		counter(d.dead, st.DeadLettered.Load())
		for k, reason := range lease.Reasons {
			ch <- prometheus.MustNewConstMetric(d.moves, prometheus.CounterValue, float64(st.Moves[k].Load()), reason)
		}
		d.duration.Collect(ch)
		if d.runEvents != nil {
			d.runEvents.Collect(ch)
		}
	}
	gs, err := m.w.status.get(m.w.log)
	if err != nil {
		return // logged once per read; the gauges are absent from this scrape
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	at := map[int]int{}
	for i, ss := range gs.SlotStatus {
		if ss.Slots == m.gr.n {
			at[ss.Slot] = i
		}
	}
	for i, s := range m.gr.slots {
		k, ok := at[s]
		if !ok {
			continue
		}
		d, ss := &m.slots[i], gs.SlotStatus[k]
		owned := 0.0
		if ss.Owner != nil {
			owned = 1
		}
		gauge(d.owned, owned)
		gauge(d.pending, float64(slotPendingEvents(ss)))
		gauge(d.lag, ss.Lag.Seconds())
		gauge(d.blocked, float64(ss.BlockedKeys))
		gauge(d.setAside, float64(ss.SetAside))
		gauge(d.longest, ss.LongestBlocked.Seconds())
	}
	if m.gr.n != gs.Slots { // the busiest keys are the current generation's
		return
	}
	if hot, ok := m.w.status.busiest(m.w.log, gs); ok {
		for i, s := range m.gr.slots {
			if s < len(hot.Busiest) {
				gauge(m.slots[i].busiest, float64(hot.Busiest[s].Pending))
			}
		}
	}
}

// busiest returns the group's busiest keys, read at most once per
// hotKeysMaxAge (from the status just read) and within statusTimeout.
func (m *statusCache) busiest(log *slog.Logger, gs GroupStatus) (HotKeys, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now
	if m.now != nil {
		now = m.now
	}
	if !m.hotAt.IsZero() && now().Sub(m.hotAt) < hotKeysMaxAge {
		return m.hot, m.hotOK
	}
	if m.readHot == nil {
		return HotKeys{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	hot, err := m.readHot(ctx, gs)
	m.hot, m.hotOK, m.hotAt = hot, err == nil, now()
	if err != nil {
		log.Warn("partitionq: metrics: reading the busiest keys failed; their gauge is left out for a while", slog.Any("error", err))
	}
	return m.hot, m.hotOK
}

// get returns the group's status, read at most once per statusMaxAge and
// within statusTimeout. Concurrent scrapes share one read.
func (m *statusCache) get(log *slog.Logger) (GroupStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now
	if m.now != nil {
		now = m.now
	}
	if !m.readAt.IsZero() && now().Sub(m.readAt) < statusMaxAge {
		return m.status, m.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	m.status, m.err = m.read(ctx)
	m.readAt = now()
	if m.err != nil {
		log.Warn("partitionq: metrics: reading the group's status failed; its gauges are left out of this scrape", slog.Any("error", m.err))
	}
	return m.status, m.err
}
