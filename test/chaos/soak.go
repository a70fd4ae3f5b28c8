package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// SoakConfig configures a soak run. Zero values mean the defaults.
type SoakConfig struct {
	// Duration of the steady load. Defaults to 5 minutes.
	Duration time.Duration
	// Workers is the number of worker processes, all running all slots
	// (one owns each slot, the others stand by). Defaults to 3.
	Workers int
	// Slots is N. Defaults to 8.
	Slots int
	// Keys defaults to 200.
	Keys int
	// Rate is the events sent per second. Defaults to 500.
	Rate int
	// FailPermille is how many events in 1000 fail once or twice, then
	// succeed (pause policy). Defaults to 20.
	FailPermille int
	// NoStuckKey turns off the key that stays blocked for the whole run,
	// receiving an event every 10 s, which shows that parked events do not
	// pin the rotation of the event tables. Defaults to false (one stuck key).
	NoStuckKey bool
	// SampleEvery is the sampling period. Defaults to 10s.
	SampleEvery time.Duration
	// RotationPeriod is the queue's rotation_period, short so that the
	// run sees many rotations. Defaults to 20s.
	RotationPeriod time.Duration
	// FaultEvery is the mean time between faults: a worker killed with
	// SIGKILL (and started again), or every session of the workers
	// terminated, at random. Defaults to 30s; negative: no faults.
	FaultEvery time.Duration
	// OperatorEvery is how often an operator skips the keys blocked on a
	// poison event (one is sent every few seconds to a few keys of their
	// own) and replays one of their dead letters. Defaults to 15s;
	// negative: no operator.
	OperatorEvery time.Duration
	// Dir holds the workers' run logs (start and end of every handler
	// run). Required.
	Dir       string
	WorkerBin string // required
	WorkerLog io.Writer
	Logf      func(format string, args ...any)
	// Engine is the queue engine the run's database gets. Defaults to PgQ.
	Engine freshdb.Engine
}

