package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// resize measures an online split (ResizeFrom to 2 x ResizeFrom slots)
// while a producer sends at LatRate events a second with every default
// setting: the time from the resize call to the first event handled by a
// slot of the new generation, the time until the resize completes, and the
// producer's send rate while the resize runs against its rate before it,
// all judged by the order checker (no event lost, out of order or run
// twice at once across the cutover).
func (b *bench) resize(ctx context.Context, wl *Workload) error {
	from := b.cfg.ResizeFrom
	to := 2 * from
	c := b.cfg.LatC
	res := &Result{Workload: "resize", System: SysPartitionq, Config: fmt.Sprintf("N=%d→%d c=%d, %d events/s, every default", from, to, c, b.cfg.LatRate),
		N: from, Conc: c, Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, true)
	var elapsed time.Duration
	var firstNew atomic.Int64 // unix ns of the first handling by a new slot
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		pool, err := b.pool(ctx, b.on.db, partitionq.WorkerConns()+4)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
		if err != nil {
			return err
		}
		const queue = "resize"
		if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queue, Group: "split", Slots: from}); err != nil {
			return err
		}
		h := partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
			idx := wl.indexOfPayload(ev.Payload)
			if idx < 0 {
				return fmt.Errorf("pqbench: unknown event %d", ev.ID)
			}
			if ev.Slots == to {
				firstNew.CompareAndSwap(0, time.Now().UnixNano())
			}
			return rec.Handle(idx, 0)
		})
		w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
			Queue: queue, Group: "split", Handler: h,
			Ticker: &partitionq.TickerConfig{}, Identity: "pqbench",
			Limits: partitionq.LimitsConfig{Concurrency: c, ShutdownTimeout: 10 * time.Second},
		})
		if err != nil {
			return err
		}
		start := time.Now()
		if err := w.Start(ctx); err != nil {
			return err
		}
		// The resize, a third of the way through the sends.
		type outcome struct {
			at, done time.Time
			err      error
		}
		resized := make(chan outcome, 1)
		go func() {
			t := time.NewTimer(b.cfg.LatDuration / 3)
			defer t.Stop()
			select {
			case <-ctx.Done():
				resized <- outcome{err: ctx.Err()}
				return
			case <-t.C:
			}
			at := time.Now()
			if _, err := client.Resize(ctx, partitionq.ResizeRequest{Queue: queue, Group: "split", Slots: to, Reason: "pqbench", Actor: "pqbench"}); err != nil {
				resized <- outcome{at: at, err: err}
				return
			}
			wctx, cancel := context.WithTimeout(ctx, b.cfg.LatDuration+b.cfg.RunTimeout)
			defer cancel()
			_, err := client.WaitResize(wctx, queue, "split", 20*time.Millisecond)
			resized <- outcome{at: at, done: time.Now(), err: err}
		}()
		sendErr := b.sendPaced(ctx, client, queue, wl, rec)
		o := <-resized
		if sendErr == nil && o.err == nil && !rec.Wait(b.cfg.LatDuration+b.cfg.RunTimeout) {
			res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(wl.Events))
		}
		elapsed = rec.Elapsed(start)
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			return err
		}
		if o.err != nil {
			return fmt.Errorf("resize: %w", o.err)
		}
		// The producer's rate: events marked sent before the resize, and
		// while it ran.
		before, during := rec.sentBetween(start, o.at), rec.sentBetween(o.at, o.done)
		rs := &ResizeStats{Complete: o.done.Sub(o.at),
			RateBefore: float64(before) / o.at.Sub(start).Seconds(), RateDuring: float64(during) / o.done.Sub(o.at).Seconds()}
		if ns := firstNew.Load(); ns != 0 {
			rs.FirstNew = time.Unix(0, ns).Sub(o.at)
		}
		res.Resize = rs
		return sendErr
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps, res.Lat = rec.Check(), rec.Overlaps(), rec.Latency()
	b.add(res)
	return nil
}

// ResizeStats are what the resize row measured.
type ResizeStats struct {
	// FirstNew is the time from the resize call to the first event handled
	// by a slot of the new generation; Complete, to the resize's end (every
	// old slot handed off).
	FirstNew time.Duration `json:"first_new"`
	Complete time.Duration `json:"complete"`
	// RateBefore and RateDuring are the producer's send rate before the
	// resize and while it ran (events marked sent a second).
	RateBefore float64 `json:"rate_before"`
	RateDuring float64 `json:"rate_during"`
}
