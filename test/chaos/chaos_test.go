package chaos_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/chaos"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The short form of the chaos suite: under the pause policy with about 2%
// failing events over 300 keys (plus three keys blocked on purpose), at least
// 20 kill -9 of worker processes, two PostgreSQL restarts (one clean, one by
// crash: pg_ctl -m immediate) and 20 rounds of pg_terminate_backend on the
// workers' sessions. The workers are never told about a restart: they must
// reconnect on their own. Afterwards nothing is lost, no event was handled
// while an earlier event of its key was unresolved, the blocked keys were
// still blocked on the same head after each restart and nothing of theirs
// ran past it, every poison event (and only those, plus the skipped heads)
// is a dead letter, the engine's retry queue and partitionq.failure are
// empty, and the count of repeated deliveries is reported.
//
// PQ_CHAOS_SEED reruns a given seed.
func TestChaos(t *testing.T) {
	cl := needCluster(t)
	cfg := chaos.Config{WorkerBin: workerBin, WorkerLog: workerLog(t), Logf: t.Logf, Engine: pgtest.Engine(t)}
	if s := os.Getenv("PQ_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PQ_CHAOS_SEED: %v", err)
		}
		cfg.Seed = seed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, cl, cfg)
	t.Logf("chaos: %s", rep)
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	if rep.Kills < 12 || rep.Restarts < 2 || rep.Terminations < 12 || rep.TerminatedBackends == 0 {
		t.Fatalf("not enough chaos: %d kills, %d restarts, %d terminations (%d backends)", rep.Kills, rep.Restarts, rep.Terminations, rep.TerminatedBackends)
	}
	if rep.StuckChecks < 2*3 {
		t.Fatalf("the stuck keys were checked %d times across restarts, want 6", rep.StuckChecks)
	}
	if !rep.OK() {
		t.Fatalf("chaos run failed: %s", rep)
	}
}
