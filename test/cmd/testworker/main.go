// Command testworker is a partitionq worker for the crash and chaos tests:
// they start it as a separate process and kill it with SIGKILL at random.
// Events carry {"k": key, "s": seq, "f": failures} as payload: the handler
// fails the first f attempts of an event, then succeeds; with "d": true the
// attempt after the f failures fails too and asks for a dead letter at once
// (partitionq.DeadLetterNow). Every handler call
// is logged, before it returns, to the table pq_run_log of the database
// (created by the test: test/crash), so
// the test can judge order and completeness (internal/ordercheck). With
// -run-handler the worker's handler is a RunHandler (with -tx a
// TxRunHandler) that handles a run's events one after another, each logged
// as a run of its own, and names the first that fails (partitionq.RunFailed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

type payload struct {
	K string `json:"k"`
	S int    `json:"s"`
	F int    `json:"f"`
	D bool   `json:"d"` // dead-letter the event on attempt f+1
	// G names a gate: the handler waits (honouring its context) until a row
	// of that name is in the table pq_gate, then goes on.
	G string `json:"g,omitempty"`
}

// opts are the flags.
type opts struct {
	db, queue, group, slots   string
	conc, drains, maxAttempts int
	jitter, hold, backoffMax  time.Duration
	lease, deadHost           time.Duration
	runlog                    string
	tx                        bool
	ticker                    bool
	runHandler                bool
	maxRun                    int
}

