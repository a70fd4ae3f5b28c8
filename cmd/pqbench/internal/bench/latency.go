package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// latency measures send-to-handler latency at a steady moderate rate, once
// with the default tick settings and once with the lowest this bench runs
// (the queue's ticker_max_lag, the in-process ticker's interval and the
// slots' poll interval all at LatFastTick), at LatN slots and then at each
// of LatFastNs.
func (b *bench) latency(ctx context.Context, wl *Workload) error {
	b.add(b.latencyRun(ctx, wl, "lat_default", "default ticks (max lag 3s, max count 500; ticker 100ms, poll 500ms)", b.cfg.LatN, 0, 0, 0))
	f := b.cfg.LatFastTick
	for _, n := range b.cfg.LatFastNs {
		b.add(b.latencyRun(ctx, wl, fmt.Sprintf("lat_fast_n%d", n), fmt.Sprintf("lowest ticks (max lag %s, ticker %s, poll %s)", f, f, f), n, f, f, f))
	}
	return nil
}

func (b *bench) latencyRun(ctx context.Context, wl *Workload, queue, label string, n int, maxLag, tickEvery, poll time.Duration) *Result {
	c := b.cfg.LatC
	res := &Result{Workload: "latency", System: SysPartitionq, Config: fmt.Sprintf("N=%d c=%d, %s", n, c, label), N: n, Conc: c,
		Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, true)
	var elapsed time.Duration
	cost, err := b.measure(ctx, b.on.db, rec.Handled, func() error {
		conns := b.srv.sampleConns(ctx, b.on.db)
		defer func() { res.PeakConns = conns.stop() }()
		pool, err := b.pool(ctx, b.on.db, partitionq.PoolConns(n, c)+2)
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
		w, err := client.NewWorker(ctx, partitionq.WorkerConfig{Queue: queue, Group: "lat", N: n, Handler: h, Concurrency: c,
			RunTicker: true, TickInterval: tickEvery, PollInterval: poll, ShutdownTimeout: 10 * time.Second, Identity: "pqbench"})
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
