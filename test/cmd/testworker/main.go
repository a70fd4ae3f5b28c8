// Command testworker is a partitionq worker for the crash and chaos tests:
// they start it as a separate process and kill it with SIGKILL at random.
// Events carry {"k": key, "s": seq, "f": failures} as payload: the handler
// fails the first f attempts of an event, then succeeds; with "d": true the
// attempt after the f failures fails too and asks for a dead letter at once
// (partitionq.DeadLetterNow). Every handler call
// is logged, before it returns, to the table pq_run_log of the database
// (created by the test: test/crash), so
// the test can judge order and completeness (internal/ordercheck).
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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
)

type payload struct {
	K string `json:"k"`
	S int    `json:"s"`
	F int    `json:"f"`
	D bool   `json:"d"` // dead-letter the event on attempt f+1
}

func main() {
	db := flag.String("db", os.Getenv("DATABASE_URL"), "database URL")
	queue := flag.String("queue", "q", "queue")
	group := flag.String("group", "g", "group")
	slots := flag.String("slots", "all", "slots to run: all, or a comma-separated list")
	conc := flag.Int("concurrency", 8, "in-slot concurrency")
	maxAttempts := flag.Int("max-attempts", 0, "max attempts (0: default of the policy)")
	jitter := flag.Duration("jitter", 2*time.Millisecond, "largest random handler delay")
	backoffMax := flag.Duration("backoff-max", 20*time.Millisecond, "longest retry backoff (BackoffMax); BackoffMin is 5ms")
	statsEvery := flag.Duration("stats", 0, "when not zero, print a line `stats {json}` with memory and goroutine counts this often")
	flag.Parse()
	if *statsEvery > 0 {
		go printStats(*statsEvery)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log, *db, *queue, *group, *slots, *conc, *maxAttempts, *jitter, max(*backoffMax, 5*time.Millisecond)); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, db, queue, group, slotList string, conc, maxAttempts int, jitter, backoffMax time.Duration) error {
	cfg, err := pgxpool.ParseConfig(db)
	if err != nil {
		return err
	}
	// The handlers' pool: each handler writes one row. The worker's slots
	// and drains use connections of their own (see partitionq.PoolConns).
	cfg.MaxConns = 8
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
	if slotList != "all" {
		for _, s := range strings.Split(slotList, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				return err
			}
			slots = append(slots, n)
		}
	}
	pid := os.Getpid()
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		var p payload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return partitionq.DeadLetterNow(err)
		}
		if jitter > 0 {
			time.Sleep(rand.N(jitter))
		}
		ok := ev.Attempt > p.F && !p.D
		if _, err := pool.Exec(ctx, `insert into pq_run_log (key, seq, attempt, ok, pid) values ($1, $2, $3, $4, $5)`,
			ev.Key, p.S, ev.Attempt, ok, pid); err != nil {
			return err
		}
		if !ok && p.D && ev.Attempt > p.F {
			return partitionq.DeadLetterNow(errors.New("scripted poison event"))
		}
		if !ok {
			return errors.New("scripted failure")
		}
		return nil
	})
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: queue, Group: group, Slots: slots, Handler: h, Concurrency: conc, MaxAttempts: maxAttempts,
		BackoffMin: 5 * time.Millisecond, BackoffMax: backoffMax,
		PollInterval: 10 * time.Millisecond, StandbyPoll: 100 * time.Millisecond, HeadScanInterval: 50 * time.Millisecond,
		RunTicker: true, TickInterval: 10 * time.Millisecond, Identity: fmt.Sprintf("testworker:%d", pid),
	})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return w.Run(ctx)
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
