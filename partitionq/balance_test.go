package partitionq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// owned counts the slots each worker owns now (Worker.Stats).
func ownedBy(ws []*partitionq.Worker) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		for _, s := range w.Stats() {
			if s.Owned {
				out[i]++
			}
		}
	}
	return out
}

// waitShares waits until the live workers ws own every one of n slots,
// each floor or ceil of n over their number.
func waitShares(t *testing.T, ws []*partitionq.Worker, n int, what string) {
	t.Helper()
	lo, hi := n/len(ws), (n+len(ws)-1)/len(ws)
	pgtest.WaitFor(t, 30*time.Second, what, func() (bool, error) {
		total := 0
		for _, k := range ownedBy(ws) {
			if k < lo || k > hi {
				return false, nil
			}
			total += k
		}
		return total == n, nil
	})
}

// runRecorder records every handler run (start, end, outcome) for
// internal/ordercheck: the events' payloads are their seq in their key.
type runRecorder struct {
	mu   sync.Mutex
	log  []ordercheck.Handling
	runs []ordercheck.Run
	fail func(ev *partitionq.Event) error
}

func (r *runRecorder) Handle(ctx context.Context, ev *partitionq.Event) error {
	var seq int
	if _, err := fmt.Sscanf(string(ev.Payload), "%d", &seq); err != nil {
		return partitionq.DeadLetterNow(err)
	}
	start := time.Now()
	err := r.fail(ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, ordercheck.Handling{Key: ev.Key, Seq: seq, OK: err == nil})
	r.runs = append(r.runs, ordercheck.Run{Key: ev.Key, Seq: seq, Worker: fmt.Sprint(ev.Epoch), Start: start, End: time.Now()})
	return err
}

func (r *runRecorder) report(sent map[string]int) ordercheck.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ordercheck.Check(sent, r.log, nil).WithRuns(r.runs)
}

// Identical workers (one configuration, no Slots) share the group's slots
// and rebalance as one stops and another joins: graceful moves repeat no
// event, and no key is ever in two handler runs at once, while events
// flow and some fail (keys blocked at the moves).
func TestIdenticalWorkersShareTheSlots(t *testing.T) {
	b := setup(t)
	b.group(t, 8)
	rec := &runRecorder{fail: func(ev *partitionq.Event) error {
		time.Sleep(time.Duration(ev.ID%5) * time.Millisecond) // runs in flight at the moves
		if ev.ID%37 == 0 && ev.Attempt == 1 {
			return fmt.Errorf("event %d fails its first attempt", ev.ID)
		}
		return nil
	}}
	// The default lease (5 s): a lease of 2 s lapsed on a machine at full
	// load, and a lapse repeats what was in flight.
	cfg := partitionq.WorkerConfig{Handler: rec, Retry: partitionq.RetryConfig{BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}}

	// A producer sends all along: each round one event of each key.
	const keys = 40
	var rounds atomic.Int64
	ctx, stopSending := context.WithCancel(b.ctx)
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		for r := 0; ctx.Err() == nil; r++ {
			var ms []partitionq.Message
			for k := range keys {
				ms = append(ms, partitionq.Message{Key: fmt.Sprintf("tenant-%d", k), Type: "FileCreated", Payload: fmt.Append(nil, r)})
			}
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Error(err)
				return
			}
			rounds.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}()

	ws := []*partitionq.Worker{b.worker(t, cfg), b.worker(t, cfg), b.worker(t, cfg)}
	waitShares(t, ws, 8, "3 workers sharing 8 slots (3, 3, 2)")

	if err := ws[0].Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	ws = ws[1:]
	waitShares(t, ws, 8, "2 workers holding 4 slots each after one stopped")

	ws = append(ws, b.worker(t, cfg))
	waitShares(t, ws, 8, "3 workers sharing 8 slots after one joined")

	stopSending()
	producer.Wait()
	sent := map[string]int{}
	for k := range keys {
		sent[fmt.Sprintf("tenant-%d", k)] = int(rounds.Load())
	}
	pgtest.WaitFor(t, 60*time.Second, "every event handled", func() (bool, error) {
		return rec.report(sent).Lost == 0, nil
	})
	rep := rec.report(sent)
	if !rep.OK() || rep.Repeats != 0 {
		t.Fatalf("%s (graceful moves repeat nothing): %v", rep, rep.Examples)
	}
	t.Log(rep)
}
