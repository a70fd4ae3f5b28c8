package chaos_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Parked events a progress flush writes before their batch ends (an
// early part) survive a crash of the server. Once such a flush commits,
// the worker takes the part out of the batch's outcome and records its
// events resolved, so the batch's finish does not write them again: a
// commit the server acknowledged and then lost would lose them (not
// handled, not in the retry queue, no dead letter; the batch finished).
// Flushes committed with synchronous_commit off, which an immediate
// shutdown loses: TestFaultMatrix/restart/library saw it once (seed
// 1796564756720839008: k-9's last 5 events); a flush with a part now
// waits for its commit to be written.
//
// Key A's first event fails (its retry due 2 s later) and its other
// events wait behind it, written by a flush while key B's event holds the
// batch open; the moment A's 5 parked rows are visible, the server is
// restarted in immediate mode. The WAL writer is slowed down (10 s) and
// nothing else commits synchronously in that moment (no ticker in the
// worker, a 30 s lease), so an asynchronous commit would be lost for sure.
func TestEarlyParkedPartSurvivesACrashRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, pool, c := clusterGroup(ctx, t, 1, partitionq.WorkerConns()+4, "")
	schema := pgtest.Engine(t).Schema()
	if _, err := pool.Exec(ctx, `alter system set wal_writer_delay = '10s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `select pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		for cctx.Err() == nil {
			if _, err := pool.Exec(cctx, `alter system reset wal_writer_delay`); err == nil {
				if _, err := pool.Exec(cctx, `select pg_reload_conf()`); err == nil {
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not reset wal_writer_delay")
	}()

	// Take the WAL writer out of hibernation (in which an asynchronous
	// commit wakes it at once): an asynchronous commit of our own, after
	// which it sleeps its 10 s. (The pauses are the WAL writer's: no
	// statement shows when it has read its new setting or gone to sleep.)
	time.Sleep(500 * time.Millisecond)
	if _, err := pool.Exec(ctx, `create table warm (x int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `begin; set local synchronous_commit = off; insert into warm values (1); commit`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	var mu sync.Mutex
	okA := []string{}
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		switch {
		case ev.Key == "A" && string(ev.Payload) == "1" && ev.Attempt == 1:
			return fmt.Errorf("boom")
		case ev.Key == "B":
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if ev.Key == "A" {
			mu.Lock()
			okA = append(okA, string(ev.Payload))
			mu.Unlock()
		}
		return nil
	})
	w, err := c.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h,
		Limits:    partitionq.LimitsConfig{Concurrency: 4, PollInterval: 10 * time.Millisecond},
		Retry:     partitionq.RetryConfig{BackoffMin: 2 * time.Second, BackoffMax: 2 * time.Second, HeadScanInterval: 50 * time.Millisecond},
		Ownership: partitionq.OwnershipConfig{LeaseDuration: 30 * time.Second, StandbyPoll: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		releaseOnce.Do(func() { close(release) })
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	}()

	ms := []partitionq.Message{{Key: "B", Type: "T", Payload: []byte("1")}}
	for i := 1; i <= 5; i++ {
		ms = append(ms, partitionq.Message{Key: "A", Type: "T", Payload: []byte(fmt.Sprint(i))})
	}
	if _, err := c.SendBatch(ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`select %s.ticker('q')`, schema)); err != nil {
		t.Fatal(err)
	}
	// A's 5 parked rows, written by a flush while B holds the batch open.
	pgtest.WaitFor(t, 30*time.Second, "A's events parked before the batch's end", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, fmt.Sprintf(`select count(*) from %s.retry_queue where ev_extra1 = 'A'`, schema)).Scan(&n)
		return n == 5, err
	})
	if err := cl.Restart(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	releaseOnce.Do(func() { close(release) }) // B ends; the batch finishes once the worker has reconnected

	want := []string{"1", "2", "3", "4", "5"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), okA...)
		mu.Unlock()
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			var parked, dead, open int
			_ = pool.QueryRow(ctx, fmt.Sprintf(`select count(*) from %s.subscription where sub_batch is not null`, schema)).Scan(&open)
			_ = pool.QueryRow(ctx, fmt.Sprintf(`select count(*) from %s.retry_queue where ev_extra1 = 'A'`, schema)).Scan(&parked)
			_ = pool.QueryRow(ctx, `select count(*) from partitionq.dead_letter where key = 'A'`).Scan(&dead)
			t.Fatalf("after the crash restart A handled %v, want %v; A's events in the retry queue: %d, dead letters: %d, open engine batches: %d "+
				"(the parked rows the flush wrote were lost in the crash, and the batch was finished anyway)",
				got, want, parked, dead, open)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
