package bench

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq"
)

// baselineConsumer is the engine consumer of the plain single consumer's
// trial t.
func baselineConsumer(t int) string { return fmt.Sprintf("baseline_t%d", t) }

// pqRun is one partitionq configuration of a drained workload: N slots,
// in-slot concurrency C, the slots split over Workers workers (0 or 1: one
// worker runs them all), and a Variant of the worker's options.
type pqRun struct {
	N, C    int
	Workers int
	Variant string
	Drains  int // DrainConcurrency (0: the worker's default)
	// Identical runs the workers with one configuration (no slot list):
	// they share the slots by themselves. PerWorker, when set, bounds the
	// handler calls at once in each worker, as a resource of the process
	// would (a connection pool to another service, a CPU).
	Identical bool
	PerWorker int
}

// Variants of pqRun.
const (
	VariantHandler    = ""                // Handler, progress recorded (the default)
	VariantTxHandler  = "TxHandler"       // TxHandler, with an empty transaction per event
	VariantNoProgress = "DisableProgress" // Handler, DisableProgress set
)

func (p pqRun) workers() int { return max(1, p.Workers) }

// label is the run's config column.
func (p pqRun) label() string {
	s := fmt.Sprintf("N=%d c=%d", p.N, p.C)
	switch {
	case p.Identical:
		s += fmt.Sprintf(", %d identical worker%s", p.workers(), map[bool]string{true: "s"}[p.workers() > 1])
	case p.workers() > 1:
		s += fmt.Sprintf(", %d workers × %d slots", p.workers(), p.N/p.workers())
	}
	if p.PerWorker > 0 {
		s += fmt.Sprintf(", %d handler calls at once per worker", p.PerWorker)
	}
	if p.Variant != "" {
		s += ", " + p.Variant
	}
	if p.Drains > 0 {
		s += fmt.Sprintf(", %d drains", p.Drains)
	}
	return s
}

// runsOf is the (N, concurrency) pairs of m as runs of one worker.
func runsOf(m [][2]int) []pqRun {
	out := make([]pqRun, len(m))
	for i, nc := range m {
		out[i] = pqRun{N: nc[0], C: nc[1]}
	}
	return out
}

// groupName is the consumer group of partitionq run p, trial t: every
// configuration and trial has its own group, so each drains the same batch.
func groupName(p pqRun, t int) string {
	s := fmt.Sprintf("n%dc%d", p.N, p.C)
	if p.workers() > 1 {
		s += fmt.Sprintf("w%d", p.workers())
	}
	if p.Identical {
		s += "i"
	}
	if p.PerWorker > 0 {
		s += fmt.Sprintf("l%d", p.PerWorker)
	}
	switch p.Variant {
	case VariantTxHandler:
		s += "tx"
	case VariantNoProgress:
		s += "np"
	case VariantRunHandler:
		s += "run"
	case VariantTxRunHandler:
		s += "txrun"
	}
	if p.Drains > 0 {
		s += fmt.Sprintf("d%d", p.Drains)
	}
	return fmt.Sprintf("%s_t%d", s, t)
}

// drainWorkload prepares wl once on queue (every group of matrix and the
// baseline consumer registered, trials times each, the events sent, one
// tick made), then lets each system drain the same batch in turn: the
// baseline, partitionq for each (N, concurrency) of matrix, and the
// physical limits. With several trials, each system drains the batch that
// many times (the runs interleaved) and the median run is reported.
func (b *bench) drainWorkload(ctx context.Context, wl *Workload, queue string, matrix []pqRun, backoff time.Duration, trials int) error {
	trials = max(1, trials)
	ids, err := b.prepareQueue(ctx, wl, queue, matrix, trials)
	if err != nil {
		return err
	}
	runs := []func(t int) *Result{func(t int) *Result { return b.runBaseline(ctx, wl, queue, ids, backoff, t) }}
	for _, p := range matrix {
		runs = append(runs, func(t int) *Result { return b.runPartitionq(ctx, wl, queue, ids, p, backoff, t) })
	}
	limits := b.on.engine == freshdb.PgQ // the physical limits do not depend on the engine
	if wl.Handler == 0 && limits {
		runs = append(runs, func(int) *Result { return b.selectPlain(ctx, wl) })
	}
	got := make([][]*Result, len(runs))
	for t := 0; t < trials; t++ {
		for i, run := range runs {
			r := run(t)
			b.logf("  trial %d of %d: %s", t+1, trials, r.summary())
			got[i] = append(got[i], r)
		}
	}
	for _, rs := range got {
		b.add(median(rs), trials == 1)
	}
	if !limits {
		return nil
	}
	return b.limits(ctx, wl, matrix, backoff)
}

