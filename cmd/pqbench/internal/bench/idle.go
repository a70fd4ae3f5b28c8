package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// idle measures what a worker whose slots have nothing to do costs the
// server at rest: its database's transactions per second over IdleWindow
// (pg_stat_database, less the same window with no worker) and its
// connections, with partitionq's ticker off and on.
func (b *bench) idle(ctx context.Context) error {
	const queue, group = "idle", "idle"
	n := b.cfg.IdleSlots
	setup, err := b.pool(ctx, b.on.db, 2)
	if err != nil {
		return err
	}
	client, err := partitionq.NewClient(ctx, setup, partitionq.Config{EngineSchema: b.on.engine})
	if err == nil {
		_, err = client.Setup(ctx, partitionq.GroupSpec{Queue: queue, Group: group, Slots: n})
	}
	setup.Close()
	if err != nil {
		return err
	}
	b.srv.waitIdle(ctx, b.on.db)
	admin, err := b.admin(ctx)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	window := b.cfg.IdleWindow
	// Sessions report their counts about every second: wait that long after
	// start before the window opens, so start-up is not counted.
	settle := min(2*time.Second, max(window, 500*time.Millisecond))

	count := func() (int64, int, error) {
		x0, err := b.srv.xacts(ctx, admin, b.on.db)
		if err != nil {
			return 0, 0, err
		}
		if err := sleepCtx(ctx, window); err != nil {
			return 0, 0, err
		}
		conns, err := b.srv.conns(ctx, admin, b.on.db)
		if err != nil {
			return 0, 0, err
		}
		x1, err := b.srv.xacts(ctx, admin, b.on.db)
		return x1 - x0, conns, err
	}
	if err := sleepCtx(ctx, settle); err != nil {
		return err
	}
	base, _, err := count()
	if err != nil {
		return err
	}
	baseTPS := float64(base) / window.Seconds()
	b.logf("idle: %d transactions in %s with no worker (%.1f/s)", base, window, baseTPS)
	for _, ticker := range []bool{false, true} {
		res, err := b.idleRun(ctx, queue, group, n, ticker, settle, baseTPS, count)
		if err != nil {
			return err
		}
		b.add(res, true)
	}
	return nil
}

func (b *bench) idleRun(ctx context.Context, queue, group string, n int, ticker bool, settle time.Duration, baseTPS float64,
	count func() (int64, int, error)) (*Result, error) {
	label := map[bool]string{false: "ticker off", true: "ticker on (every 100ms)"}[ticker]
	res := &Result{Workload: "idle", System: SysPartitionq, Config: fmt.Sprintf("N=%d, %s", n, label), N: n}
	pool, err := b.pool(ctx, b.on.db, partitionq.WorkerConns())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
	if err != nil {
		return nil, err
	}
	wc := partitionq.WorkerConfig{
		Queue: queue, Group: group, SlotCount: n, Identity: "pqbench-idle",
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil }),
		Limits:  partitionq.LimitsConfig{ShutdownTimeout: 5 * time.Second},
	}
	if ticker {
		wc.Ticker = &partitionq.TickerConfig{}
	}
	w, err := client.NewWorker(ctx, wc)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return w.Stop(sctx)
	}
	if err := sleepCtx(ctx, settle); err != nil {
		stop() // the run is abandoned
		return nil, err
	}
	x, conns, err := count()
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	pool.Close()
	b.srv.waitIdle(ctx, b.on.db)
	window := b.cfg.IdleWindow
	res.Idle = &Idle{Window: window, Xacts: x, BaselineTPS: baseTPS, TPS: max(0, float64(x)/window.Seconds()-baseTPS), Conns: conns, Ticker: ticker}
	res.PeakConns, res.Seconds = conns, window.Seconds()
	b.logf("idle: %s: %d transactions in %s = %.1f/s less %.1f/s with no worker; %d connections", res.Config, x, window,
		float64(x)/window.Seconds(), baseTPS, conns)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