func (c SoakConfig) withDefaults() SoakConfig {
	if c.Engine.Name == "" {
		c.Engine.Name = freshdb.PgQ
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.Slots == 0 {
		c.Slots = 8
	}
	if c.Keys == 0 {
		c.Keys = 200
	}
	if c.Rate == 0 {
		c.Rate = 500
	}
	if c.FailPermille == 0 {
		c.FailPermille = 20
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 10 * time.Second
	}
	if c.RotationPeriod == 0 {
		c.RotationPeriod = 20 * time.Second
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 30 * time.Second
	}
	if c.OperatorEvery == 0 {
		c.OperatorEvery = 15 * time.Second
	}
	if c.WorkerLog == nil {
		c.WorkerLog = io.Discard
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// TableStats are the live and dead tuples of one table.
type TableStats struct {
	Live     int64 `json:"live"`
	Dead     int64 `json:"dead"`
	Vacuums  int64 `json:"vacuums"`  // autovacuum and vacuum runs so far
	Analyzes int64 `json:"analyzes"` // autoanalyze and analyze runs so far
}

// SoakSample is the state at one moment of a soak run.
type SoakSample struct {
	At         time.Duration `json:"at"`
	Sent       int64         `json:"sent"`
	Handlings  int64         `json:"handlings"`
	Goroutines []int         `json:"goroutines"` // per worker
	HeapInuse  []uint64      `json:"heap_inuse"` // per worker, bytes
	RSS        []uint64      `json:"rss"`        // per worker, bytes
	// CurTable is the queue's current event table; Rotations counts the
	// rotations seen so far; SinceSwitch is the age of the current table.
	CurTable    int           `json:"cur_table"`
	Rotations   int           `json:"rotations"`
	SinceSwitch time.Duration `json:"since_switch"`
	// Tables holds the tuples of the engine's and partitionq's tables
	// (event tables as event_0..2).
	Tables  map[string]TableStats `json:"tables"`
	MaxLag  time.Duration         `json:"max_lag"` // slowest slot
	Blocked int                   `json:"blocked"` // blocked keys
	Parked  int64                 `json:"parked"`  // events set aside (retry queue)
	// Conns is the sessions of the run's database (the workers' and the
	// harness's); Sizes the bytes on disk of partitionq's tables
	// ("partitionq"), but for its records of dead letters and operator
	// actions ("records": kept until purged, they grow with the poison
	// events by design), the engine's retry queue ("retry_queue") and
	// event tables ("event_tables"), indexes and TOAST included.
	Conns int              `json:"conns"`
	Sizes map[string]int64 `json:"sizes"`
	// Faults and Skips count the faults done and the poison heads an
	// operator skipped so far, Replays the dead letters replayed.
	Faults  int `json:"faults"`
	Skips   int `json:"skips"`
	Replays int `json:"replays"`
}

// SoakReport is the outcome of a soak run.
type SoakReport struct {
	Config   SoakConfig   `json:"-"`
	Samples  []SoakSample `json:"samples"`
	Problems []string     `json:"problems"`
	// Check is the verdict on the events of the ordinary keys (not the
	// stuck key's, not the poison keys'): every one handled, in order,
	// no two runs of a key at once.
	Check ordercheck.Report `json:"check"`
}

// OK reports a stable run.
func (r SoakReport) OK() bool { return len(r.Problems) == 0 }

// Soak runs a steady load on cl for the configured duration, with faults
// (workers killed, sessions terminated) and an operator (skipping poison
// heads, replaying dead letters) at random, and samples worker memory and
// goroutines, the database's sessions, the rotation of the event tables and
// the sizes and dead tuples of the engine's and partitionq's tables. At the
// end every event of the ordinary keys must be handled, in order, with no
// two runs of a key at once. Problems are growth that does not level off,
// a rotation that stops, and any lost event, order violation or overlap.
func Soak(ctx context.Context, cl *Cluster, cfg SoakConfig) (SoakReport, error) {
	cfg = cfg.withDefaults()
	rep := SoakReport{Config: cfg}
	if cfg.WorkerBin == "" || cfg.Dir == "" {
		return rep, errors.New("chaos.SoakConfig needs WorkerBin (build it with BuildWorker) and Dir")
	}
	schema := cfg.Engine.Schema()
	url, err := NewDatabase(ctx, cl, cfg.Engine)
	if err != nil {
		return rep, err
	}
	pool, err := harnessPool(ctx, url, 8)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{Actor: "soak"})
	if err != nil {
		return rep, err
	}
	if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queueName, Group: groupName, Slots: cfg.Slots, TickMaxLag: 50 * time.Millisecond}); err != nil {
		return rep, err
	}
	if _, err := pool.Exec(ctx, engineSQL(schema, `select pgq.set_queue_config($1, 'rotation_period', $2)`), queueName,
		fmt.Sprintf("%d seconds", int(cfg.RotationPeriod.Seconds()))); err != nil {
		return rep, err
	}
	if _, err := pool.Exec(ctx, runLogDDL); err != nil {
		return rep, err
	}
	w := &soakWorkers{cfg: cfg, url: url}
	defer w.killAll()
	for range cfg.Workers {
		if err := w.start(ctx, -1); err != nil {
			return rep, err
		}
	}
	cfg.Logf("soak: %d workers, %d slots, %d keys, %d events/s, %d‰ failing, rotation_period %s, a fault every %s, an operator every %s, for %s",
		cfg.Workers, cfg.Slots, cfg.Keys, cfg.Rate, cfg.FailPermille, cfg.RotationPeriod, cfg.FaultEvery, cfg.OperatorEvery, cfg.Duration)

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var sent atomic.Int64
	seqs := map[string]int{}
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); produceSteady(runCtx, client, cfg, &sent, seqs) }()
	var faults, skips, replays atomic.Int64
	chaosDone := make(chan error, 2)
	go func() { chaosDone <- w.faults(runCtx, pool, &faults) }()
	go func() { chaosDone <- operate(runCtx, client, cfg, &skips, &replays) }()

	t0 := time.Now()
	var lastSwitch time.Time
	rotations := 0
	tick := time.NewTicker(cfg.SampleEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
			<-prodDone
			for range 2 {
				if err := <-chaosDone; err != nil && ctx.Err() == nil {
					return rep, err
				}
			}
		case <-tick.C:
		}
		s, sw, err := sample(ctx, pool, schema, client, w.procs())
		if err != nil {
			if ctx.Err() == nil && !done {
				cfg.Logf("soak: sampling failed (a fault?): %v", err)
				continue
			}
			return rep, err
		}
		if !lastSwitch.IsZero() && !sw.Equal(lastSwitch) {
			rotations++
		}
		lastSwitch = sw
		s.At, s.Rotations, s.Sent = time.Since(t0).Round(time.Second), rotations, sent.Load()
		s.Faults, s.Skips, s.Replays = int(faults.Load()), int(skips.Load()), int(replays.Load())
		rep.Samples = append(rep.Samples, s)
		cfg.Logf("soak: %s", s.line(schema))
	}
	rep.judge()

	// Every event of the ordinary keys handled, in order, no overlap.
	want := map[string]int{}
	total := 0
	for k, n := range seqs {
		if k != "stuck" && !strings.HasPrefix(k, "poison-") {
			want[k] = n
			total += n
		}
	}
	last, moved := -1, time.Now()
	for {
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from (select distinct key, seq from pq_run_log where ok and key <> 'stuck' and key not like 'poison-%') h`).Scan(&n); err != nil {
			return rep, err
		}
		if n >= total {
			break
		}
		if n > last {
			last, moved = n, time.Now()
		}
		if time.Since(moved) > time.Minute {
			rep.Problems = append(rep.Problems, fmt.Sprintf("after the run, %d of %d events of the ordinary keys handled, none more for a minute", n, total))
			break
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return rep, err
		}
	}
	w.stopAll()
	all, err := runLogHandlings(ctx, pool)
	if err != nil {
		return rep, err
	}
	var hs []ordercheck.Handling
	for _, h := range all {
		if want[h.Key] > 0 {
			hs = append(hs, h)
		}
	}
	runs, err := ordercheck.ReadRunLogs(w.runLogs, w.diedTimes())
	if err != nil {
		return rep, err
	}
	var ordinary []ordercheck.Run
	for _, r := range runs {
		if want[r.Key] > 0 {
			ordinary = append(ordinary, r)
		}
	}
	rep.Check = ordercheck.Check(want, hs, nil).WithRuns(ordinary)
	if !rep.Check.OK() {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the ordinary keys: %s (%s)", rep.Check, strings.Join(rep.Check.Examples, "; ")))
	}
	return rep, nil
}

// soakWorkers are the soak's worker processes; a killed one is started
// again with a run log of its own.
type soakWorkers struct {
	cfg     SoakConfig
	url     string
	mu      sync.Mutex
	ps      []*Proc
	runLogs []string
	died    map[string]time.Time
	n       int
}

// start starts a worker, in place of worker i (-1: a new one).
func (w *soakWorkers) start(ctx context.Context, i int) error {
	w.mu.Lock()
	w.n++
	log := filepath.Join(w.cfg.Dir, fmt.Sprintf("runs-%d.log", w.n))
	w.runLogs = append(w.runLogs, log)
	w.mu.Unlock()
	p, err := StartWorkerRetry(ctx, w.cfg.WorkerBin, []string{"-db", w.url, "-queue", queueName, "-group", groupName,
		"-concurrency", "8", "-backoff-max", "500ms", "-stats", (w.cfg.SampleEvery / 2).String(), "-runlog", log}, w.cfg.WorkerLog, time.Minute)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < 0 {
		w.ps = append(w.ps, p)
	} else {
		w.ps[i] = p
	}
	return nil
}

func (w *soakWorkers) procs() []*Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*Proc(nil), w.ps...)
}

func (w *soakWorkers) diedTimes() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range w.died {
		out[k] = v
	}
	return out
}

// faults kills a random worker (and starts it again) or terminates every
// session of the workers, at random times FaultEvery apart on average,
// until ctx ends.
func (w *soakWorkers) faults(ctx context.Context, pool *pgxpool.Pool, count *atomic.Int64) error {
	if w.cfg.FaultEvery < 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for {
		if sleepCtx(ctx, w.cfg.FaultEvery/2+time.Duration(rng.Int64N(int64(w.cfg.FaultEvery)))) != nil {
			return nil
		}
		if rng.IntN(2) == 0 {
			ps := w.procs()
			i := rng.IntN(len(ps))
			ps[i].Kill()
			w.mu.Lock()
			if w.died == nil {
				w.died = map[string]time.Time{}
			}
			w.died[fmt.Sprint(ps[i].PID())] = time.Now()
			w.mu.Unlock()
			w.cfg.Logf("soak: fault: killed worker %d", ps[i].PID())
			if err := w.start(context.WithoutCancel(ctx), i); err != nil {
				return fmt.Errorf("start a killed worker again: %w", err)
			}
		} else {
			var n int
			if err := pool.QueryRow(ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
				where datname = current_database() and application_name like 'testworker:%'`).Scan(&n); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			w.cfg.Logf("soak: fault: terminated %d sessions of the workers", n)
		}
		count.Add(1)
	}
}

