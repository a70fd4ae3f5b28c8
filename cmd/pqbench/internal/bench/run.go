package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq/connstr"
)

// Main runs pqbench with args and returns the exit code: 0 when every run
// was complete and, for the ordered systems measured here in Go
// (partitionq and the baseline), free of order violations.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "pqbench:", err)
		return 2
	}
	if cfg.Render != "" {
		rep, err := ReadReport(cfg.Render)
		if err == nil {
			err = rep.write(cfg.Render)
		}
		if err != nil {
			fmt.Fprintln(stderr, "pqbench:", err)
			return 1
		}
		fmt.Fprint(stdout, rep.Text())
		return 0
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintln(stderr, "pqbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "pqbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := Run(ctx, cfg, stderr)
	if rep != nil {
		fmt.Fprint(stdout, rep.Text())
	}
	if err != nil {
		fmt.Fprintln(stderr, "pqbench:", err)
		return 1
	}
	if bad := rep.Failures(); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "pqbench: FAILED:", b)
		}
		return 1
	}
	return 0
}

// bench is one run in progress.
type bench struct {
	cfg      Config
	srv      *Server
	progress io.Writer
	rep      *Report

	pgqDB, bossDB, gwDB string
	pgqueDB             string // with Engines pgq,pgque
	// on is the engine database the current step runs on: pgqDB for every
	// step, then pgqueDB for the producer and W1 again.
	on     target
	tmp    string          // scratch files (workloads for the Node side, logs)
	copied map[string]bool // plain tables written
}

// Run runs the whole benchmark described by cfg. Progress goes to progress;
// the report is returned even when a run failed (with the error).
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if cfg.AdminURL == "" {
		cfg.AdminURL = os.Getenv("DATABASE_URL")
	}
	if cfg.AdminURL == "" {
		cfg.AdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if _, err := connstr.Parse(cfg.AdminURL); err != nil {
		return nil, fmt.Errorf("invalid -db: %w", err)
	}
	srv, err := connectServer(ctx, cfg.AdminURL)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, srv: srv, progress: progress, copied: map[string]bool{},
		pgqDB: cfg.DBPrefix + "_pgq", pgqueDB: cfg.DBPrefix + "_pgque", bossDB: cfg.DBPrefix + "_pgboss", gwDB: cfg.DBPrefix + "_graphile"}
	b.on = target{engine: freshdb.PgQ, db: b.pgqDB}
	b.rep = newReport(cfg, srv)
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	if b.tmp, err = os.MkdirTemp("", "pqbench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.tmp)
	if err := cfg.validateEngines(); err != nil {
		return nil, err
	}
	if err := b.createDB(ctx, b.pgqDB, freshdb.Engine{Name: freshdb.PgQ}); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Engines, freshdb.PgQue) {
		if err := b.createDB(ctx, b.pgqueDB, freshdb.Engine{Name: freshdb.PgQue, SQLFile: cfg.PgQueSQL}); err != nil {
			return nil, err
		}
		if b.rep.Server["pgque"], err = b.pgqueVersion(ctx); err != nil {
			return nil, err
		}
	}
	if srv.Statements {
		srv.statsDB = b.pgqDB
	}
	if !cfg.Keep {
		defer b.dropDBs()
	}
	start := time.Now()
	err = b.runAll(ctx)
	b.rep.Duration = time.Since(start)
	if werr := b.rep.write(cfg.Out); werr != nil && err == nil {
		err = werr
	}
	return b.rep, err
}

func (b *bench) runAll(ctx context.Context) error {
	cfg := b.cfg
	w1 := uniformWorkload("W1", "drain: a backlog, no-op handler", cfg.W1Events, cfg.W1Keys, 0, cfg.Seed)
	w2 := uniformWorkload("W2", fmt.Sprintf("I/O-bound: the handler waits %s", cfg.W2Handler), cfg.W2Events, cfg.W2Keys, cfg.W2Handler, cfg.Seed+1)
	w3 := zipfWorkload("W3", fmt.Sprintf("skew and failures: Zipf keys, %.0f%% of events fail once, policy pause, handler %s", cfg.W3FailRate*100, cfg.W3Handler),
		cfg.W3Events, cfg.W3Keys, cfg.W3Handler, cfg.W3ZipfS, cfg.W3ZipfV, cfg.W3FailRate, cfg.Seed+2)
	lat := uniformWorkload("latency", "latency", int(float64(cfg.LatRate)*cfg.LatDuration.Seconds()+0.5), cfg.W2Keys, 0, cfg.Seed+3)
	b.rep.describe(w1, w2, w3, lat)

	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"producer", func(ctx context.Context) error { return b.producer(ctx, w1) }},
		{"W1", func(ctx context.Context) error { return b.drainWorkload(ctx, w1, "w1", cfg.w1Runs(), 0, cfg.W1Trials) }},
		{"W2", func(ctx context.Context) error { return b.drainWorkload(ctx, w2, "w2", runsOf(cfg.matrix()), 0, 1) }},
		{"W3", func(ctx context.Context) error {
			return b.drainWorkload(ctx, w3, "w3", cfg.w3Runs(), cfg.W3Backoff, 1)
		}},
		{"idle", func(ctx context.Context) error { return b.idle(ctx) }},
		{"latency", func(ctx context.Context) error { return b.latency(ctx, lat) }},
		{"resize", func(ctx context.Context) error { return b.resize(ctx, lat) }},
		{"scale", func(ctx context.Context) error { return b.scale(ctx, w2, lat) }},
		{"peers", func(ctx context.Context) error { return b.peers(ctx, w1, w2, w3, lat) }},
		{"runs", func(ctx context.Context) error { return b.runsStep(ctx) }},
	}
	for _, eng := range cfg.Engines {
		b.on = target{engine: eng, db: b.pgqDB}
		if eng == freshdb.PgQue {
			b.on.db = b.pgqueDB
		}
		for _, s := range steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			if (len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.name)) || (eng != freshdb.PgQ && !onEveryEngine[s.name]) {
				continue
			}
			b.logf("== %s on %s", s.name, eng)
			if err := s.fn(ctx); err != nil {
				return fmt.Errorf("%s on %s: %w", s.name, eng, err)
			}
		}
	}
	b.on = target{engine: freshdb.PgQ, db: b.pgqDB}
	return nil
}