// median returns the run with the median rate, with every trial's rate
// noted; a run that failed wins (so the failure is reported).
func median(rs []*Result) *Result {
	if len(rs) == 1 {
		return rs[0]
	}
	rates := make([]float64, len(rs))
	for i, r := range rs {
		if r.Err != "" || !r.OK() {
			return r
		}
		rates[i] = r.Rate
	}
	sorted := append([]*Result(nil), rs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Rate < sorted[j].Rate })
	m := sorted[len(sorted)/2]
	m.Trials = rates
	return m
}

// idIndex finds the workload event of an engine event id. Ids of one
// queue's SendBatch are dense, so it is usually an array; it is read-only
// once built, and cheap, so that it weighs little on a no-op handler.
type idIndex struct {
	base  int64
	dense []int32 // id-base -> event index + 1 (0: unknown)
	m     map[int64]int32
}

func newIDIndex(ids []int64) *idIndex {
	x := &idIndex{}
	if len(ids) == 0 {
		return x
	}
	lo, hi := ids[0], ids[0]
	for _, id := range ids {
		lo, hi = min(lo, id), max(hi, id)
	}
	if hi-lo < int64(4*len(ids)+1024) {
		x.base, x.dense = lo, make([]int32, hi-lo+1)
		for i, id := range ids {
			x.dense[id-lo] = int32(i) + 1
		}
		return x
	}
	x.m = make(map[int64]int32, len(ids))
	for i, id := range ids {
		x.m[id] = int32(i)
	}
	return x
}

func (x *idIndex) lookup(id int64) (int, bool) {
	if x.dense != nil {
		if d := id - x.base; d >= 0 && d < int64(len(x.dense)) && x.dense[d] != 0 {
			return int(x.dense[d]) - 1, true
		}
		return 0, false
	}
	i, ok := x.m[id]
	return int(i), ok
}

// prepareQueue creates queue with a group for each (N, concurrency) of
// matrix and the baseline consumer, sends wl with SendBatch and makes one
// tick, so every consumer sees the whole workload as one batch. It returns
// the event index of each engine event id.
func (b *bench) prepareQueue(ctx context.Context, wl *Workload, queue string, matrix []pqRun, trials int) (*idIndex, error) {
	pool, err := b.pool(ctx, b.on.db, 4)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
	if err != nil {
		return nil, err
	}
	for t := 0; t < trials; t++ {
		for _, p := range matrix {
			if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queue, Group: groupName(p, t), Slots: p.N}); err != nil {
				return nil, err
			}
		}
		if _, err := pool.Exec(ctx, b.sql(`select pgq.register_consumer($1, $2)`), queue, baselineConsumer(t)); err != nil {
			return nil, err
		}
	}
	msgs := make([]partitionq.Message, len(wl.Events))
	for i, e := range wl.Events {
		msgs[i] = partitionq.Message{Key: e.Key, Type: "file", Payload: e.Payload}
	}
	start := time.Now()
	sent, err := client.SendBatch(ctx, queue, msgs)
	if err != nil {
		return nil, err
	}
	evIDs := make([]int64, len(sent))
	for i, r := range sent {
		evIDs[i] = r.ID
	}
	b.logf("%s: sent %d events with SendBatch in %.2fs", wl.Name, len(msgs), time.Since(start).Seconds())
	if err := client.TickOnce(ctx); err != nil {
		return nil, err
	}
	return newIDIndex(evIDs), nil
}

