package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/cmd/pqbench/internal/bench"
	"github.com/partitionq/partitionq/test/pgtest"
)

// TestShortBench runs the benchmark's short form end to end, so that it
// cannot rot: every system it measures must handle every event, and
// partitionq, the plain consumer and the limits must keep per-key order. It
// asserts correctness, never speed. The peers (pg-boss, graphile-worker)
// run when npm ci works in bench/peers; their order violations are
// measurements (graphile-worker lets later jobs overtake a failed one by
// design; pg-boss's bulk insert ties creation times), so only their
// completeness is asserted. With the tests on PgQue (PARTITIONQ_ENGINE), the
// producer and W1 also run on PgQue, partitionq and the plain consumer alike.
func TestShortBench(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin := pgtest.AdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("PARTITIONQ_REQUIRE_DB") != "" {
			t.Fatalf("no test database server at %s: %v (run scripts/devdb.sh)", admin, err)
		}
		t.Skipf("no test database server at %s: %v (run `make test`, which brings one up)", admin, err)
	}
	conn.Close(ctx)

	cfg := bench.Short()
	cfg.AdminURL = admin
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	cfg.DBPrefix = "pqbench_t" + hex.EncodeToString(suffix)
	cfg.Out = t.TempDir()
	cfg.PeersDir = filepath.Join("..", "..", "bench", "peers")
	if eng := pgtest.Engine(t); eng.Name == "pgque" {
		cfg.Engines, cfg.PgQueSQL = []string{"pgq", "pgque"}, eng.SQLFile
	}

	rep, err := bench.Run(ctx, cfg, testLog{t})
	if err != nil {
		t.Fatalf("bench.Run: %v", err)
	}
	t.Logf("report:\n%s", rep.Text())

	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Workload+" "+r.System] = true
		if r.Engine == "pgque" {
			seen[r.Workload+" "+r.System+" on PgQue"] = true
		}
		if r.Err != "" {
			t.Errorf("%s %s %s: %s", r.Workload, r.System, r.Config, r.Err)
			continue
		}
		if r.Workload == "idle" {
			// At rest: measured, never judged here; the worker must have
			// been connected while it was counted.
			if r.Idle == nil || r.Idle.Conns == 0 {
				t.Errorf("idle %s: no at-rest measurement, or no connection of the worker seen: %+v", r.Config, r.Idle)
			}
			continue
		}
		if !r.Checked {
			continue
		}
		if r.System == bench.SysPartitionq && r.Workload == "W1" && r.PeakConns == 0 {
			t.Errorf("W1 %s: no connection of the worker seen while it ran", r.Config)
		}
		if r.Check.Lost != 0 || r.Check.Handled != r.Check.Sent {
			t.Errorf("%s %s %s: not complete: %s", r.Workload, r.System, r.Config, r.Check)
		}
		switch r.System {
		case bench.SysPartitionq, bench.SysBaseline, bench.SysLimit:
			if r.Check.Violations != 0 || r.Overlaps != 0 {
				t.Errorf("%s %s %s: per-key order broken: %s, overlaps %d; examples: %s",
					r.Workload, r.System, r.Config, r.Check, r.Overlaps, strings.Join(r.Check.Examples, "; "))
			}
		}
	}
	want := []string{"producer partitionq", "producer limit", "latency partitionq", "idle partitionq"}
	for _, w := range []string{"W1", "W2", "W3"} {
		want = append(want, w+" "+bench.SysPartitionq, w+" "+bench.SysBaseline, w+" "+bench.SysLimit)
	}
	if len(cfg.Engines) == 2 {
		want = append(want, "producer partitionq on PgQue", "W1 "+bench.SysPartitionq+" on PgQue", "W1 "+bench.SysBaseline+" on PgQue")
		if !strings.Contains(rep.Text(), "## W1 on PgQue") {
			t.Errorf("the report has no table of W1 on PgQue")
		}
	}
	if rep.PeersSkipped == "" {
		want = append(want, "W2 "+bench.SysPgBoss, "W2 "+bench.SysGraphile)
	} else {
		t.Logf("peers skipped: %s", rep.PeersSkipped)
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("the report has no %s run", w)
		}
	}
	// W1's runs: the N sweep, the slots split over workers, the variants.
	kinds := map[string]bool{}
	for _, r := range rep.Results {
		if r.Workload == "W1" && r.System == bench.SysPartitionq && r.Engine == "pgq" {
			kinds[fmt.Sprintf("workers=%d variant=%q", r.Workers, r.Variant)] = true
		}
	}
	for _, k := range []string{`workers=1 variant=""`, fmt.Sprintf(`workers=%d variant=""`, cfg.MultiWorkers),
		`workers=1 variant="TxHandler"`, `workers=1 variant="DisableProgress"`} {
		if !kinds[k] {
			t.Errorf("W1 has no partitionq run with %s (has %v)", k, kinds)
		}
	}
	// W3's runs: drains raised to c (docs/tuning.md), and the last
	// configuration again with the worker's default.
	var tuned, dflt int
	for _, r := range rep.Results {
		if r.Workload == "W3" && r.System == bench.SysPartitionq {
			if strings.HasSuffix(r.Config, fmt.Sprintf(", %d drains", r.Conc)) {
				tuned++
			} else {
				dflt++
			}
		}
	}
	if tuned != len(cfg.W3Matrix) || dflt != 1 {
		t.Errorf("W3 has %d partitionq runs with drains = c and %d with the default; want %d and 1", tuned, dflt, len(cfg.W3Matrix))
	}
	for _, f := range []string{"results.json", "results.md", "w2.svg", "nsweep.svg", "latency.svg"} {
		if st, err := os.Stat(filepath.Join(cfg.Out, f)); err != nil || st.Size() == 0 {
			t.Errorf("output %s missing or empty: %v", f, err)
		}
	}
	if bad := rep.Failures(); len(bad) > 0 {
		t.Errorf("failures: %s", strings.Join(bad, "; "))
	}
}

// testLog sends the bench's progress to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
