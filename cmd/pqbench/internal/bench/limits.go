package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The physical limits: what the server does when it only writes rows
// (COPY into a plain table) or only reads them (one SELECT of a plain
// table), and what the handler alone costs.

// plainTable is the plain table of wl's rows, for the COPY and SELECT limits.
func plainTable(wl *Workload) string { return "plain_" + wl.Name }

// copyPlain writes wl's rows into a fresh plain table with COPY.
func (b *bench) copyPlain(ctx context.Context, wl *Workload) *Result {
	table := pgx.Identifier{plainTable(wl)}
	res := &Result{Workload: "producer", System: SysLimit, Config: "COPY into a plain table", Events: len(wl.Events)}
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.pgqDB, func() int { return len(wl.Events) }, func() error {
		conn, err := pgx.Connect(ctx, replaceDB(b.cfg.AdminURL, b.pgqDB))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, `drop table if exists `+table.Sanitize()); err != nil {
			return err
		}
		// The columns a queue event row has, as written by insert_event.
		if _, err := conn.Exec(ctx, `create table `+table.Sanitize()+` (id bigint, at timestamptz default now(), type text, data text, key text)`); err != nil {
			return err
		}
		i := 0
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(wl.Events) {
				return nil, nil
			}
			e := &wl.Events[i]
			i++
			return []any{int64(i - 1), "file", string(e.Payload), e.Key}, nil
		})
		start := time.Now()
		n, err := conn.CopyFrom(ctx, table, []string{"id", "type", "data", "key"}, src)
		elapsed = time.Since(start)
		b.copied[plainTable(wl)] = err == nil
		if err == nil && int(n) != len(wl.Events) {
			err = fmt.Errorf("COPY wrote %d rows, not %d", n, len(wl.Events))
		}
		return err
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(len(wl.Events), elapsed)
	return res
}

// selectPlain reads wl's rows back from its plain table with one SELECT,
// calling the same (no-op) handler for each, in order.
func (b *bench) selectPlain(ctx context.Context, wl *Workload) *Result {
	if !b.copied[plainTable(wl)] {
		if r := b.copyPlain(ctx, wl); r.Err != "" {
			return r
		}
	}
	res := &Result{Workload: wl.Name, System: SysLimit, Config: "one SELECT of a plain table", N: 1, Conc: 1, Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, false)
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.pgqDB, rec.Handled, func() error {
		conn, err := pgx.Connect(ctx, replaceDB(b.cfg.AdminURL, b.pgqDB))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		start := time.Now()
		rows, err := conn.Query(ctx, `select id, at, type, data, key from `+pgx.Identifier{plainTable(wl)}.Sanitize())
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
			if err := rec.Handle(int(id), 0); err != nil {
				return err
			}
		}
		elapsed = time.Since(start)
		return rows.Err()
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps = rec.Check(), rec.Overlaps()
	res.Limit = res.Rate
	return res
}

// handlerAlone runs wl's handler with conc calls at once, events of one
// key one at a time in order, in memory (no database): what the handler
// alone allows, next to the ideal conc / handler.
func handlerAlone(wl *Workload, conc int, backoff time.Duration) *Result {
	res := &Result{Workload: wl.Name, System: SysLimit, Config: fmt.Sprintf("handler alone, %d at once", conc), Conc: conc, Events: len(wl.Events), Checked: true}
	rec := NewRecorder(wl, false)
	// Each key's events in order; keys served round-robin by conc workers.
	queues := make([][]int, len(wl.Keys))
	var order []int
	for i, e := range wl.Events {
		if len(queues[e.KeyIdx]) == 0 {
			order = append(order, int(e.KeyIdx))
		}
		queues[e.KeyIdx] = append(queues[e.KeyIdx], i)
	}
	ready := make(chan int, len(wl.Keys))
	for _, k := range order {
		ready <- k
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case k := <-ready:
					mu.Lock()
					idx := queues[k][0]
					mu.Unlock()
					for rec.Handle(idx, wl.Handler) != nil {
						time.Sleep(backoff)
					}
					mu.Lock()
					queues[k] = queues[k][1:]
					more := len(queues[k]) > 0
					mu.Unlock()
					if more {
						ready <- k
					}
				case <-rec.Finished():
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := rec.Elapsed(start)
	res.Seconds, res.Rate = elapsed.Seconds(), rate(rec.Handled(), elapsed)
	res.Check, res.Overlaps = rec.Check(), rec.Overlaps()
	res.Limit = wl.orderedBound(conc, backoff)
	return res
}

// limits adds the physical limits of a drained workload: for a no-op
// handler, the plain SELECT (the limit every W1 row is compared with); for
// a waiting handler, the handler alone at the concurrencies of matrix that
// finish in a few seconds.
func (b *bench) limits(ctx context.Context, wl *Workload, matrix []pqRun, backoff time.Duration) error {
	if wl.Handler == 0 {
		return nil // the plain SELECT ran with the trials
	}
	seen := map[int]bool{}
	var concs []int
	for _, p := range matrix {
		c := p.N * p.C
		expected := time.Duration(float64(len(wl.Events)) / wl.orderedBound(c, backoff) * float64(time.Second))
		if !seen[c] && expected <= 8*time.Second {
			seen[c] = true
			concs = append(concs, c)
		}
	}
	sort.Ints(concs)
	for _, c := range concs {
		b.add(handlerAlone(wl, c, backoff))
	}
	return nil
}
