package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// harnessApp is the application_name of the harness's own sessions, which
// the chaos never terminates.
const harnessApp = "pqchaos-harness"

// runLogDDL is the log every testworker handling writes to (see
// test/cmd/testworker), and the record of the producer's committed batches.
const runLogDDL = `
create table pq_run_log (
	id bigserial primary key, key text not null, seq int not null, attempt int not null,
	ok bool not null, pid int not null, at timestamptz not null default clock_timestamp());
create table pq_sent_batch (id int primary key, events int not null);`

// NewDatabase creates a fresh database with the engine eng in the cluster
// (PgQ when eng is the zero Engine) and returns its URL.
func NewDatabase(ctx context.Context, cl *Cluster, eng freshdb.Engine) (string, error) {
	if eng.Name == "" {
		eng.Name = freshdb.PgQ
	}
	admin, err := pgx.ParseConfig(cl.URL("postgres"))
	if err != nil {
		return "", err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "chaos_" + hex.EncodeToString(b)
	if _, err := freshdb.Create(ctx, admin, freshdb.Spec{Name: name, Engine: eng}); err != nil {
		if eng.Name == freshdb.PgQ {
			return "", fmt.Errorf("%w (install postgresql-<major>-pgq3)", err)
		}
		return "", err
	}
	return cl.URL(name), nil
}

// engineSQL is sql with "pgq." replaced by the engine's schema.
func engineSQL(schema, sql string) string {
	if schema == "" || schema == freshdb.PgQ {
		return sql
	}
	return strings.ReplaceAll(sql, "pgq.", schema+".")
}

// harnessPool opens the harness's pool on url, named so the chaos spares it.
func harnessPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = harnessApp
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	return pgxpool.NewWithConfig(ctx, cfg)
}

// endPoll is an error with which a poll's condition ends the poll at once.
type endPoll struct{ error }

