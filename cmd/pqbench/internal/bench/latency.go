package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
)

// latency measures send-to-handler latency at a steady moderate rate, once
// with every default (what setup gives a new queue, the worker's ticker and
// poll intervals) at LatN slots, and LatTrials times at each of LatFastNs
// with the lowest tick settings this bench runs (the in-process ticker's
// interval and the slots' poll interval at LatFastTick: the one flag of
// docs/tuning.md; the queue's max lag setup's), each row the median trial by p99, the others' p99 in
// its note.
func (b *bench) latency(ctx context.Context, wl *Workload) error {
	b.add(b.latencyRun(ctx, wl, "lat_default", fmt.Sprintf("default ticks (setup's max lag %s; ticker %s, poll %s)",
		partitionq.TickMaxLagDefault, partitionq.TickIntervalDefault, partitionq.PollIntervalDefault), b.cfg.LatN, 0, 0, 0))
	f := b.cfg.LatFastTick
	for _, n := range b.cfg.LatFastNs {
		var trials []*Result
		for i := range max(1, b.cfg.LatTrials) {
			trials = append(trials, b.latencyRun(ctx, wl, fmt.Sprintf("lat_fast_n%d_%d", n, i), fmt.Sprintf("lowest ticks (ticker %s, poll %s)", f, f), n, 0, f, f))
		}
		b.add(medianByP99(trials))
	}
	return nil
}

// medianByP99 returns the trial with the median p99 (a failed or unchecked
// trial first: it must not hide), with every trial's p99 in its note.
func medianByP99(trials []*Result) *Result {
	for _, t := range trials {
		if !t.OK() || t.Lat == nil {
			return t
		}
	}
	sorted := append([]*Result(nil), trials...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Lat.P99 < sorted[j].Lat.P99 })
	m := sorted[len(sorted)/2]
	if len(trials) > 1 {
		var p99s []string
		for _, t := range trials {
			p99s = append(p99s, ms(t.Lat.P99))
		}
		m.Note = strings.TrimSpace(m.Note + fmt.Sprintf(" p99 of the %d trials: %s ms (the median's row)", len(trials), strings.Join(p99s, ", ")))
	}
	return m
}

func (b *bench) latencyRun(ctx context.Context, wl *Workload, queue, label string, n int, maxLag, tickEvery, poll time.Duration) *Result {
	c := b.cfg.LatC
	res := &Result{Workload: "latency", System: SysPartitionq, Config: fmt.Sprintf("N=%d c=%d, %s", n, c, label), N: n, Conc: c,
		Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, true)
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		conns := b.srv.sampleConns(ctx, b.on.db)
		defer func() { res.PeakConns = conns.stop() }()
		pool, err := b.pool(ctx, b.on.db, partitionq.WorkerConns()+2)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
		if err != nil {
			return err
		}
		if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queue, Group: "lat", Slots: n, TickMaxLag: maxLag}); err != nil {
			return err
		}
		h := partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
			idx := wl.indexOfPayload(ev.Payload)
			if idx < 0 {
				return fmt.Errorf("pqbench: unknown event %d", ev.ID)
			}
			return rec.Handle(idx, 0)
		})
		w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
			Queue: queue, Group: "lat", SlotCount: n, Handler: h,
			Ticker: &partitionq.TickerConfig{Interval: tickEvery}, Identity: "pqbench",
			Limits: partitionq.LimitsConfig{Concurrency: c, PollInterval: poll, ShutdownTimeout: 10 * time.Second},
		})
		if err != nil {
			return err
		}
		batches0, err := b.engineBatches(ctx, pool)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := w.Start(ctx); err != nil {
			return err
		}
		conns.sample()
		sendErr := b.sendPaced(ctx, client, queue, wl, rec)
		if sendErr == nil && !rec.Wait(b.cfg.LatDuration+b.cfg.RunTimeout) {
			res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(wl.Events))
		}
		elapsed = rec.Elapsed(start)
		if batches1, err := b.engineBatches(ctx, pool); err == nil && elapsed > 0 {
			res.BatchesPerSec = float64(batches1-batches0) / time.Since(start).Seconds()
		}
		conns.sample()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			return err
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

// sendPaced sends wl at LatRate events a second: every 10ms, the events due
// by then in one SendBatch, each marked sent just before the call.
func (b *bench) sendPaced(ctx context.Context, client *partitionq.Client, queue string, wl *Workload, rec *Recorder) error {
	const step = 10 * time.Millisecond
	perStep := float64(b.cfg.LatRate) * step.Seconds()
	start := time.Now()
	sent := 0
	for tick := 1; sent < len(wl.Events); tick++ {
		due := min(len(wl.Events), int(float64(tick)*perStep+0.5))
		if due > sent {
			batch := make([]partitionq.Message, 0, due-sent)
			now := time.Now()
			for i := sent; i < due; i++ {
				e := &wl.Events[i]
				rec.MarkSent(i, now)
				batch = append(batch, partitionq.Message{Key: e.Key, Type: "file", Payload: e.Payload})
			}
			if _, err := client.SendBatch(ctx, queue, batch); err != nil {
				return err
			}
			sent = due
		}
		if d := time.Until(start.Add(time.Duration(tick) * step)); d > 0 {
			time.Sleep(d)
		}
	}
	return nil
}

// engineBatches is how many engine batches the run's database has opened
// so far (the engine's batch id sequence).
func (b *bench) engineBatches(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`select last_value from %s.batch_id_seq`, pgx.Identifier{b.on.engine}.Sanitize())).Scan(&n)
	return n, err
}
