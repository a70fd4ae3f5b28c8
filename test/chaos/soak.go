package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
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
	// receiving an event a second, which shows that parked events do not
	// pin the rotation of the event tables. Defaults to false (one stuck key).
	NoStuckKey bool
	// SampleEvery is the sampling period. Defaults to 10s.
	SampleEvery time.Duration
	// RotationPeriod is the queue's rotation_period, short so that the
	// run sees many rotations. Defaults to 20s.
	RotationPeriod time.Duration
	WorkerBin      string // required
	WorkerLog      io.Writer
	Logf           func(format string, args ...any)
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
}

// SoakReport is the outcome of a soak run.
type SoakReport struct {
	Config   SoakConfig   `json:"-"`
	Samples  []SoakSample `json:"samples"`
	Problems []string     `json:"problems"`
}

// OK reports a stable run.
func (r SoakReport) OK() bool { return len(r.Problems) == 0 }

// Soak runs a steady load on cl for the configured duration and samples
// worker memory and goroutines, the rotation of the event tables and the
// dead tuples of the engine's tables. Problems are growth that does not
// level off, and a rotation that stops.
func Soak(ctx context.Context, cl *Cluster, cfg SoakConfig) (SoakReport, error) {
	cfg = cfg.withDefaults()
	rep := SoakReport{Config: cfg}
	if cfg.WorkerBin == "" {
		return rep, errors.New("chaos.SoakConfig.WorkerBin is required: build it with BuildWorker")
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
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
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
	var procs []*Proc
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	for range cfg.Workers {
		p, err := StartWorker(ctx, cfg.WorkerBin, []string{"-db", url, "-queue", queueName, "-group", groupName,
			"-concurrency", "8", "-backoff-max", "500ms", "-stats", (cfg.SampleEvery / 2).String()}, cfg.WorkerLog)
		if err != nil {
			return rep, err
		}
		procs = append(procs, p)
	}
	cfg.Logf("soak: %d workers, %d slots, %d keys, %d events/s, %d‰ failing, rotation_period %s, for %s",
		cfg.Workers, cfg.Slots, cfg.Keys, cfg.Rate, cfg.FailPermille, cfg.RotationPeriod, cfg.Duration)

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var sent atomic.Int64
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); produceSteady(runCtx, client, cfg, &sent) }()

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
		case <-tick.C:
		}
		s, sw, err := sample(ctx, pool, schema, client, procs)
		if err != nil {
			return rep, err
		}
		if !lastSwitch.IsZero() && !sw.Equal(lastSwitch) {
			rotations++
		}
		lastSwitch = sw
		s.At, s.Rotations, s.Sent = time.Since(t0).Round(time.Second), rotations, sent.Load()
		rep.Samples = append(rep.Samples, s)
		cfg.Logf("soak: %s", s.line(schema))
	}
	rep.judge()
	return rep, nil
}

// produceSteady sends cfg.Rate events a second in batches every 100ms
// until ctx ends, counting them in sent.
func produceSteady(ctx context.Context, c *partitionq.Client, cfg SoakConfig, sent *atomic.Int64) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	seq := map[string]int{}
	i := 0
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
		if !cfg.NoStuckKey && (!stuckHead || i%cfg.Rate < per) {
			f := 0
			if !stuckHead {
				f, stuckHead = 1<<30, true
			}
			b, _ := json.Marshal(payload{K: "stuck", S: seq["stuck"], F: f})
			seq["stuck"]++
			ms = append(ms, partitionq.Message{Key: "stuck", Type: "SoakEvent", Payload: b})
		}
		if _, err := c.SendBatch(ctx, queueName, ms); err == nil {
			sent.Add(int64(len(ms)))
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
	return fmt.Sprintf("t=%-5s sent=%-7d handlings=%-7d goroutines=%v heapMiB=%s rssMiB=%s cur_table=%d rotations=%d table_age=%s "+
		"event_tables live/dead=%d/%d retry_queue=%s failure=%s tick=%s subscription=%s lag=%s blocked=%d parked=%d",
		s.At, s.Sent, s.Handlings, s.Goroutines, mb(s.HeapInuse), mb(s.RSS), s.CurTable, s.Rotations, s.SinceSwitch.Round(time.Second),
		evLive, evDead, tb(schema+".retry_queue"), tb("partitionq.failure"), tb(schema+".tick"), tb(schema+".subscription"),
		s.MaxLag.Round(time.Millisecond), s.Blocked, s.Parked)
}

// judge compares the last third of the run with the first third (after a
// warm-up sample): memory and goroutines must level off, dead tuples must
// not pile up, and the event tables must keep rotating.
func (r *SoakReport) judge() {
	n := len(r.Samples)
	if n < 6 {
		r.Problems = append(r.Problems, fmt.Sprintf("only %d samples: run longer (at least 6 sample periods)", n))
		return
	}
	warm := r.Samples[1:]
	third := len(warm) / 3
	first, last := warm[:third], warm[len(warm)-third:]
	workers := len(r.Samples[0].Goroutines)
	for w := range workers {
		gFirst := maxOf(first, func(s SoakSample) float64 { return float64(s.Goroutines[w]) })
		gLast := maxOf(last, func(s SoakSample) float64 { return float64(s.Goroutines[w]) })
		if gLast > gFirst+10 {
			r.Problems = append(r.Problems, fmt.Sprintf("worker %d: goroutines grew from %.0f to %.0f", w, gFirst, gLast))
		}
		hFirst := median(first, func(s SoakSample) float64 { return float64(s.HeapInuse[w]) })
		hLast := median(last, func(s SoakSample) float64 { return float64(s.HeapInuse[w]) })
		if hLast > 1.5*hFirst && hLast-hFirst > 20<<20 {
			r.Problems = append(r.Problems, fmt.Sprintf("worker %d: heap in use grew from %.1f to %.1f MiB", w, hFirst/(1<<20), hLast/(1<<20)))
		}
	}
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
	// maintenance round (every partitionq.MaintIntervalDefault).
	limit := r.Config.RotationPeriod + 2*partitionq.MaintIntervalDefault + r.Config.SampleEvery
	for _, s := range r.Samples {
		if s.SinceSwitch > limit {
			r.Problems = append(r.Problems, fmt.Sprintf("rotation pinned: at %s the current event table was %s old (rotation_period %s)", s.At, s.SinceSwitch.Round(time.Second), r.Config.RotationPeriod))
			break
		}
	}
	if want := int(r.Config.Duration / limit); r.Samples[n-1].Rotations < want {
		r.Problems = append(r.Problems, fmt.Sprintf("%d rotations in %s, want at least %d", r.Samples[n-1].Rotations, r.Config.Duration, want))
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

func median(ss []SoakSample, f func(SoakSample) float64) float64 {
	v := values(ss, f)
	return v[len(v)/2]
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
	if r.OK() {
		b.WriteString("verdict: stable")
	} else {
		b.WriteString("verdict: PROBLEMS: " + strings.Join(r.Problems, "; "))
	}
	return b.String()
}