func main() {
	var o opts
	flag.StringVar(&o.db, "db", os.Getenv("DATABASE_URL"), "database URL")
	flag.StringVar(&o.queue, "queue", "q", "queue")
	flag.StringVar(&o.group, "group", "g", "group")
	flag.StringVar(&o.slots, "slots", "all", "slots to run: all, or a comma-separated list")
	flag.IntVar(&o.conc, "concurrency", 8, "in-slot concurrency")
	flag.IntVar(&o.drains, "drains", 2, "blocked keys drained at once (DrainConcurrency): each holds a connection, and the tests run several workers on one server")
	flag.IntVar(&o.maxAttempts, "max-attempts", 0, "max attempts (0: default of the policy)")
	flag.DurationVar(&o.jitter, "jitter", 2*time.Millisecond, "largest random handler delay")
	flag.DurationVar(&o.hold, "hold", 0, "largest random time a handler holds its event after it logged it, honouring its context (so that runs outlive a takeover)")
	flag.DurationVar(&o.backoffMax, "backoff-max", 20*time.Millisecond, "longest retry backoff (BackoffMax); BackoffMin is 5ms")
	flag.DurationVar(&o.lease, "lease", time.Second, "the worker's LeaseDuration")
	flag.DurationVar(&o.deadHost, "dead-host-timeout", 0, "the worker's DeadHostTimeout (0: its default)")
	flag.StringVar(&o.runlog, "runlog", "", "append the start and end of every handler run to this file (internal/ordercheck's run log)")
	flag.BoolVar(&o.ticker, "ticker", true, "run the engine's ticker in the worker (false: the test ticks)")
	flag.BoolVar(&o.tx, "tx", false, "handle in the worker's transaction (TxHandler): the pq_run_log row of a success commits with the event's completion")
	flag.BoolVar(&o.runHandler, "run-handler", false, "hand runs of a key's events to a RunHandler (with -tx a TxRunHandler), each event logged as a run of its own")
	flag.IntVar(&o.maxRun, "max-run", 0, "with -run-handler: the worker's Limits.MaxRun (0: its default)")
	level := flag.String("log", "warn", "log level: debug, info or warn")
	statsEvery := flag.Duration("stats", 0, "when not zero, print a line `stats {json}` with memory and goroutine counts this often")
	flag.Parse()
	o.backoffMax = max(o.backoffMax, 5*time.Millisecond)
	if *statsEvery > 0 {
		go printStats(*statsEvery)
	}

	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "testworker: -log:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

// runLog records handler runs, safe for concurrent use.
type runLog struct {
	mu  sync.Mutex
	log ordercheck.RunLog
	f   *os.File
}

func (l *runLog) start(key string, seq int, worker string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log.Start(key, seq, worker, time.Now()) // a test log: a failed write shows as a missing run
}

func (l *runLog) end(key string, seq int, worker string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log.End(key, seq, worker, time.Now())
}

func run(ctx context.Context, log *slog.Logger, o opts) error {
	cfg, err := pgxpool.ParseConfig(o.db)
	if err != nil {
		return err
	}
	// The handlers' pool: each handler writes one row. The worker's slots
	// and drains use connections of their own (see partitionq.WorkerConns).
	// Small: the tests run several workers at once, each owning slots, on
	// a server with 100 connections.
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{Logger: log})
	if err != nil {
		return err
	}
	var slots []int
	if o.slots != "all" {
		for _, s := range strings.Split(o.slots, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				return err
			}
			slots = append(slots, n)
		}
	}
	var rl *runLog
	if o.runlog != "" {
		f, err := os.OpenFile(o.runlog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		rl = &runLog{log: ordercheck.RunLog{W: f}, f: f}
	}
	pid := os.Getpid()
	worker := strconv.Itoa(pid)
	// handle is the handler's work: log the attempt (in db), hold the event
	// a while, and come to the scripted outcome.
	handle := func(ctx context.Context, db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, ev *partitionq.Event) error {
		var p payload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return partitionq.DeadLetterNow(err)
		}
		rl.start(ev.Key, p.S, worker)
		defer rl.end(ev.Key, p.S, worker)
		for p.G != "" {
			var open bool
			// The gate is the test's instrument, not the handler's work: a
			// read of it that fails (a terminated session) is tried again,
			// so that the event stays in its handler until the gate opens.
			err := pool.QueryRow(ctx, `select exists (select 1 from pq_gate where name = $1)`, p.G).Scan(&open)
			if err == nil && open {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if o.jitter > 0 {
			time.Sleep(rand.N(o.jitter))
		}
		ok := ev.Attempt > p.F && !p.D
		if _, err := db.Exec(ctx, `insert into pq_run_log (key, seq, attempt, ok, pid) values ($1, $2, $3, $4, $5)`,
			ev.Key, p.S, ev.Attempt, ok, pid); err != nil {
			return err
		}
		if o.hold > 0 {
			select {
			case <-time.After(rand.N(o.hold)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok && p.D && ev.Attempt > p.F {
			return partitionq.DeadLetterNow(errors.New("scripted poison event"))
		}
		if !ok {
			return errors.New("scripted failure")
		}
		return nil
	}
	wc := partitionq.WorkerConfig{
		Queue: o.queue, Group: o.group, Pins: slots,
		Identity:  fmt.Sprintf("testworker:%d", pid),
		Retry:     partitionq.RetryConfig{MaxAttempts: o.maxAttempts, BackoffMin: 5 * time.Millisecond, BackoffMax: o.backoffMax, HeadScanInterval: 50 * time.Millisecond},
		Limits:    partitionq.LimitsConfig{Concurrency: o.conc, DrainConcurrency: o.drains, PollInterval: 10 * time.Millisecond},
		Ownership: partitionq.OwnershipConfig{StandbyPoll: 100 * time.Millisecond, LeaseDuration: o.lease, DeadHostTimeout: o.deadHost},
	}
	if o.ticker {
		wc.Ticker = &partitionq.TickerConfig{Interval: 10 * time.Millisecond}
	}
	wc.Limits.MaxRun = o.maxRun
	// handleRun handles a run's events in order, each as handle does; the
	// first failure ends the run and is named by its index.
	handleRun := func(ctx context.Context, db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, evs []*partitionq.Event) error {
		for i, ev := range evs {
			if err := handle(ctx, db, ev); err != nil {
				return partitionq.RunFailed(i, err)
			}
		}
		return nil
	}
	switch {
	case o.runHandler && o.tx:
		wc.Handler = partitionq.RunsInTx(partitionq.TxRunHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*partitionq.Event) error {
			return handleRun(ctx, tx, evs)
		}))
	case o.runHandler:
		wc.Handler = partitionq.Runs(partitionq.RunHandlerFunc(func(ctx context.Context, evs []*partitionq.Event) error { return handleRun(ctx, pool, evs) }))
	case o.tx:
		wc.Handler = partitionq.InTx(partitionq.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *partitionq.Event) error { return handle(ctx, tx, ev) }))
	default:
		wc.Handler = partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error { return handle(ctx, pool, ev) })
	}
	w, err := client.NewWorker(ctx, wc)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	return w.Stop(context.Background())
}

// stats is one line of -stats output.
type stats struct {
	Goroutines int    `json:"goroutines"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapInuse  uint64 `json:"heap_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
}

// printStats prints the process's goroutine count and memory every d, so
// the soak run can see whether they stay flat.
func printStats(d time.Duration) {
	for range time.Tick(d) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b, _ := json.Marshal(stats{Goroutines: runtime.NumGoroutine(), HeapAlloc: m.HeapAlloc, HeapInuse: m.HeapInuse, Sys: m.Sys, NumGC: m.NumGC})
		fmt.Printf("stats %s\n", b)
	}
}
