package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// scale measures how identical workers spread a group's work: the same
// I/O-bound workload (the W2 handler) drained by 1, 2 and 4 workers
// started with one configuration (they share the slots by themselves),
// each bounded to ScaleLimit handler calls at once, as a resource of its
// process would bound it; side by side in one run, each row with its
// ratio to one worker. Then a rolling restart: ScaleWorkers identical
// workers replaced one at a time while a producer sends at LatRate, its
// send-to-handler latency while the workers come and go against before.
func (b *bench) scale(ctx context.Context, wl, lat *Workload) error {
	var runs []pqRun
	for _, p := range b.cfg.ScaleWorkers {
		runs = append(runs, pqRun{N: b.cfg.ScaleN, C: b.cfg.LatC, Workers: p, Identical: true, PerWorker: b.cfg.ScaleLimit})
	}
	ids, err := b.prepareQueue(ctx, wl, "scale", runs, 1)
	if err != nil {
		return err
	}
	var one float64
	for _, p := range runs {
		r := b.runPartitionq(ctx, wl, "scale", ids, p, 0, 0)
		r.Workload = "scale"
		r.Limit = float64(p.workers()*p.PerWorker) / wl.Handler.Seconds() // the handlers' bound, every worker at its limit
		if p.workers() == 1 {
			one = r.Rate
		}
		if one > 0 {
			r.Note = fmt.Sprintf("%.2fx one worker", r.Rate/one)
		}
		b.add(r)
	}
	b.add(b.rollingRestart(ctx, lat))
	return nil
}

// RollingStats are what the rolling restart row measured.
type RollingStats struct {
	Workers int `json:"workers"`
	// Steady is the latency of the events sent before the restart began,
	// During that of those sent while it ran (each worker stopped, and its
	// replacement holding its share); Took how long it ran.
	Steady *Latency      `json:"steady"`
	During *Latency      `json:"during"`
	Took   time.Duration `json:"took"`
}

// rollingRestart runs ScaleWorkers identical workers with every default
// while a producer sends lat at LatRate; a third of the way through, it
// replaces them one at a time: a worker stops, a new one starts, and the
// next step waits until every worker holds its share.
func (b *bench) rollingRestart(ctx context.Context, lat *Workload) *Result {
	n, c, p := b.cfg.ScaleN, b.cfg.LatC, b.cfg.ScaleRestart
	res := &Result{Workload: "rolling", System: SysPartitionq, Config: fmt.Sprintf("N=%d c=%d, %d identical workers replaced one at a time, %d events/s, every default", n, c, p, b.cfg.LatRate),
		N: n, Conc: c, Workers: p, Events: len(lat.Events), Checked: true}
	rec := NewRecorder(lat, true)
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		const queue, group = "rolling", "g"
		admin, err := b.pool(ctx, b.on.db, 4)
		if err != nil {
			return err
		}
		defer admin.Close()
		client, err := partitionq.NewClient(ctx, admin, partitionq.Config{EngineSchema: b.on.engine})
		if err != nil {
			return err
		}
		if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queue, Group: group, Slots: n}); err != nil {
			return err
		}
		h := partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
			idx := lat.indexOfPayload(ev.Payload)
			if idx < 0 {
				return fmt.Errorf("pqbench: unknown event %d", ev.ID)
			}
			return rec.Handle(idx, 0)
		})
		type running struct {
			w    *partitionq.Worker
			pool interface{ Close() }
		}
		start := func(i int) (running, error) {
			pool, err := b.pool(ctx, b.on.db, 4)
			if err != nil {
				return running{}, err
			}
			wc, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
			if err == nil {
				var w *partitionq.Worker
				cfg := partitionq.WorkerConfig{Queue: queue, Group: group, Handler: h, Identity: fmt.Sprintf("pqbench-%d", i),
					Limits: partitionq.LimitsConfig{Concurrency: c, ShutdownTimeout: 10 * time.Second}}
				if w, err = wc.NewWorker(ctx, cfg); err == nil {
					if err = w.Start(ctx); err == nil {
						return running{w: w, pool: pool}, nil
					}
				}
			}
			pool.Close()
			return running{}, err
		}
		stop := func(r running) error {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			defer r.pool.Close()
			return r.w.Stop(sctx)
		}
		// The ticker runs apart, as its own Deployment would.
		tctx, stopTicker := context.WithCancel(ctx)
		tickerDone := make(chan struct{})
		go func() { defer close(tickerDone); client.RunTicker(tctx, partitionq.TickerConfig{}) }()
		defer func() { stopTicker(); <-tickerDone }()
		var ws []running
		defer func() {
			for _, r := range ws {
				stop(r)
			}
		}()
		for i := range p {
			r, err := start(i)
			if err != nil {
				return err
			}
			ws = append(ws, r)
		}
		settled := func() error {
			deadline := time.Now().Add(b.cfg.RunTimeout)
			for time.Now().Before(deadline) {
				st, err := client.Status(ctx, queue, group)
				if err == nil && len(st.Workers) == p {
					ok, total := true, 0
					for _, w := range st.Workers {
						total += len(w.Slots)
						ok = ok && (len(w.Slots) == n/p || len(w.Slots) == (n+p-1)/p)
					}
					if ok && total == n {
						return nil
					}
				}
				if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
					return err
				}
			}
			return fmt.Errorf("the shares did not settle within %s", b.cfg.RunTimeout)
		}
		if err := settled(); err != nil {
			return err
		}
		t0 := time.Now()
		restart := make(chan error, 1)
		var began, ended time.Time
		go func() {
			if err := sleepCtx(ctx, b.cfg.LatDuration/3); err != nil {
				restart <- err
				return
			}
			began = time.Now()
			for i := range ws {
				if err := stop(ws[i]); err != nil {
					restart <- err
					return
				}
				r, err := start(p + i)
				if err != nil {
					restart <- err
					return
				}
				ws[i] = r
				if err := settled(); err != nil {
					restart <- err
					return
				}
			}
			ended = time.Now()
			restart <- nil
		}()
		sendErr := b.sendPaced(ctx, client, queue, lat, rec)
		if err := <-restart; err != nil {
			return fmt.Errorf("rolling restart: %w", err)
		}
		if sendErr == nil && !rec.Wait(b.cfg.LatDuration+b.cfg.RunTimeout) {
			res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(lat.Events))
		}
		elapsed = rec.Elapsed(t0)
		res.Rolling = &RollingStats{Workers: p, Steady: rec.latencyBetween(t0, began), During: rec.latencyBetween(began, ended), Took: ended.Sub(began)}
		if ended.After(t0.Add(b.cfg.LatDuration)) {
			res.Note = "the restart outlasted the producer: its last steps saw no events"
		}
		return sendErr
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps, res.Lat = rec.Check(), rec.Overlaps(), rec.Latency()
	return res
}
