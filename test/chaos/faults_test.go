package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/test/chaos"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The fault matrix, short form: every fault real deployments see, done
// twice to a worker that owns slots while its handlers hold events
// for up to 1.2s (longer than a takeover takes: lease 1s), with library
// workers or with `partitionq work --exec` workers (modesOf: each fault
// in both between the two engines). Each run is judged by
// the handlers' runs (start and end), not only by completions: 0 lost, 0
// order violations and 0 overlaps (two runs of one key at once), repeats
// counted and bounded by what can be in flight. The long form is
// `make chaos CHAOS='faults -long'`.
//
// The server's restart would hit every run on the cluster: it runs alone,
// as TestFaultMatrixRestart, with the package's other tests; the other
// faults, and TestFaultsDuringResize's, run at once after those (go
// test's -parallel bounds how many; make test gives the chaos suite 4),
// each in a database of its own.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	faultMatrix(t, false)
}

// TestFaultMatrixRestart is the fault matrix's server restart.
func TestFaultMatrixRestart(t *testing.T) {
	faultMatrix(t, true)
}

// faultMatrix runs the matrix's restart (restart) or its other faults.
func faultMatrix(t *testing.T, restart bool) {
	cl := needCluster(t)
	eachFaultMode(t, chaos.Faults, restart, func(t *testing.T, f chaos.Fault, execMode bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		rep, err := chaos.RunFault(ctx, cl, chaos.FaultConfig{Fault: f, Exec: execMode, WorkerBin: workerBin, ExecBin: cliBin, RunWatchBin: watchBin,
			Engine: pgtest.Engine(t), Dir: runDir(t), WorkerLog: workerLog(t), Logf: t.Logf, Seed: seed(t)})
		t.Logf("%s", rep)
		if err != nil {
			t.Fatalf("fault run: %v", err)
		}
		if rep.Faults < 2 {
			t.Fatalf("only %d faults were done", rep.Faults)
		}
		if !rep.OK() {
			t.Fatalf("%s: %v", rep, rep.Examples)
		}
		switch f {
		case chaos.FaultKill, chaos.FaultPartition:
			// The victim is gone or cut off: its slots move, each time.
			if len(rep.Takeovers) != rep.Faults {
				t.Fatalf("slots moved after %d of %d faults, want all", len(rep.Takeovers), rep.Faults)
			}
		case chaos.FaultTerminateOwner, chaos.FaultTerminateAll, chaos.FaultStop:
			// The owner reconnects and renews within its lease; a paused
			// owner keeps its connection: its slots are not taken. On a
			// loaded 2-core machine one reconnect in a run may take longer
			// than the 1 s lease (then the slots move, fenced: the counts
			// below still hold); more than one is a failure.
			if rep.Kept < rep.Faults-1 {
				t.Fatalf("the owner kept its slots after %d of %d faults, want all but one at most (takeovers %v)", rep.Kept, rep.Faults, rep.Takeovers)
			}
		}
		// What repeats after a fault is what was in flight (slots x
		// concurrency) plus the progress not yet flushed; a margin of
		// as much again for a loaded machine.
		if limit := rep.Faults * 2 * rep.InFlight; rep.Repeats > limit {
			t.Fatalf("%d repeats after %d faults: more than %d (twice what can be in flight per fault)", rep.Repeats, rep.Faults, limit)
		}
	})
}

// eachFaultMode runs run for each fault (with restart, the server's
// restart alone; without, every other), with library workers, with
// --exec workers or both (modesOf), each run in a database of its own.
// The runs go on at once (go test's -parallel bounds how many), except
// the server's restart, which would hit them all.
func eachFaultMode(t *testing.T, faults []chaos.Fault, restart bool, run func(t *testing.T, f chaos.Fault, execMode bool)) {
	for i, f := range faults {
		if (f == chaos.FaultRestart) != restart {
			continue
		}
		t.Run(string(f), func(t *testing.T) {
			if !restart {
				t.Parallel()
			}
			for _, execMode := range modesOf(t, i) {
				mode := "library"
				if execMode {
					mode = "exec"
				}
				t.Run(mode, func(t *testing.T) {
					if !restart {
						t.Parallel()
					}
					run(t, f, execMode)
				})
			}
		})
	}
}