func (w *soakWorkers) stopAll() {
	for _, p := range w.procs() {
		p.Stop(30 * time.Second) // killed after it
	}
}

func (w *soakWorkers) killAll() {
	for _, p := range w.procs() {
		p.Kill()
	}
}

// operate is the soak's operator: every OperatorEvery it skips the keys
// blocked on a poison event and replays one dead letter of a poison key
// (which fails again at the tail of its key: more for the next round).
func operate(ctx context.Context, c *partitionq.Client, cfg SoakConfig, skips, replays *atomic.Int64) error {
	if cfg.OperatorEvery < 0 {
		return nil
	}
	for sleepCtx(ctx, cfg.OperatorEvery) == nil {
		bks, err := c.BlockedKeys(ctx, queueName, groupName)
		if err != nil {
			continue // a fault, or the run ends
		}
		for _, bk := range bks {
			if !strings.HasPrefix(bk.Key, "poison-") {
				continue
			}
			if _, err := c.Act(ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: queueName, Group: groupName, Key: bk.Key, HeadID: bk.Head.ID,
				Reason: "poison", Actor: "soak"}); err == nil {
				skips.Add(1)
			}
		}
		dls, err := c.DeadLetters(ctx, partitionq.DeadLetterQuery{Queue: queueName, Group: groupName, Pending: true, Limit: 1})
		if err == nil && len(dls) == 1 {
			if _, err := c.Replay(ctx, partitionq.ReplayRequest{Queue: queueName, Group: groupName, ID: dls[0].ID, Reason: "soak", Actor: "soak"}); err == nil {
				replays.Add(1)
			}
		}
	}
	return nil
}

