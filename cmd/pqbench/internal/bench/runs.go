package bench

import (
	"context"
	"fmt"
	"math/rand"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
)

// The runs step: handlers that write to the bench database, one INSERT
// and one commit per call, called per event (Handler, TxHandler) and per
// run of a key's events (RunHandler, TxRunHandler), on two workloads: a
// few events per key in the batch (W2's shape), and bursts of 50 events
// per key.
const (
	runsN, runsC = 4, 8 // slots, in-slot concurrency: 32 handler calls at once
	runsBurst    = 50   // events per key of the burst workload
)

// The handler kinds of the runs step (Result.Variant).
const (
	VariantRunHandler   = "RunHandler"
	VariantTxRunHandler = "TxRunHandler"
)

var runsKinds = []string{VariantHandler, VariantRunHandler, VariantTxHandler, VariantTxRunHandler}

// burstWorkload is keys keys' events, each key's perKey events one after
// another (a burst), the keys in turn.
func burstWorkload(name, title string, keys, perKey int, seed int64) *Workload {
	r := rand.New(rand.NewSource(seed))
	i := 0
	return generate(name, title, keys*perKey, keys, 0, 0, r, func() int { k := i / perKey; i++; return k })
}

// runsStep runs the runs step on both workloads.
func (b *bench) runsStep(ctx context.Context) error {
	events := b.cfg.RunsEvents
	few := uniformWorkload("runs-few", fmt.Sprintf("a few events per key, a handler that inserts a row and commits per call (N=%d c=%d)", runsN, runsC),
		events, events/5, 0, b.cfg.Seed+10)
	burst := burstWorkload("runs-burst", fmt.Sprintf("bursts of %d events per key, a handler that inserts a row and commits per call (N=%d c=%d)", runsBurst, runsN, runsC),
		events/runsBurst, runsBurst, b.cfg.Seed+11)
	wls := []*Workload{few, burst}
	if b.cfg.Short { // the short form proves the step works: the bursts alone
		wls = wls[1:]
	}
	b.rep.describe(wls...)
	for _, wl := range wls {
		queue := "runs_" + wl.Name[len("runs-"):]
		var matrix []pqRun
		for _, k := range runsKinds {
			matrix = append(matrix, pqRun{N: runsN, C: runsC, Variant: k})
		}
		ids, err := b.prepareQueue(ctx, wl, queue, matrix, 1)
		if err != nil {
			return err
		}
		for _, p := range matrix {
			b.add(b.runWriting(ctx, wl, queue, ids, p))
		}
	}
	return nil
}

// runWriting drains queue's batch with one worker of run p whose handler
// inserts each event's row into a table of the bench database: per event,
// or per run with one INSERT of the run's rows; committed by itself, or
// (Tx variants) with the events' completion in the worker's transaction.
func (b *bench) runWriting(ctx context.Context, wl *Workload, queue string, ids *idIndex, p pqRun) *Result {
	res := &Result{Workload: wl.Name, System: SysPartitionq, Config: p.label(), N: p.N, Conc: p.C, Workers: 1, Variant: p.Variant,
		Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, false)
	table := pgx.Identifier{queue + "_" + groupName(p, 0)}.Sanitize()
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		// The handlers' pool, which is the client's: a TxHandler's
		// transaction is on it.
		pool, err := b.pool(ctx, b.on.db, p.N*p.C+2)
		if err != nil {
			return err
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, `create table `+table+` (ev_id bigint not null, key text not null, seq int not null)`); err != nil {
			return err
		}
		var unknown atomic.Int64
		// insert writes the rows of evs (in order) with one statement, and
		// records them.
		insert := func(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, evs []*partitionq.Event) error {
			idx := make([]int, len(evs))
			evIDs, keys, seqs := make([]int64, len(evs)), make([]string, len(evs)), make([]int32, len(evs))
			for i, ev := range evs {
				x, ok := ids.lookup(ev.ID)
				if !ok {
					unknown.Add(1)
					return nil
				}
				idx[i] = x
				evIDs[i], keys[i], seqs[i] = ev.ID, ev.Key, int32(wl.Events[x].Seq)
			}
			var err error
			if len(evs) == 1 {
				err = exec(ctx, `insert into `+table+` (ev_id, key, seq) values ($1, $2, $3)`, evIDs[0], keys[0], seqs[0])
			} else {
				err = exec(ctx, `insert into `+table+` (ev_id, key, seq) select * from unnest($1::bigint[], $2::text[], $3::int[])`, evIDs, keys, seqs)
			}
			if err != nil {
				return err
			}
			for _, x := range idx {
				if err := rec.Handle(x, 0); err != nil {
					return err
				}
			}
			return nil
		}
		onPool := func(ctx context.Context, sql string, args ...any) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		}
		inTx := func(tx pgx.Tx) func(ctx context.Context, sql string, args ...any) error {
			return func(ctx context.Context, sql string, args ...any) error {
				_, err := tx.Exec(ctx, sql, args...)
				return err
			}
		}
		client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
		if err != nil {
			return err
		}
		wc := partitionq.WorkerConfig{
			Queue: queue, Group: groupName(p, 0), SlotCount: p.N, Identity: "pqbench-runs",
			Limits: partitionq.LimitsConfig{Concurrency: p.C, ShutdownTimeout: 10 * time.Second},
		}
		switch p.Variant {
		case VariantHandler:
			wc.Handler = partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
				return insert(ctx, onPool, []*partitionq.Event{ev})
			})
		case VariantRunHandler:
			wc.Handler = partitionq.Runs(partitionq.RunHandlerFunc(func(ctx context.Context, evs []*partitionq.Event) error { return insert(ctx, onPool, evs) }))
		case VariantTxHandler:
			wc.Handler = partitionq.InTx(partitionq.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *partitionq.Event) error {
				return insert(ctx, inTx(tx), []*partitionq.Event{ev})
			}))
		case VariantTxRunHandler:
			wc.Handler = partitionq.RunsInTx(partitionq.TxRunHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*partitionq.Event) error {
				return insert(ctx, inTx(tx), evs)
			}))
		}
		w, err := client.NewWorker(ctx, wc)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := w.Start(ctx); err != nil {
			return err
		}
		// A commit per event on a busy machine: allow 2 ms an event.
		if !rec.Wait(b.timeout(wl, p.N*p.C, 0) + time.Duration(len(wl.Events))*2*time.Millisecond) {
			res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(wl.Events))
		}
		elapsed = rec.Elapsed(start)
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			return fmt.Errorf("stop worker: %w", err)
		}
		var rows int
		if err := pool.QueryRow(ctx, `select count(distinct ev_id) from `+table).Scan(&rows); err != nil {
			return err
		}
		if rows != len(wl.Events) {
			return fmt.Errorf("%d events' rows written, want %d", rows, len(wl.Events))
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
	return res
}
