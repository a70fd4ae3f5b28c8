package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkBlastRadius measures how long the other keys of a slot take to
// drain a backlog, with and without one blocked key whose own backlog is
// interleaved with theirs: the difference is the cost of setting the
// blocked key's events aside. Run side by side:
//
//	make db && go test -run '^$' -bench BlastRadius -benchtime 1x ./partitionq/
func BenchmarkBlastRadius(b *testing.B) {
	for _, blocked := range []int{0, 10000} {
		b.Run(fmt.Sprintf("blocked_backlog=%d", blocked), func(b *testing.B) {
			for range b.N {
				blastRun(b, blocked)
			}
		})
	}
}

func blastRun(b *testing.B, blocked int) {
	b.StopTimer()
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 20)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1, TickMaxLag: 10 * time.Millisecond}); err != nil {
		b.Fatal(err)
	}
	const others, perKey = 100, 200
	var ms []partitionq.Message
	for i := 0; i < others*perKey || len(ms) > 0; {
		for j := 0; j < 1000 && i < others*perKey; j++ {
			ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", i%others), Payload: []byte("{}")})
			if blocked > 0 && i%(others*perKey/blocked) == 0 {
				ms = append(ms, partitionq.Message{Key: "hot", Payload: []byte("{}")})
			}
			i++
		}
		if _, err := c.SendBatch(ctx, "q", ms); err != nil {
			b.Fatal(err)
		}
		ms = nil
	}
	var done atomic.Int64
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key == "hot" {
			return fmt.Errorf("blocked")
		}
		done.Add(1)
		return nil
	})
	w, err := c.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h, Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond}, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}, Limits: partitionq.LimitsConfig{PollInterval: 5 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	pgtest.WaitFor(b, 5*time.Minute, "the other keys drained", func() (bool, error) { return done.Load() == others*perKey, nil })
	elapsed := time.Since(start)
	b.StopTimer()
	if err := w.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(others*perKey)/elapsed.Seconds(), "other-events/s")
	b.ReportMetric(float64(blocked), "set-aside")
}

// BenchmarkDrain measures how fast a worker drains a blocked key: the key's
// head fails once, its 10,000 later events are set aside behind it, and the
// benchmark times the drain of all of them once the head succeeds. With
// progress (the default) each drained event is also recorded as done as it
// goes (so a fault repeats only what was in flight); without it (the
// worker's DisableProgress) a drain records nothing until its transaction
// commits: the difference is what resuming drains costs. Run side by side:
//
//	make db && go test -run '^$' -bench Drain -benchtime 3x ./partitionq/
func BenchmarkDrain(b *testing.B) {
	for _, progress := range []bool{true, false} {
		b.Run(fmt.Sprintf("progress=%t", progress), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += drainRun(b, !progress)
			}
			b.ReportMetric(float64(drainBacklog*b.N)/total.Seconds(), "drained-events/s")
			b.ReportMetric(total.Seconds()*1e6/float64(drainBacklog*b.N), "µs/event")
		})
	}
}

const drainBacklog = 10000

func drainRun(b *testing.B, noProgress bool) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 20)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1, TickMaxLag: 10 * time.Millisecond}); err != nil {
		b.Fatal(err)
	}
	ms := make([]partitionq.Message, 0, drainBacklog+1)
	for i := 0; i <= drainBacklog; i++ {
		ms = append(ms, partitionq.Message{Key: "hot", Payload: []byte("{}")})
	}
	sent, err := c.SendBatch(ctx, "q", ms)
	if err != nil {
		b.Fatal(err)
	}
	head := sent[0].ID
	var failing atomic.Bool
	failing.Store(true)
	var drained atomic.Int64
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if ev.ID == head && failing.Load() {
			return errors.New("blocked")
		}
		if ev.ID != head {
			drained.Add(1)
		}
		return nil
	})
	w, err := c.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: "q", Group: "g", Handler: h, Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond}, DisableProgress: noProgress,
		Retry:  partitionq.RetryConfig{BackoffMin: time.Hour, BackoffMax: time.Hour},
		Limits: partitionq.LimitsConfig{PollInterval: 5 * time.Millisecond},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(ctx) // the measurement is taken
	pgtest.WaitFor(b, 5*time.Minute, "the key's events set aside", func() (bool, error) {
		bk, err := c.BlockedKey(ctx, "q", "g", "hot")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == drainBacklog, err
	})
	failing.Store(false)
	b.StartTimer()
	start := time.Now()
	if _, err := c.Act(ctx, partitionq.ActionRequest{Action: partitionq.AuditRetry, Queue: "q", Group: "g", Key: "hot", Reason: "benchmark"}); err != nil {
		b.Fatal(err)
	}
	pgtest.WaitFor(b, 5*time.Minute, "the key drained", func() (bool, error) { return drained.Load() == drainBacklog, nil })
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}
