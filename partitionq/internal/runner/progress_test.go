package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/progress"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
)

// recorded reads slot s's recorded progress: its open batch (0: none) and
// the events recorded as done.
func (g *groupRig) recorded(s int) (batch int64, done progress.Set) {
	g.t.Helper()
	var b *int64
	var below int64
	var enc []byte
	err := g.pool.QueryRow(g.ctx, `select batch_id, done_below, done from partitionq.slot_progress
		where queue = $1 and grp = $2 and generation = 1 and slot = $3`, g.queue, group, s).Scan(&b, &below, &enc)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, progress.Set{}
	}
	if err != nil {
		g.t.Fatal(err)
	}
	if done, err = progress.Decode(below, enc); err != nil {
		g.t.Fatal(err)
	}
	if b == nil {
		return 0, done
	}
	return *b, done
}

// A worker stopped inside a batch leaves it open with its progress: the
// events it handled are recorded as done, the one it did not finish is
// not. The slot's next owner opens the same batch and runs only that one:
// the events already done are not run again (Stats.Resumed counts them).
func TestAStoppedBatchResumesWithoutItsDoneEvents(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	keys := []string{"a", "b", "c", "stuck", "d", "e", "a", "f"} // done events below and above the one left
	ids := g.send(keys...)
	stuckID := ids[3]

	// The first owner handles every event but stuck's, whose handler runs
	// until the worker stops.
	var first calls
	var stuckRunning atomic.Bool
	cfg := g.config([]int{0}, runner.Pause, func(ctx context.Context, c runner.Call) runner.Result {
		if c.Event.ID == stuckID {
			stuckRunning.Store(true)
			<-ctx.Done()
			return runner.Result{Err: ctx.Err()}
		}
		first.add(call{id: c.Event.ID, key: c.Event.Key, batch: c.Batch, ok: true})
		return runner.Result{}
	})
	r1 := g.start(cfg)
	var batch int64
	waitFor(t, "the handled events are recorded as done", func() bool {
		b, done := g.recorded(0)
		if b == 0 || !stuckRunning.Load() {
			return false
		}
		for _, id := range ids {
			if id != stuckID && !done.Has(id) {
				return false
			}
		}
		batch = b
		return true
	})
	if _, done := g.recorded(0); done.Has(stuckID) {
		t.Fatalf("event %d is recorded as done while its handler runs", stuckID)
	}
	r1.stop()
	if b, done := g.recorded(0); b != batch || done.Has(stuckID) {
		t.Fatalf("after the stop the slot's progress is batch %d, stuck done %v; want batch %d open, stuck not done", b, done.Has(stuckID), batch)
	}

	var second calls
	r2 := g.start(g.config([]int{0}, runner.Pause, second.handler(nil)))
	g.waitRead(0)
	got := second.list()
	if len(got) != 1 || got[0].id != stuckID || got[0].batch != batch {
		t.Errorf("the next owner ran %+v; want only event %d, in batch %d", got, stuckID, batch)
	}
	if n, want := r2.stats[0].Resumed.Load(), int64(len(ids)-1); n != want {
		t.Errorf("Resumed = %d, want %d (the events the first owner handled)", n, want)
	}
}

// A batch's finish clears its progress (no batch, nothing done) in the
// same transaction, adds the slot's outcomes to its counters and records
// when it finished; its exactly-once records (slot_done) go with it.
func TestFinishResetsTheProgressAndCountsOutcomes(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var c calls
	cfg := g.config([]int{0}, runner.Pause, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Event.Key == "bad" {
			return &runner.Result{Err: fmt.Errorf("bad event")}
		}
		return nil
	}))
	cfg.Backoff = func(int) time.Duration { return time.Hour } // no drain retries the failed head meanwhile
	g.start(cfg)
	ids := g.send("x", "y", "bad", "z")
	g.waitRead(0)
	var batch *int64
	var below, handled, failed int64
	var done []byte
	var finished bool
	// The counts come with the finish or with a flush, which may commit
	// after the finish (it took them before): wait for them.
	waitFor(t, "the slot's counters have every outcome", func() bool {
		err := g.pool.QueryRow(g.ctx, `select batch_id, done_below, done, handled, failed, finished_at is not null from partitionq.slot_progress
			where queue = $1 and grp = $2 and generation = 1 and slot = 0`, g.queue, group).Scan(&batch, &below, &done, &handled, &failed, &finished)
		if err != nil {
			t.Fatal(err)
		}
		return handled+failed >= 4
	})
	// The row may name the finished batch: a flush that read the batch
	// before the finish can commit after it (see the package's report).
	if batch != nil && *batch != c.list()[0].batch {
		t.Errorf("after the finish the progress names batch %d, not the finished one (%d) nor none", *batch, c.list()[0].batch)
	}
	if !finished {
		t.Errorf("the finish is not recorded (finished_at is null)")
	}
	if handled != 3 || failed != 1 {
		t.Errorf("counted %d handled, %d failed; want 3 and 1", handled, failed)
	}
	var records int
	if err := g.pool.QueryRow(g.ctx, `select count(*) from partitionq.slot_done where queue = $1 and grp = $2`, g.queue, group).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 0 {
		t.Errorf("%d exactly-once records outlive the finished batch", records)
	}
	if p := g.parkedIDs(0, "bad"); !slices.Equal(p, []int64{ids[2]}) {
		t.Errorf("parked events of the failed key: %v, want [%d]", p, ids[2])
	}
}
