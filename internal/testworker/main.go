// Command testworker is a partitionq worker for the crash and chaos tests:
// they start it as a separate process and kill it with SIGKILL at random.
// Events carry {"k": key, "s": seq, "f": failures} as payload: the handler
// fails the first f attempts of an event, then succeeds. Every handler call
// is logged, before it returns, to the table pq_run_log of the database
// (created by the test: internal/crashtest), so
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
}

func main() {
	db := flag.String("db", os.Getenv("DATABASE_URL"), "database URL")
	queue := flag.String("queue", "q", "queue")
	group := flag.String("group", "g", "group")
	slots := flag.String("slots", "all", "slots to run: all, or a comma-separated list")
	conc := flag.Int("concurrency", 8, "in-slot concurrency")
	maxAttempts := flag.Int("max-attempts", 0, "max attempts (0: default of the policy)")
	jitter := flag.Duration("jitter", 2*time.Millisecond, "largest random handler delay")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log, *db, *queue, *group, *slots, *conc, *maxAttempts, *jitter); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, db, queue, group, slotList string, conc, maxAttempts int, jitter time.Duration) error {
	cfg, err := pgxpool.ParseConfig(db)
	if err != nil {
		return err
	}
	cfg.MaxConns = 40
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
		ok := ev.Attempt > p.F
		if _, err := pool.Exec(ctx, `insert into pq_run_log (key, seq, attempt, ok, pid) values ($1, $2, $3, $4, $5)`,
			ev.Key, p.S, ev.Attempt, ok, pid); err != nil {
			return err
		}
		if !ok {
			return errors.New("scripted failure")
		}
		return nil
	})
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: queue, Group: group, Slots: slots, Handler: h, Concurrency: conc, MaxAttempts: maxAttempts,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, StandbyPoll: 100 * time.Millisecond, HeadScanInterval: 50 * time.Millisecond,
		RunTicker: true, TickInterval: 10 * time.Millisecond, Identity: fmt.Sprintf("testworker:%d", pid),
	})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return w.Run(ctx)
}