// produceSteady sends cfg.Rate events a second in batches every 100ms
// until ctx ends, counting them in sent and each key's in seq (read it once
// produceSteady returned). With an operator, a poison event (failing until
// skipped) goes to one of four keys of their own every 5 s.
func produceSteady(ctx context.Context, c *partitionq.Client, cfg SoakConfig, sent *atomic.Int64, seq map[string]int) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	i, round := 0, 0
	per := max(1, cfg.Rate/10)
	stuckHead := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var ms []partitionq.Message
		for range per {
			k := fmt.Sprintf("tenant-%d", i%cfg.Keys)
			f := 0
			if (i*7919)%1000 < cfg.FailPermille {
				f = 1 + i%2
			}
			b, _ := json.Marshal(payload{K: k, S: seq[k], F: f})
			seq[k]++
			ms = append(ms, partitionq.Message{Key: k, Type: "SoakEvent", Payload: b})
			i++
		}
		if !cfg.NoStuckKey && (!stuckHead || round%100 == 0) {
			f := 0
			if !stuckHead {
				f, stuckHead = 1<<30, true
			}
			b, _ := json.Marshal(payload{K: "stuck", S: seq["stuck"], F: f})
			seq["stuck"]++
			ms = append(ms, partitionq.Message{Key: "stuck", Type: "SoakEvent", Payload: b})
		}
		if round++; cfg.OperatorEvery >= 0 && round%50 == 0 {
			k := fmt.Sprintf("poison-%d", round/50%4)
			b, _ := json.Marshal(payload{K: k, S: seq[k], F: 1 << 30})
			seq[k]++
			ms = append(ms, partitionq.Message{Key: k, Type: "SoakEvent", Payload: b})
		}
		if _, err := c.SendBatch(ctx, queueName, ms); err == nil {
			sent.Add(int64(len(ms)))
		} else {
			for _, m := range ms { // not sent: the seqs are sent again
				var p payload
				_ = json.Unmarshal(m.Payload, &p)
				if p.S < seq[p.K] {
					seq[p.K] = p.S
				}
			}
			i -= per
		}
	}
}