// poll calls cond every 50ms until it is true, treating errors as "not
// yet" (the server may be restarting), until timeout; then it fails with
// what it waited for and the last error. An endPoll error ends it at once
// with the error it wraps.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := cond(qctx)
		cancel()
		if err == nil && ok {
			return nil
		}
		if end, isEnd := err.(endPoll); isEnd {
			return end.error
		}
		if err != nil {
			last = err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// resolved counts distinct events handled successfully plus dead letters.
func resolved(ctx context.Context, db *pgxpool.Pool) (int, error) {
	var n int
	err := db.QueryRow(ctx, `select (select count(*) from (select distinct key, seq from pq_run_log where ok) h)
		+ (select count(*) from partitionq.dead_letter)`).Scan(&n)
	return n, err
}

// runLogHandlings reads every handler call of pq_run_log, in the order
// they were logged.
func runLogHandlings(ctx context.Context, db *pgxpool.Pool) ([]ordercheck.Handling, error) {
	rows, err := db.Query(ctx, `select key, seq, ok from pq_run_log order by id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ordercheck.Handling, error) {
		var h ordercheck.Handling
		err := r.Scan(&h.Key, &h.Seq, &h.OK)
		return h, err
	})
}

// judge runs the shared order checker over the run log and dead letters.
func judge(ctx context.Context, db *pgxpool.Pool, sent map[string]int) (ordercheck.Report, error) {
	log, err := runLogHandlings(ctx, db)
	if err != nil {
		return ordercheck.Report{}, err
	}
	drows, err := db.Query(ctx, `select key, (ev_data::json->>'s')::int from partitionq.dead_letter`)
	if err != nil {
		return ordercheck.Report{}, err
	}
	dead := map[string][]int{}
	for drows.Next() {
		var k string
		var s int
		if err := drows.Scan(&k, &s); err != nil {
			drows.Close()
			return ordercheck.Report{}, err
		}
		dead[k] = append(dead[k], s)
	}
	if err := drows.Err(); err != nil {
		return ordercheck.Report{}, err
	}
	return ordercheck.Check(sent, log, dead), nil
}

// slotOwners returns the pid of the owning server session of each owned slot.
func slotOwners(ctx context.Context, c *partitionq.Client, queue, group string) (map[int]int32, error) {
	st, err := c.Status(ctx, queue, group)
	if err != nil {
		return nil, err
	}
	out := map[int]int32{}
	for _, s := range st.SlotStatus {
		if s.Owner != nil {
			out[s.Slot] = s.Owner.PID
		}
	}
	return out, nil
}

// diagnose describes why events are still unresolved: the first of them
// with where the engine holds them, the slot consumers' positions, and what
// the workers' sessions are doing. It is logged when a wait times out, so
// a failure in CI can be read without a rerun.
func diagnose(ctx context.Context, db *pgxpool.Pool, schema string) string {
	var b strings.Builder
	q := func(title, sql string) {
		rows, err := db.Query(ctx, engineSQL(schema, sql))
		if err != nil {
			fmt.Fprintf(&b, "\n%s: %v", title, err)
			return
		}
		defer rows.Close()
		fmt.Fprintf(&b, "\n%s:", title)
		n := 0
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, " %v", err)
				return
			}
			n++
			fmt.Fprintf(&b, "\n  %v", vals)
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, " %v", err)
		}
		if n == 0 {
			b.WriteString(" none")
		}
	}
	q("resolved (handled + dead)", `select (select count(*) from (select distinct key, seq from pq_run_log where ok) h), (select count(*) from partitionq.dead_letter)`)
	q("unresolved events not of stuck keys (first 20): ev_id, key, seq, in retry queue (sub, retry_after, retries), failure rows, txid, time", `
		with ev as (
			select ev_id, ev_extra1 as key, (ev_data::json->>'s')::int as seq, ev_txid, ev_time from pgq.event_template)
		select ev.ev_id, ev.key, ev.seq,
			(select string_agg(format('%s/%s/%s', rq.ev_owner, rq.ev_retry_after, rq.ev_retry), ',') from pgq.retry_queue rq where rq.ev_id = ev.ev_id),
			(select count(*) from partitionq.failure f where f.ev_id = ev.ev_id), ev.ev_txid, ev.ev_time
		from ev
		where ev.key not like 'stuck-%'
			and not exists (select 1 from pq_run_log l where l.key = ev.key and l.seq = ev.seq and l.ok)
			and not exists (select 1 from partitionq.dead_letter d where d.key = ev.key and (d.ev_data::json->>'s')::int = ev.seq)
		order by ev.ev_id limit 20`)
	q("retry queue by owner: sub_id, rows, parked, min ev_id", `
		select ev_owner, count(*), count(*) filter (where ev_retry_after > now() + interval '1000 years'), min(ev_id) from pgq.retry_queue group by 1 order by 1`)
	q("slot consumers: name, sub_id, last_tick, batch, next_tick, active", `
		select co_name, sub_id, sub_last_tick, sub_batch, sub_next_tick, sub_active from pgq.subscription join pgq.consumer on co_id = sub_consumer order by co_name`)
	q("queue: last tick, event seq", `select queue_name, (select max(tick_id) from pgq.tick t where t.tick_queue = queue_id), queue_event_seq from pgq.queue`)
	q("slot owners: slot, worker, epoch, lease left, worker's os pid", `
		select s.slot, s.worker_id, s.epoch, w.lease_until - clock_timestamp(), w.os_pid from partitionq.slot s left join partitionq.worker w on w.id = s.worker_id order by 1`)
	q("progress: slot, batch, done_below, done bytes, handled, failed", `
		select slot, batch_id, done_below, length(done), handled, failed from partitionq.slot_progress order by 1`)
	q("workers' sessions: pid, state, wait, xact age, query", `
		select pid, state, wait_event_type || ':' || wait_event, now() - xact_start, left(query, 120)
		from pg_stat_activity where datname = current_database() and application_name <> '`+harnessApp+`' and pid <> pg_backend_pid() order by pid`)
	return b.String()
}
