package partitionq

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of a worker (WorkerConfig.Registerer). Every series has the
// labels queue, group and slot; docs/operations.md lists them.
const (
	metricHandled        = "partitionq_events_handled_total"
	metricFailed         = "partitionq_events_failed_total"
	metricDeadLetters    = "partitionq_dead_letters_total"
	metricDuration       = "partitionq_handler_duration_seconds"
	metricOwned          = "partitionq_slot_owned"
	metricPending        = "partitionq_slot_pending_events"
	metricLag            = "partitionq_slot_lag_seconds"
	metricBlocked        = "partitionq_blocked_keys"
	metricParked         = "partitionq_parked_events"
	metricLongestBlocked = "partitionq_slot_longest_blocked_seconds"
	metricBusiestKey     = "partitionq_slot_busiest_key_pending_events"
)

// hotKeysMaxAge is how long the busiest keys (a count by key, or a sample,
// of the group's backlog: Client.HotKeys) are kept between two reads.
const hotKeysMaxAge = 15 * time.Second

// The gauges read from the database come from one Client.Status read of the
// whole group, kept for statusMaxAge (so scrapes from several Prometheus
// servers, or a fast scrape interval, cost at most one read a second) and
// bounded by statusTimeout (so a scrape never hangs on a slow or unreachable
// database: the gauges are left out of that scrape instead).
const (
	statusMaxAge  = time.Second
	statusTimeout = 2 * time.Second
)

// durationBuckets are the upper bounds of the handler duration histogram,
// in seconds: 1ms to a minute (HandlerTimeoutDefault).
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// slotPendingEvents is the value of partitionq_slot_pending_events: the
// events of the slot's own share not yet finished (Status's exact count).
func slotPendingEvents(s SlotStatus) int64 { return s.Pending }

// slotDescs are the descriptions of one slot's series. Each carries the
// slot's labels as constant labels, so that the registry itself refuses a
// second worker in the process registering the same slots (see register).
type slotDescs struct {
	handled, failed, dead                         *prometheus.Desc
	owned, pending, lag, blocked, parked, longest *prometheus.Desc
	busiest                                       *prometheus.Desc
	duration                                      prometheus.Histogram
}

// workerMetrics is a worker's prometheus.Collector: the counters come from
// the worker's per-slot counters (the numbers Worker.Stats returns, kept on
// the handler path), the histogram is observed on the handler path through
// a child resolved once per slot, and the gauges come from the cached
// status read. Safe for concurrent use.
type workerMetrics struct {
	w         *Worker
	slots     []slotDescs            // by position in w.slots
	durations []prometheus.Histogram // by slot number (nil for slots the worker does not run)

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

func newWorkerMetrics(w *Worker) *workerMetrics {
	m := &workerMetrics{w: w, durations: make([]prometheus.Histogram, w.group.Slots), now: time.Now,
		read:    func(ctx context.Context) (GroupStatus, error) { return w.c.Status(ctx, w.cfg.Queue, w.cfg.Group) },
		readHot: func(ctx context.Context, gs GroupStatus) (HotKeys, error) { return w.c.hotKeys(ctx, gs, 1) }}
	for _, s := range w.slots {
		labels := prometheus.Labels{"queue": w.cfg.Queue, "group": w.cfg.Group, "slot": strconv.Itoa(s)}
		desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
		d := slotDescs{
			handled: desc(metricHandled, "Events the handler finished successfully, in this process."),
			failed:  desc(metricFailed, "Handler calls that failed (each attempt of an event counts), in this process."),
			dead:    desc(metricDeadLetters, "Events this process moved to the dead letters (out of attempts, DeadLetterNow, blocked too long)."),
			owned:   desc(metricOwned, "1 when a live worker (any process) owns the slot, 0 when nobody runs it."),
			pending: desc(metricPending, "Events of the slot's share not yet handled."),
			lag:     desc(metricLag, "Age of the last tick the slot finished: how far behind its reading is."),
			blocked: desc(metricBlocked, "Keys of the slot blocked behind a failed event (pause policy)."),
			parked:  desc(metricParked, "Events of the slot set aside in the engine's retry queue: blocked heads, the events waiting behind them, and timed retries."),
			longest: desc(metricLongestBlocked, "How long the slot's longest-blocked key has been blocked (since its head first failed); 0 when none is."),
			busiest: desc(metricBusiestKey, "Pending events of the slot's busiest key (the key with the most; its name is not a label): exact, or a sampled estimate above 200,000 pending events in the group."),
			duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricDuration, ConstLabels: labels, Buckets: durationBuckets,
				Help: "Time of one handler call (with a TxHandler, its transaction included)."}),
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
			m.w.cfg.Queue, m.w.cfg.Group, slotList(m.w.slots), err)
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

// Describe implements prometheus.Collector.
func (m *workerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.slots {
		for _, desc := range []*prometheus.Desc{d.handled, d.failed, d.dead, d.owned, d.pending, d.lag, d.blocked, d.parked, d.longest, d.busiest} {
			ch <- desc
		}
		d.duration.Describe(ch)
	}
}

// Collect implements prometheus.Collector: the worker's counters and
// histograms, then the gauges from at most one status read (cached).
func (m *workerMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	for i, s := range m.w.slots {
		d, st := &m.slots[i], m.w.stats[s]
		counter(d.handled, st.Processed.Load())
		counter(d.failed, st.Failed.Load())
		counter(d.dead, st.DeadLettered.Load())
		d.duration.Collect(ch)
	}
	gs, err := m.groupStatus()
	if err != nil {
		return // logged once per read; the gauges are absent from this scrape
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	for i, s := range m.w.slots {
		if s >= len(gs.SlotStatus) {
			continue
		}
		d, ss := &m.slots[i], gs.SlotStatus[s]
		owned := 0.0
		if ss.Owner != nil {
			owned = 1
		}
		gauge(d.owned, owned)
		gauge(d.pending, float64(slotPendingEvents(ss)))
		gauge(d.lag, ss.Lag.Seconds())
		gauge(d.blocked, float64(ss.BlockedKeys))
		gauge(d.parked, float64(ss.SetAside))
		gauge(d.longest, ss.LongestBlocked.Seconds())
	}
	if hot, ok := m.busiest(gs); ok {
		for i, s := range m.w.slots {
			if s < len(hot.Busiest) {
				gauge(m.slots[i].busiest, float64(hot.Busiest[s].Pending))
			}
		}
	}
}

// busiest returns the group's busiest keys, read at most once per
// hotKeysMaxAge (from the status just read) and within statusTimeout.
func (m *workerMetrics) busiest(gs GroupStatus) (HotKeys, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.hotAt.IsZero() && m.now().Sub(m.hotAt) < hotKeysMaxAge {
		return m.hot, m.hotOK
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	hot, err := m.readHot(ctx, gs)
	m.hot, m.hotOK, m.hotAt = hot, err == nil, m.now()
	if err != nil {
		m.w.log.Warn("partitionq: metrics: reading the busiest keys failed; their gauge is left out for a while", slog.Any("error", err))
	}
	return m.hot, m.hotOK
}

// groupStatus returns the group's status, read at most once per
// statusMaxAge and within statusTimeout. Concurrent scrapes share one read.
func (m *workerMetrics) groupStatus() (GroupStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.readAt.IsZero() && m.now().Sub(m.readAt) < statusMaxAge {
		return m.status, m.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	m.status, m.err = m.read(ctx)
	m.readAt = m.now()
	if m.err != nil {
		m.w.log.Warn("partitionq: metrics: reading the group's status failed; its gauges are left out of this scrape", slog.Any("error", m.err))
	}
	return m.status, m.err
}