// modesOf returns the worker modes the i-th fault of a matrix runs in
// (false: library workers, true: `partitionq work --exec`). make test
// runs each fault in one mode on each engine: library and --exec
// alternate over the faults, the other way round on PgQue than on PgQ,
// so that its two halves run every fault in both modes between them and
// each half runs every fault and both modes. PQ_CHAOS_MODES=both runs
// both modes on each engine (twice the runs).
func modesOf(t *testing.T, i int) []bool {
	switch m := os.Getenv("PQ_CHAOS_MODES"); m {
	case "both":
		return []bool{false, true}
	case "":
	default:
		t.Fatalf("PQ_CHAOS_MODES=%q: unknown; use both, or leave it unset for one mode per fault and engine", m)
	}
	exec := i%2 == 1
	if pgtest.Engine(t).Name == freshdb.PgQue {
		exec = !exec
	}
	return []bool{exec}
}

// runDir is a run's directory for its logs: PQ_FAULTS_KEEP/<test> when set
// (kept for a post-mortem), else a temporary one.
func runDir(t *testing.T) string {
	keep := os.Getenv("PQ_FAULTS_KEEP")
	if keep == "" {
		return t.TempDir()
	}
	dir := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// seed is PQ_CHAOS_SEED when set (to replay a run), else the clock.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("PQ_CHAOS_SEED"); s != "" {
		var v uint64
		for _, c := range strings.TrimSpace(s) {
			if c < '0' || c > '9' {
				t.Fatalf("PQ_CHAOS_SEED %q is not a number", s)
			}
			v = v*10 + uint64(c-'0')
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// Faults during a resize: the group is resized twice (4 to 8 slots, each
// new slot with one parent; 8 to 3, a shrink whose new slots wait for
// several parents), and each resize is hit 0-500ms after it starts
// by SIGKILL of an owner or pg_terminate_backend of every worker session
// (a server restart too in the long form: chaos faults -resizes 8,3,6
// -fault restart; it adds a minute and a half, run one cell after the
// other), with library workers or with `partitionq work --exec` workers
// (modesOf, as the fault matrix), while keys are blocked and draining.
// Events sent as each resize starts make its cutover tick at once, so that
// most faults hit the old slots' drain and handoff.
// Judged as the fault matrix is (every handler run: 0 lost, 0 order
// violations, 0 overlaps, repeats bounded), and every resize must end.
// The resize's own faults at forced steps (the old slots held back by a
// gated event, the resizing command killed) are test/crash's
// TestResizeUnderFaults.
func TestFaultsDuringResize(t *testing.T) {
	t.Parallel() // with the fault matrix, after the restarts of the package's other tests
	cl := needCluster(t)
	eachFaultMode(t, []chaos.Fault{chaos.FaultKill, chaos.FaultTerminateAll}, false, func(t *testing.T, f chaos.Fault, execMode bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rep, err := chaos.RunFault(ctx, cl, chaos.FaultConfig{Fault: f, Exec: execMode, Resizes: []int{8, 3}, SendDuringResize: true,
			WorkerBin: workerBin, ExecBin: cliBin, RunWatchBin: watchBin,
			Engine: pgtest.Engine(t), Dir: runDir(t), WorkerLog: workerLog(t), Logf: t.Logf, Seed: seed(t)})
		t.Logf("%s", rep)
		if err != nil {
			t.Fatalf("fault run: %v", err)
		}
		if rep.Faults != 2 {
			t.Fatalf("%d faults were done, want 2", rep.Faults)
		}
		if !rep.OK() {
			t.Fatalf("%s: %v", rep, rep.Examples)
		}
		// A fault 0-500ms after its resize starts: the cutover comes
		// with the next tick (10ms) and the old slots' drain takes
		// their handlers' holds (up to 1.2s), so most faults hit a
		// resize in flight; at least one must, or nothing was tested.
		if rep.InFlightHits() == 0 {
			t.Fatalf("no fault hit a resize in flight: %v", rep.ResizeHits)
		}
		if limit := rep.Faults * 2 * rep.InFlight; rep.Repeats > limit {
			t.Fatalf("%d repeats after %d faults: more than %d (twice what can be in flight per fault)", rep.Repeats, rep.Faults, limit)
		}
	})
}