// sample reads one SoakSample (without At, Rotations, Sent) and the
// queue's switch time.
func sample(ctx context.Context, pool *pgxpool.Pool, schema string, c *partitionq.Client, procs []*Proc) (SoakSample, time.Time, error) {
	s := SoakSample{Tables: map[string]TableStats{}}
	for _, p := range procs {
		st := p.Stats()
		if st == nil {
			st = &WorkerStats{}
		}
		s.Goroutines = append(s.Goroutines, st.Goroutines)
		s.HeapInuse = append(s.HeapInuse, st.HeapInuse)
		s.RSS = append(s.RSS, st.RSS)
	}
	if err := pool.QueryRow(ctx, `select coalesce(max(id), 0) from pq_run_log`).Scan(&s.Handlings); err != nil {
		return s, time.Time{}, err
	}
	var qid int
	var sw time.Time
	if err := pool.QueryRow(ctx, engineSQL(schema, `select queue_id, queue_cur_table, queue_switch_time, now() - queue_switch_time
		from pgq.queue where queue_name = $1`), queueName).Scan(&qid, &s.CurTable, &sw, &s.SinceSwitch); err != nil {
		return s, time.Time{}, err
	}
	// pg_stat_user_tables lags a little behind; fine for a trend.
	rows, err := pool.Query(ctx, `select schemaname || '.' || relname, n_live_tup, n_dead_tup,
		autovacuum_count + vacuum_count, autoanalyze_count + analyze_count from pg_stat_user_tables
		where schemaname in ($1, 'partitionq')`, schema)
	if err != nil {
		return s, sw, err
	}
	prefix := fmt.Sprintf("%s.event_%d_", schema, qid)
	for rows.Next() {
		var name string
		var ts TableStats
		if err := rows.Scan(&name, &ts.Live, &ts.Dead, &ts.Vacuums, &ts.Analyzes); err != nil {
			rows.Close()
			return s, sw, err
		}
		switch {
		case strings.HasPrefix(name, prefix):
			name = "event_" + strings.TrimPrefix(name, prefix)
		case strings.HasPrefix(name, schema+".event_"):
			continue
		}
		s.Tables[name] = ts
	}
	if err := rows.Err(); err != nil {
		return s, sw, err
	}
	if err := pool.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = current_database()`).Scan(&s.Conns); err != nil {
		return s, sw, err
	}
	s.Sizes = map[string]int64{}
	srows, err := pool.Query(ctx, engineSQL(schema, `
		select case when n.nspname = 'partitionq' and c.relname in ('dead_letter', 'audit') then 'records'
		            when n.nspname = 'partitionq' then 'partitionq'
		            when c.relname = 'retry_queue' then 'retry_queue' else 'event_tables' end,
		       sum(pg_total_relation_size(c.oid))::int8
		  from pg_class c join pg_namespace n on n.oid = c.relnamespace
		 where c.relkind = 'r' and (n.nspname = 'partitionq' or (n.nspname = $1 and (c.relname = 'retry_queue' or c.relname like 'event\_' || $2 || '\_%')))
		 group by 1`), schema, strconv.Itoa(qid))
	if err != nil {
		return s, sw, err
	}
	for srows.Next() {
		var name string
		var size int64
		if err := srows.Scan(&name, &size); err != nil {
			srows.Close()
			return s, sw, err
		}
		s.Sizes[name] = size
	}
	srows.Close()
	if err := srows.Err(); err != nil {
		return s, sw, err
	}
	st, err := c.Status(ctx, queueName, groupName)
	if err != nil {
		return s, sw, err
	}
	for _, ss := range st.SlotStatus {
		s.MaxLag = max(s.MaxLag, ss.Lag)
		s.Blocked += ss.BlockedKeys
		s.Parked += ss.SetAside
	}
	return s, sw, nil
}

func (s SoakSample) line(schema string) string {
	mb := func(v []uint64) string {
		var out []string
		for _, x := range v {
			out = append(out, fmt.Sprintf("%.1f", float64(x)/(1<<20)))
		}
		return strings.Join(out, "/")
	}
	var evLive, evDead int64
	for k, t := range s.Tables {
		if strings.HasPrefix(k, "event_") {
			evLive += t.Live
			evDead += t.Dead
		}
	}
	tb := func(n string) string { t := s.Tables[n]; return fmt.Sprintf("%d/%d", t.Live, t.Dead) }
	kb := func(n string) int64 { return s.Sizes[n] >> 10 }
	return fmt.Sprintf("t=%-5s sent=%-7d handlings=%-7d goroutines=%v heapMiB=%s rssMiB=%s conns=%d cur_table=%d rotations=%d table_age=%s "+
		"event_tables live/dead=%d/%d retry_queue=%s failure=%s tick=%s subscription=%s sizeKiB partitionq/retry_queue/event_tables=%d/%d/%d "+
		"lag=%s blocked=%d parked=%d faults=%d skips=%d replays=%d",
		s.At, s.Sent, s.Handlings, s.Goroutines, mb(s.HeapInuse), mb(s.RSS), s.Conns, s.CurTable, s.Rotations, s.SinceSwitch.Round(time.Second),
		evLive, evDead, tb(schema+".retry_queue"), tb("partitionq.failure"), tb(schema+".tick"), tb(schema+".subscription"),
		kb("partitionq"), kb("retry_queue"), kb("event_tables"),
		s.MaxLag.Round(time.Millisecond), s.Blocked, s.Parked, s.Faults, s.Skips, s.Replays)
}

// judge judges the run's growth (judgeGrowth), and compares the last third
// of the run with the first third (after a warm-up sample): dead tuples
// must not pile up, and the event tables must keep rotating.
func (r *SoakReport) judge() {
	n := len(r.Samples)
	if n < 6 {
		r.Problems = append(r.Problems, fmt.Sprintf("only %d samples: run longer (at least 6 sample periods)", n))
		return
	}
	r.judgeGrowth()
	warm := r.Samples[1:]
	third := len(warm) / 3
	first, last := warm[:third], warm[len(warm)-third:]
	// Autovacuum wakes every minute (autovacuum_naptime): judge the dead
	// tuples of the tables that are updated and deleted from only over runs
	// long enough for it to have run a few times.
	schema := r.Config.Engine.Schema()
	for _, tbl := range []string{schema + ".retry_queue", schema + ".tick", schema + ".subscription", "partitionq.failure"} {
		if r.Config.Duration < 3*time.Minute {
			break
		}
		dFirst := maxOf(first, func(s SoakSample) float64 { return float64(s.Tables[tbl].Dead) })
		dLast := minOf(last, func(s SoakSample) float64 { return float64(s.Tables[tbl].Dead) })
		if dLast > 2*dFirst && dLast > 1000 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: dead tuples pile up: at least %.0f in the last third, at most %.0f in the first", tbl, dLast, dFirst))
		}
	}
	var evDead int64
	for _, s := range r.Samples {
		for k, t := range s.Tables {
			if strings.HasPrefix(k, "event_") {
				evDead = max(evDead, t.Dead)
			}
		}
	}
	if evDead > 1000 {
		r.Problems = append(r.Problems, fmt.Sprintf("the event tables have up to %d dead tuples: they should only be inserted into and truncated", evDead))
	}
	// A rotation is due every RotationPeriod and done at the next engine
	// maintenance round (every 30s, TickerConfig.MaintInterval's default);
	// a round whose worker is killed keeps the maintenance turn until its
	// lease ends (a minute, partitionq/internal/ticker's maintLease), and
	// the next round starts within 5s of that (docs/operations.md, "No
	// slot behind, and still no rotation").
	const maintInterval, maintLease, maintRetry = 30 * time.Second, time.Minute, 5 * time.Second
	limit := r.Config.RotationPeriod + maintInterval + maintLease + maintRetry + r.Config.SampleEvery
	for _, s := range r.Samples {
		if s.SinceSwitch > limit {
			r.Problems = append(r.Problems, fmt.Sprintf("rotation pinned: at %s the current event table was %s old (rotation_period %s)", s.At, s.SinceSwitch.Round(time.Second), r.Config.RotationPeriod))
			break
		}
	}
	// Counted over the run, a rotation comes at least every period plus
	// two rounds (a killed round is the exception, not the cadence).
	if want := int(r.Config.Duration / (r.Config.RotationPeriod + 2*maintInterval + r.Config.SampleEvery)); r.Samples[n-1].Rotations < want {
		r.Problems = append(r.Problems, fmt.Sprintf("%d rotations in %s, want at least %d", r.Samples[n-1].Rotations, r.Config.Duration, want))
	}
}

// judgeGrowth compares the end of the run with its state after the first
// tenth: the workers' resident memory and goroutines (the most of any
// worker: killed ones start again) and the database's sessions must stay
// within 1.5 times it, the tables' sizes within 2 times (the event tables
// after a rotation), each beyond a floor that a short run's small numbers
// would otherwise cross by noise.
func (r *SoakReport) judgeGrowth() {
	n := len(r.Samples)
	base := r.Samples[0]
	for _, s := range r.Samples {
		if s.At >= r.Config.Duration/10 && s.At > 0 {
			base = s
			break
		}
	}
	end := r.Samples[n-1]
	check := func(what string, b, e, ratio, floor float64, unit string) {
		if e > ratio*b && e-b > floor {
			r.Problems = append(r.Problems, fmt.Sprintf("%s grew from %.1f%s at %s to %.1f%s at the end (more than %.1fx)", what, b, unit, base.At, e, unit, ratio))
		}
	}
	check("worker RSS", most(base.RSS)/(1<<20), most(end.RSS)/(1<<20), 1.5, 20, " MiB")
	check("worker heap in use", most(base.HeapInuse)/(1<<20), most(end.HeapInuse)/(1<<20), 1.5, 20, " MiB")
	check("worker goroutines", most(base.Goroutines), most(end.Goroutines), 1.5, 10, "")
	check("database sessions", float64(base.Conns), float64(end.Conns), 1.5, 5, "")
	for _, t := range []string{"partitionq", "retry_queue"} {
		check(t+" tables' size", float64(base.Sizes[t])/(1<<20), float64(end.Sizes[t])/(1<<20), 2, 1, " MiB")
	}
	peak := 0.0 // the event tables: their largest size once they have rotated, against the end's
	for _, s := range r.Samples {
		if s.Rotations > 0 && s.At <= r.Config.Duration/2 {
			peak = max(peak, float64(s.Sizes["event_tables"]))
		}
	}
	if peak > 0 {
		check("event tables' size", peak/(1<<20), float64(end.Sizes["event_tables"])/(1<<20), 2, 1, " MiB")
	}
}

func values(ss []SoakSample, f func(SoakSample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	sort.Float64s(out)
	return out
}

func maxOf(ss []SoakSample, f func(SoakSample) float64) float64 {
	v := values(ss, f)
	return v[len(v)-1]
}

func minOf(ss []SoakSample, f func(SoakSample) float64) float64 { return values(ss, f)[0] }

// most is the largest of a per-worker measure (0 with no workers).
func most[T uint64 | int](v []T) float64 {
	var m T
	for _, x := range v {
		m = max(m, x)
	}
	return float64(m)
}

// Summary is a short text account of a soak report.
func (r SoakReport) Summary() string {
	if len(r.Samples) == 0 {
		return "no samples"
	}
	a, z := r.Samples[0], r.Samples[len(r.Samples)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d events sent, %d handlings (%.0f/s), %d rotations of the event tables\n",
		z.At, z.Sent, z.Handlings, float64(z.Handlings)/z.At.Seconds(), z.Rotations)
	for w := range a.Goroutines {
		fmt.Fprintf(&b, "worker %d: goroutines %d -> %d (max %.0f); heap in use %.1f -> %.1f MiB (max %.1f); RSS %.1f -> %.1f MiB\n", w,
			a.Goroutines[w], z.Goroutines[w], maxOf(r.Samples, func(s SoakSample) float64 { return float64(s.Goroutines[w]) }),
			float64(a.HeapInuse[w])/(1<<20), float64(z.HeapInuse[w])/(1<<20),
			maxOf(r.Samples, func(s SoakSample) float64 { return float64(s.HeapInuse[w]) })/(1<<20),
			float64(a.RSS[w])/(1<<20), float64(z.RSS[w])/(1<<20))
	}
	names := make([]string, 0, len(z.Tables))
	for k := range z.Tables {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s: dead tuples max %.0f, at the end %d (live %d); vacuumed %d times\n", k,
			maxOf(r.Samples, func(s SoakSample) float64 { return float64(s.Tables[k].Dead) }), z.Tables[k].Dead, z.Tables[k].Live, z.Tables[k].Vacuums)
	}
	fmt.Fprintf(&b, "slowest slot lag at the end %s; blocked keys %d; parked events %d\n", z.MaxLag.Round(time.Millisecond), z.Blocked, z.Parked)
	fmt.Fprintf(&b, "database sessions %d -> %d (max %.0f); sizes at the start and end: partitionq %d -> %d KiB (dead letters and audit %d -> %d KiB), retry queue %d -> %d KiB, event tables %d -> %d KiB\n",
		a.Conns, z.Conns, maxOf(r.Samples, func(s SoakSample) float64 { return float64(s.Conns) }),
		a.Sizes["partitionq"]>>10, z.Sizes["partitionq"]>>10, a.Sizes["records"]>>10, z.Sizes["records"]>>10,
		a.Sizes["retry_queue"]>>10, z.Sizes["retry_queue"]>>10, a.Sizes["event_tables"]>>10, z.Sizes["event_tables"]>>10)
	fmt.Fprintf(&b, "faults %d (workers killed, sessions terminated), poison heads skipped %d, dead letters replayed %d; the ordinary keys: %s\n",
		z.Faults, z.Skips, z.Replays, r.Check)
	if r.OK() {
		b.WriteString("verdict: stable")
	} else {
		b.WriteString("verdict: PROBLEMS: " + strings.Join(r.Problems, "; "))
	}
	return b.String()
}
