package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkWorkHandlers measures one worker's throughput, N = 4 slots and
// 16 events at once per slot, with a no-op handler of each kind, side by
// side: a Go handler (the library), --http to a Node.js server (its http
// module), --pipe to a /usr/bin/python3 process, --exec true; and a 5 ms
// handler in Go, through --http to a Go server (net/http, time.Sleep: what
// the HTTP path costs) and to a Node.js server (setTimeout). Each row
// drains a backlog sent in one transaction once the worker owns its slots,
// from the commit until every slot has finished the last event's batch,
// and reports events/s.
//
//	go test -run '^$' -bench BenchmarkWorkHandlers -benchtime 1x ./internal/cli/
//
// Rows whose program is missing (node, /usr/bin/python3) are skipped.
func BenchmarkWorkHandlers(b *testing.B) {
	const slots, concurrency, keys = 4, 16, 1000
	rows := []struct {
		name   string
		events int
		delay  time.Duration
	}{
		{"go", 200_000, 0},
		{"http-node", 60_000, 0},
		{"pipe-python", 100_000, 0},
		{"exec-true", 2_000, 0},
		{"go-5ms", 40_000, 5 * time.Millisecond},
		{"http-go-5ms", 40_000, 5 * time.Millisecond},
		{"http-node-5ms", 40_000, 5 * time.Millisecond},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			var rate float64
			for range b.N {
				rate += benchDrain(b, row.name, row.events, row.delay, slots, concurrency, keys)
			}
			b.ReportMetric(rate/float64(b.N), "events/s")
			b.ReportMetric(0, "ns/op") // the time of a drain is in events/s
		})
	}
}

// benchDrain runs one row once and returns its events per second.
func benchDrain(b *testing.B, row string, events int, delay time.Duration, slots, concurrency, keys int) float64 {
	b.Helper()
	b.StopTimer()
	db := pgtest.New(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: slots, TickMaxLag: time.Millisecond}); err != nil {
		b.Fatal(err)
	}

	// The worker, idle until the backlog commits.
	stop := benchWorker(b, ctx, client, db.URL, row, delay, concurrency)
	defer stop()
	pgtest.WaitFor(b, 30*time.Second, "the worker to own its slots", func() (bool, error) {
		var owned int
		err := pool.QueryRow(ctx, `select count(*) from partitionq.slot where queue = 'q' and worker_id is not null`).Scan(&owned)
		return owned == slots, err
	})

	ms := make([]partitionq.Message, events)
	for i := range ms {
		ms[i] = partitionq.Message{Key: fmt.Sprintf("tenant-%d", i%keys), Type: "FileCreated", Payload: []byte(`{"path":"/a"}`)}
	}
	b.StartTimer()
	start := time.Now()
	if _, err := client.SendBatch(ctx, "q", ms); err != nil {
		b.Fatal(err)
	}
	sent := time.Now()
	var committed time.Time // by the server's clock
	if err := pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&committed); err != nil {
		b.Fatal(err)
	}
	deadline := sent.Add(10 * time.Minute)
	for !benchDrained(b, ctx, pool, db, committed) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not drained after 10 minutes", row)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(sent)
	b.StopTimer()
	b.Logf("%s: %d events in %s after a send of %s: %.0f events/s", row, events, took.Round(time.Millisecond), sent.Sub(start).Round(time.Millisecond), float64(events)/took.Seconds())
	return float64(events) / took.Seconds()
}

// benchDrained reports whether every slot consumer has finished a batch up
// to a tick made after committed: a tick's snapshot then holds every event
// committed before, so each slot has handled its share of them.
func benchDrained(b *testing.B, ctx context.Context, pool *pgxpool.Pool, db pgtest.DB, committed time.Time) bool {
	var drained bool
	err := pool.QueryRow(ctx, db.SQL(`select bool_and(current_batch is null and now() - lag > $1) from pgq.get_consumer_info('q')`), committed).Scan(&drained)
	if err != nil {
		b.Fatal(err)
	}
	return drained
}

// benchWorker starts the row's worker and returns what stops it.
func benchWorker(b *testing.B, ctx context.Context, client *partitionq.Client, url, row string, delay time.Duration, concurrency int) func() {
	b.Helper()
	if strings.HasPrefix(row, "go") {
		w, err := client.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g",
			Handler: partitionq.HandlerFunc(func(ctx context.Context, _ *partitionq.Event) error {
				if delay > 0 {
					time.Sleep(delay)
				}
				return nil
			}),
			Limits: partitionq.LimitsConfig{Concurrency: concurrency},
			Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond}})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		return func() { w.Stop(context.Background()) }
	}
	var handler []string
	var stopHandler func()
	switch {
	case strings.HasPrefix(row, "http-"):
		var cmd *exec.Cmd
		if strings.HasPrefix(row, "http-node") {
			node, err := exec.LookPath("node")
			if err != nil {
				b.Skip("node is not installed")
			}
			cmd = exec.Command(node, filepath.Join("testdata", "bench", "noop-http.js"))
		} else { // a Go server: this test binary (handlerroles_test.go)
			self, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			cmd = exec.Command(self)
			cmd.Env = append(os.Environ(), roleEnv+"=http-sleep")
		}
		cmd.Env = append(cmd.Environ(), fmt.Sprintf("DELAY_MS=%d", delay.Milliseconds()))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		port, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		go io.Copy(io.Discard, out)
		handler = []string{"--http", "http://127.0.0.1:" + strings.TrimSpace(port) + "/"}
		stopHandler = func() { cmd.Process.Kill(); cmd.Wait() }
	case row == "pipe-python":
		if _, err := os.Stat("/usr/bin/python3"); err != nil {
			b.Skip("/usr/bin/python3 is not installed")
		}
		script, err := filepath.Abs(filepath.Join("testdata", "bench", "noop-pipe.py"))
		if err != nil {
			b.Fatal(err)
		}
		handler = []string{"--pipe", "exec /usr/bin/python3 '" + script + "'"}
	case row == "exec-true":
		handler = []string{"--exec", "true"}
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var stderr strings.Builder // Main locks it
	go func() {
		args := append([]string{"work", "--queue", "q", "--group", "g", "--ticker", "--tick-interval", "10ms",
			"--concurrency", fmt.Sprint(concurrency)}, handler...)
		done <- cli.Main(wctx, args, cli.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
			Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return url
				}
				return ""
			}})
	}()
	return func() {
		wcancel()
		if code := <-done; code != cli.ExitOK {
			b.Errorf("partitionq work: exit %d\n%s", code, stderr.String())
		}
		if stopHandler != nil {
			stopHandler()
		}
	}
}
