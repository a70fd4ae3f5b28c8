package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// runBaseline drains queue's batch the way a plain PgQ (or PgQue) consumer does: one
// consumer, next_batch / get_batch_events / finish_batch, the handler
// called for each event in order. A failed event is retried in place after
// the backoff, holding up everything behind it: the only way a single
// in-order consumer keeps per-key order.
func (b *bench) runBaseline(ctx context.Context, wl *Workload, queue string, ids *idIndex, backoff time.Duration, trial int) *Result {
	res := &Result{Workload: wl.Name, System: SysBaseline, Config: "N=1 c=1", N: 1, Conc: 1, Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, false)
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, rec.Handled, func() error {
		conn, err := pgx.Connect(ctx, replaceDB(b.cfg.AdminURL, b.on.db))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		runCtx, cancel := context.WithTimeout(ctx, b.timeout(wl, 1, backoff))
		defer cancel()
		start := time.Now()
		for {
			select {
			case <-rec.Finished():
				elapsed = rec.Elapsed(start)
				return nil
			default:
			}
			if runCtx.Err() != nil {
				elapsed = rec.Elapsed(start)
				res.Err = fmt.Sprintf("timed out with %d of %d events handled", rec.Handled(), len(wl.Events))
				return nil
			}
			var batch *int64
			if err := conn.QueryRow(runCtx, b.sql(`select pgq.next_batch($1, $2)`), queue, baselineConsumer(trial)).Scan(&batch); err != nil {
				return err
			}
			if batch == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err := b.baselineBatch(runCtx, conn, *batch, wl, ids, rec, backoff); err != nil {
				return err
			}
			if _, err := conn.Exec(runCtx, b.sql(`select pgq.finish_batch($1)`), *batch); err != nil {
				return err
			}
		}
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps = rec.Check(), rec.Overlaps()
	res.Limit = wl.orderedBound(1, backoff)
	return res
}

func (b *bench) baselineBatch(ctx context.Context, conn *pgx.Conn, batch int64, wl *Workload, ids *idIndex, rec *Recorder, backoff time.Duration) error {
	rows, err := conn.Query(ctx, b.sql(`select ev_id, ev_time, ev_type, ev_data, ev_extra1 from pgq.get_batch_events($1)`), batch)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		id             int64
		at             time.Time
		typ, data, key *string
	)
	for rows.Next() {
		if err := rows.Scan(&id, &at, &typ, &data, &key); err != nil {
			return err
		}
		idx, ok := ids.lookup(id)
		if !ok {
			return fmt.Errorf("batch %d holds event %d, which the bench did not send", batch, id)
		}
		for rec.Handle(idx, wl.Handler) != nil {
			time.Sleep(backoff)
		}
	}
	return rows.Err()
}
