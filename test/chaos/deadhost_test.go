package chaos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/test/chaos"
	"github.com/partitionq/partitionq/test/pgtest"
)

// A host that vanishes (its packets dropped for real: a worker in a network
// namespace whose link goes down, its process alive, its sessions open on
// the server) loses its slots within its DeadHostTimeout, with no server
// configuration: the worker's sessions set their own TCP keepalives, so the
// server ends them, and a standby takes the slots; no event is lost, run
// out of order or run twice at once. The control run, with the server's
// settings, shows the sessions staying. Needs root (the test skips,
// saying so, without it).
func TestDeadHostMovesItsSlots(t *testing.T) {
	const lease, deadHost = time.Second, 4 * time.Second
	run := func(t *testing.T, deadHost, watch time.Duration) chaos.DeadHostReport {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		rep, err := chaos.RunDeadHost(ctx, chaos.DeadHostConfig{WorkerBin: workerBin, Engine: pgtest.Engine(t), Lease: lease,
			DeadHost: deadHost, Watch: watch, Dir: t.TempDir(), WorkerLog: workerLog(t), Logf: t.Logf})
		if errors.Is(err, chaos.ErrNoNetns) {
			t.Skipf("%v: the dead-host test needs them", err)
		}
		t.Logf("%s", rep)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	t.Run("control: the server's settings", func(t *testing.T) {
		if pgtest.Engine(t).Name != freshdb.PgQ {
			t.Skip("the control is the engine's no more than PgQ's: run once, in the PgQ half")
		}
		// Without the worker's timeouts the server keeps a silent peer's
		// sessions for as long as its keepalives allow (hours by default):
		// still there well past the bound.
		if rep := run(t, -1, deadHost+5*time.Second); rep.Gone != 0 {
			t.Fatalf("the vanished worker's sessions ended after %s without its timeouts: the test does not drop its packets", rep.Gone)
		}
	})
	t.Run("the worker's timeouts", func(t *testing.T) {
		rep := run(t, deadHost, 0)
		// The kernel ends the connections within the bound (plus a
		// probe's second and the poll): that is what the worker's settings
		// decide. The server's processes notice a moment later (seconds on
		// a machine loaded by the rest of the suite), and the slots move
		// once the lease has expired too and a standby looks.
		if limit := deadHost + 3*time.Second; rep.Dropped > limit {
			t.Errorf("the kernel ended the vanished worker's connections after %s, want within %s", rep.Dropped, limit)
		}
		const notice = 5 * time.Second
		if rep.Gone > rep.Dropped+notice {
			t.Errorf("the server ended the vanished worker's sessions %s after the kernel ended their connections, want within %s", rep.Gone-rep.Dropped, notice)
		}
		if limit := max(rep.Gone, deadHost) + lease + 3*time.Second; rep.Moved > limit {
			t.Errorf("the slots moved after %s, want within %s (the sessions' end, the lease and a standby's look)", rep.Moved, limit)
		}
		if !rep.OK() {
			t.Errorf("%s: %v", rep.Report, rep.Examples)
		}
	})
}