// target is an engine database a step runs on.
type target struct {
	engine string // "pgq" or "pgque": the engine's schema
	db     string
}

// onEveryEngine are the steps run on each engine of Config.Engines; the
// others (W2, W3, latency, peers) run on PgQ only.
var onEveryEngine = map[string]bool{"producer": true, "W1": true}

// pgqueVersion is the version of PgQue in its bench database.
func (b *bench) pgqueVersion(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, replaceDB(b.cfg.AdminURL, b.pgqueDB))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, `select pgque.version()`).Scan(&v)
	return v, err
}

func (c Config) matrix() [][2]int {
	var m [][2]int
	for _, n := range c.Slots {
		for _, cc := range c.Conc {
			m = append(m, [2]int{n, cc})
		}
	}
	return m
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "%s pqbench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// add records a result and prints it (unless quiet: already printed).
// partitionq's and the plain consumer's rows carry the engine they ran on.
func (b *bench) add(r *Result, quiet ...bool) {
	if r.System == SysPartitionq || r.System == SysBaseline {
		r.Engine = b.on.engine
	}
	b.rep.Results = append(b.rep.Results, r)
	if len(quiet) == 0 || !quiet[0] {
		b.logf("%s", r.summary())
	}
}

func (r *Result) summary() string {
	status := ""
	if r.Checked {
		status = fmt.Sprintf(", %s, overlaps %d", r.Check, r.Overlaps)
	}
	if r.Err != "" {
		status += ", ERROR: " + r.Err
	}
	return fmt.Sprintf("%s %s %s: %d events in %.2fs = %.0f/s%s", r.Workload, r.System, r.Config, r.Events, r.Seconds, r.Rate, status)
}

// ---------------------------------------------------------------- databases

func (b *bench) admin(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, b.cfg.AdminURL)
}

// createDB makes db again (dropping it first) with the engine eng (none
// for the zero Engine), and pg_stat_statements in the engine databases
// when the server loads it.
func (b *bench) createDB(ctx context.Context, db string, eng freshdb.Engine) error {
	admin, err := pgx.ParseConfig(b.cfg.AdminURL)
	if err != nil {
		return err
	}
	if err := freshdb.Drop(ctx, admin, db); err != nil {
		return err
	}
	spec := freshdb.Spec{Name: db, Engine: eng}
	if b.srv.Statements && eng.Name != "" {
		spec.Extensions = []string{"pg_stat_statements"}
	}
	_, err = freshdb.Create(ctx, admin, spec)
	return err
}

// sql is an engine statement written for PgQ, on the engine of the
// current step.
func (b *bench) sql(s string) string {
	if b.on.engine == freshdb.PgQ {
		return s
	}
	return strings.ReplaceAll(s, "pgq.", b.on.engine+".")
}

func (b *bench) dropDBs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := b.admin(ctx)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for _, db := range []string{b.pgqDB, b.pgqueDB, b.bossDB, b.gwDB} {
		conn.Exec(ctx, "drop database if exists "+pgx.Identifier{db}.Sanitize()+" with (force)")
	}
}

// pool opens a pool on db with maxConns connections.
func (b *bench) pool(ctx context.Context, db string, maxConns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(replaceDB(b.cfg.AdminURL, db))
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, pc)
}

// measure wraps a run with database snapshots of db: before, then fn, then
// (after fn has closed its connections) after; it returns the cost per event.
func (b *bench) measure(ctx context.Context, res *Result, db string, events func() int, fn func() error) (Cost, error) {
	before, err := b.srv.snapshot(ctx, db)
	if err != nil {
		return Cost{}, err
	}
	// The run's goroutines, and those they start (the workers'), carry its
	// name in a CPU profile (-cpuprofile): go tool pprof -tagfocus
	// 'run=partitionq W1 N=64 c=16' shows one run's cost alone.
	pprof.Do(ctx, pprof.Labels("run", res.System+" "+res.Workload+" "+res.Config), func(context.Context) { err = fn() })
	if err != nil {
		return Cost{}, err
	}
	b.srv.waitIdle(ctx, db)
	after, err := b.srv.snapshot(ctx, db)
	if err != nil {
		return Cost{}, err
	}
	return costOf(before, after, events()), nil
}

func (b *bench) tmpFile(name string) string { return filepath.Join(b.tmp, name) }