// expected is a generous guess of how long a drain of wl with conc
// handlers at once should take, to bound the wait.
func (b *bench) timeout(wl *Workload, conc int, backoff time.Duration) time.Duration {
	d := time.Duration(len(wl.Events)) * wl.Handler / time.Duration(max(1, conc))
	if bound := wl.orderedBound(conc, backoff); bound > 0 {
		d = max(d, time.Duration(float64(len(wl.Events))/bound*float64(time.Second)))
	}
	return 3*d + b.cfg.RunTimeout
}

// runPartitionq drains queue's batch with run p: N slots of in-slot
// concurrency C, in one worker or split evenly over several (each with a
// client and pool of its own, as separate processes would have), all in
// this process. The connections to the database are sampled meanwhile.
func (b *bench) runPartitionq(ctx context.Context, wl *Workload, queue string, ids *idIndex, p pqRun, backoff time.Duration, trial int) *Result {
	n, c := p.N, p.C
	res := &Result{Workload: wl.Name, System: SysPartitionq, Config: p.label(), N: n, Conc: c, Workers: p.workers(), Variant: p.Variant,
		Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, false)
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		var unknown atomic.Int64
		handle := func(ev *partitionq.Event) error {
			idx, ok := ids.lookup(ev.ID)
			if !ok {
				unknown.Add(1) // never expected: fails the run below
				return nil
			}
			return rec.Handle(idx, wl.Handler)
		}
		conns := b.srv.sampleConns(ctx, b.on.db)
		defer func() { res.PeakConns = conns.stop() }()
		var workers []*partitionq.Worker
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			for _, w := range workers {
				w.Stop(stopCtx) // a failed stop is reported below for the ones started
			}
		}()
		per := n / p.workers()
		for i := 0; i < p.workers(); i++ {
			handle := handle
			if p.PerWorker > 0 {
				room := make(chan struct{}, p.PerWorker)
				inner := handle
				handle = func(ev *partitionq.Event) error {
					room <- struct{}{}
					defer func() { <-room }()
					return inner(ev)
				}
			}
			pool, err := b.pool(ctx, b.on.db, partitionq.WorkerConns())
			if err != nil {
				return err
			}
			defer pool.Close()
			client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
			if err != nil {
				return err
			}
			wc := partitionq.WorkerConfig{
				Queue: queue, Group: groupName(p, trial), SlotCount: n,
				Identity: fmt.Sprintf("pqbench-%d", i), DisableProgress: p.Variant == VariantNoProgress,
				Retry:  partitionq.RetryConfig{Policy: partitionq.PolicyPause, BackoffMin: backoff},
				Limits: partitionq.LimitsConfig{Concurrency: c, ShutdownTimeout: 10 * time.Second, DrainConcurrency: p.Drains},
			}
			if p.workers() > 1 && !p.Identical {
				for s := i * per; s < (i+1)*per || (i == p.workers()-1 && s < n); s++ {
					wc.Pins = append(wc.Pins, s)
				}
			}
			if p.Variant == VariantTxHandler {
				wc.Handler = partitionq.InTx(partitionq.TxHandlerFunc(func(_ context.Context, _ pgx.Tx, ev *partitionq.Event) error { return handle(ev) }))
			} else {
				wc.Handler = partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error { return handle(ev) })
			}
			w, err := client.NewWorker(ctx, wc)
			if err != nil {
				return err
			}
			workers = append(workers, w)
		}
		start := time.Now()
		for _, w := range workers {
			if err := w.Start(ctx); err != nil {
				return err
			}
		}
		conns.sample()
		if !rec.Wait(b.timeout(wl, n*c, backoff)) {
			res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(wl.Events))
		}
		elapsed = rec.Elapsed(start)
		conns.sample()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, w := range workers {
			if err := w.Stop(stopCtx); err != nil {
				return fmt.Errorf("stop worker: %w", err)
			}
		}
		if n := unknown.Load(); n > 0 {
			return fmt.Errorf("the handler got %d events the bench did not send", n)
		}
		return nil
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps = rec.Check(), rec.Overlaps()
	res.Limit = wl.orderedBound(n*c, backoff)
	return res
}
