package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/chaos"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The balance matrix, short form (chaos.RunBalance): identical worker
// processes, library workers or `partitionq work --exec` workers, share a
// group's slots through joins, a SIGKILL, a SIGTERM, a rolling restart of
// all of them with a resize from 8 to 16 slots in its midst, and a steady
// membership, while a producer sends and 2% of the events fail. After each
// step every worker owns the floor or the ceil of N over their number
// within the step's bound (stretched by half for a loaded machine: the
// long form holds the stated bounds); the handler runs show 0 lost, 0 order
// violations and 0 overlaps, graceful moves repeat nothing, the kill at
// most what was in flight, and nothing moves while the membership is
// steady. The long form is `make chaos CHAOS='balance -long'`.
func TestBalanceMatrix(t *testing.T) {
	cl := needCluster(t)
	// One mode per engine in make test (modesOf: --exec on PgQ, library
	// workers on PgQue), both with PQ_CHAOS_MODES=both.
	for _, execMode := range modesOf(t, 1) {
		mode := "library"
		if execMode {
			mode = "exec"
		}
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			rep, err := chaos.RunBalance(ctx, cl, chaos.BalanceConfig{Exec: execMode, WorkerBin: workerBin, ExecBin: cliBin, RunWatchBin: watchBin,
				Engine: pgtest.Engine(t), Dir: runDir(t), WorkerLog: workerLog(t), Logf: t.Logf, Seed: seed(t), Slack: 1.5})
			t.Logf("%s", rep)
			if err != nil {
				t.Fatalf("balance run: %v", err)
			}
			if !rep.OK() {
				t.Fatalf("%s: %v", rep, rep.Examples)
			}
			for _, reason := range []string{"join", "leave", "crash", "resize"} {
				if rep.Moves[reason] == 0 {
					t.Errorf("no slot moved for reason %q: the run did not do what it says (%v)", reason, rep.Moves)
				}
			}
		})
	}
}
