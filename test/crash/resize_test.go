package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// TestResizeUnderFaults resizes a group from 4 to 8 slots while a producer
// sends, three worker processes run it (handlers that hold their events,
// so they outlive a takeover; events that fail twice, so keys are blocked
// and draining), and a fault hits at each step of the resize, each step
// forced and checked: before the cutover (the test holds the ticks), after
// the cutover with an old slot held back by a gated event (the others
// handed off), and after the end. Faults: SIGKILL of the worker that owns
// the old slots concerned, pg_terminate_backend of every session, SIGKILL
// of the resizing command (partitionq resize) at once. Judged by every
// handler run: nothing lost, no key out of order, no two runs of one key at
// once.
func TestResizeUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the resize fault test takes about a minute")
	}
	bin := buildPartitionq(t)
	for _, fault := range []string{"kill-worker", "terminate-sessions", "kill-resize-command"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			testResizeFault(t, fault, bin)
		})
	}
}

// buildPartitionq builds the partitionq command once per test binary.
var buildOnce struct {
	sync.Once
	bin string
	err error
}

func buildPartitionq(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pqcli")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.bin = filepath.Join(dir, "partitionq")
		cmd := exec.Command("go", "build", "-o", buildOnce.bin, "../../cmd/partitionq")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildOnce.err = fmt.Errorf("build partitionq: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.bin
}

func testResizeFault(t *testing.T, fault, bin string) {
	e := newEnv(t, 4)
	runlog := filepath.Join(t.TempDir(), "runs.log")
	// A lease of 3s (the test worker's is 1s): a loaded machine (CI runs
	// this package's tests at once) delays renewals past a 1s lease, and
	// slots that change hands every few seconds never finish the resize.
	args := []string{"-ticker=false", "-hold", "30ms", "-runlog", runlog, "-concurrency", "4", "-lease", "3s", "-log", "debug"}
	var procsMu sync.Mutex
	procs := []*proc{e.start(t, args...), e.start(t, args...), e.start(t, args...)}
	died := map[string]time.Time{} // a killed worker's runs end when it dies

	// The test ticks, and can hold the ticks back.
	var holdTicks atomic.Bool
	tickCtx, stopTicks := context.WithCancel(e.ctx)
	defer stopTicks()
	go func() {
		for tickCtx.Err() == nil {
			if !holdTicks.Load() {
				_ = e.client.TickOnce(tickCtx)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// The producer: 30 keys, 100 events a second, every fifth event of a
	// key fails twice.
	var mu sync.Mutex
	sent := map[string]int{}
	stopSend := make(chan struct{})
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for {
			select {
			case <-stopSend:
				return
			case <-time.After(300 * time.Millisecond):
			}
			// Counted once sent: a send cut by a terminated session is tried
			// again with the same events.
			var ms []partitionq.Message
			mu.Lock()
			for k := 0; k < 30; k++ {
				key := fmt.Sprintf("tenant-%02d", k)
				f := 0
				if sent[key]%5 == 4 {
					f = 2
				}
				ms = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(fmt.Sprintf(`{"k":%q,"s":%d,"f":%d}`, key, sent[key], f))})
			}
			mu.Unlock()
			if _, err := e.client.SendBatch(e.ctx, "q", ms); err != nil {
				continue
			}
			mu.Lock()
			for k := 0; k < 30; k++ {
				sent[fmt.Sprintf("tenant-%02d", k)]++
			}
			mu.Unlock()
		}
	}()
	pgtest.WaitFor(t, 30*time.Second, "events handled", func() (bool, error) { return e.resolved(t) > 300, nil })

	// hit applies the fault, and lets the group recover.
	hit := func(step string, slots []int) {
		t.Helper()
		switch fault {
		case "kill-worker", "kill-resize-command":
			owners := e.ownersAll(t)
			victim := 0
			for _, s := range slots {
				if pid, ok := owners[s]; ok {
					victim = int(pid)
					break
				}
			}
			procsMu.Lock()
			for i, p := range procs {
				if p.pid() == victim || (victim == 0 && i == 0) {
					p.kill()
					died[fmt.Sprint(p.pid())] = time.Now()
					procs[i] = e.start(t, args...)
					t.Logf("%s: killed worker %d (the owner of slots %v)", step, p.pid(), slots)
					break
				}
			}
			procsMu.Unlock()
		case "terminate-sessions":
			var n int
			if err := e.pool.QueryRow(e.ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
				where datname = current_database() and pid <> pg_backend_pid()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			e.pool.Reset() // the test's own sessions were among them
			t.Logf("%s: terminated %d sessions", step, n)
		}
	}

	// Old slot 1 held back by a gated event: its batch cannot finish until
	// the test opens the gate (step 2).
	gated := keyOfSlot(t, e, 1, 4)
	mu.Lock()
	e.send(t, []sentEvent{{key: gated, seq: sent[gated], gate: "resize"}})
	sent[gated]++
	mu.Unlock()
	pgtest.WaitFor(t, 30*time.Second, "the gated event in its handler", func() (bool, error) { return gateWaiting(runlog, gated), nil })

	// Step 1: the resize has begun, its cutover tick not made yet.
	holdTicks.Store(true)
	if fault == "kill-resize-command" {
		resizeKilled(t, e, bin)
	} else if _, err := e.client.Resize(e.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 8, Reason: "fault test"}); err != nil {
		t.Fatal(err)
	}
	g, err := e.client.Group(e.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.Resize == nil || g.Resize.Cutover != 0 {
		t.Fatalf("step 1 not hit: want a resize waiting for its cutover, got %+v", g.Resize)
	}
	hit("before the cutover", []int{0, 1, 2, 3})

	// Step 2: past the cutover, the old slots handed off but slot 1.
	holdTicks.Store(false)
	pgtest.WaitFor(t, 60*time.Second, "step 2: the cutover made and every old slot but 1 handed off", func() (bool, error) {
		g, err := e.client.Group(e.ctx, "q", "g")
		return err == nil && g.Resize != nil && g.Resize.Cutover != 0 && len(g.Resize.Remaining) == 1 && g.Resize.Remaining[0] == 1, err
	})
	hit("past the cutover, old slot 1 left", []int{1})
	if _, err := e.pool.Exec(e.ctx, `insert into pq_gate values ('resize')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	if _, err := e.client.WaitResize(wctx, "q", "g", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	// Step 3: after the end.
	hit("after the resize", []int{0, 1, 2, 3, 4, 5, 6, 7})
	close(stopSend)
	<-sendDone
	mu.Lock()
	total := 0
	for _, n := range sent {
		total += n
	}
	final := map[string]int{}
	for k, n := range sent {
		final[k] = n
	}
	mu.Unlock()
	e.waitResolved(t, total)
	r := e.check(t, final)
	runs, err := ordercheck.ReadRunLogs([]string{runlog}, died)
	if err != nil {
		t.Fatal(err)
	}
	r = r.WithRuns(runs)
	t.Logf("%s: %s", fault, r)
	if !r.OK() {
		t.Errorf("%s: %s; %s", fault, r, strings.Join(r.Examples, "; "))
	}
	st, err := e.client.Status(e.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Slots != 8 || st.Resize != nil || len(st.SlotStatus) != 8 {
		t.Errorf("after the resize: %d slots, resize %+v, %d slot rows", st.Slots, st.Resize, len(st.SlotStatus))
	}
}

// resizeKilled runs partitionq resize and kills it with SIGKILL at once,
// again until one run's resize is committed (the kill lands before or
// after the commit: either leaves the group consistent).
func resizeKilled(t *testing.T, e *env, bin string) {
	t.Helper()
	// Each try lives longer (up to 4.5 s: a loaded machine starts the
	// command slowly), so the kill lands at every point of its work.
	for i := range 31 {
		cmd := exec.Command(bin, "resize", "--db", e.db.URL, "--queue", "q", "--group", "g", "--slots", "8", "--reason", "killed")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i*i*5) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		g, gerr := e.client.Group(e.ctx, "q", "g")
		if gerr != nil {
			t.Fatalf("the group after a killed resize command: %v", gerr)
		}
		if g.Resize != nil {
			t.Logf("the resize command killed after %d ms (%v): its resize is committed", i*i*5, err)
			return
		}
		if g.Slots != 4 {
			t.Fatalf("a killed resize command left %d slots and no resize", g.Slots)
		}
	}
	t.Fatal("no resize command lived long enough to commit")
}

// keyOfSlot returns a key of slot s of n that the producer does not send.
func keyOfSlot(t *testing.T, e *env, s, n int) string {
	t.Helper()
	for i := 0; ; i++ {
		k := fmt.Sprintf("gated-%d", i)
		got, err := e.client.SlotOf(e.ctx, k, n)
		if err != nil {
			t.Fatal(err)
		}
		if got == s {
			return k
		}
	}
}

// gateWaiting reports whether the run log has a run of key that started
// and has not ended: a handler waiting at its gate.
func gateWaiting(runlog, key string) bool {
	runs, err := ordercheck.ReadRunLogs([]string{runlog}, nil)
	if err != nil {
		return false
	}
	for _, r := range runs {
		if r.Key == key && r.End.IsZero() {
			return true
		}
	}
	return false
}

// ownersAll returns the worker process owning each slot of every
// generation, by slot.
func (e *env) ownersAll(t *testing.T) map[int]int32 {
	return e.owners(t)
}
