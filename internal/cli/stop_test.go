package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// kubernetesGrace is Kubernetes' default terminationGracePeriodSeconds:
// the time between SIGTERM and SIGKILL.
const kubernetesGrace = 30 * time.Second

// stopBound is how long `work` takes at most from SIGTERM to its exit, the
// release of its slots included, as docs/cli.md states it.
func stopBound(shutdownTimeout time.Duration) time.Duration { return shutdownTimeout + 10*time.Second }

// ownedSlots counts the slots of q/g that the database says a worker owns.
func ownedSlots(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `select count(*) from partitionq.slot where queue = 'q' and grp = 'g' and worker_id is not null`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startBinaryWork starts the partitionq binary's work on q/g with url as
// DATABASE_URL; it is killed at cleanup if still running. exited receives
// its end.
func startBinaryWork(t *testing.T, url string, stderr *pgtest.SyncBuffer, args ...string) (cmd *exec.Cmd, exited chan error) {
	t.Helper()
	cmd = exec.Command(binary(t), with(qg, append([]string{"work"}, args...)...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() }) // already gone on success
	return cmd, exited
}

// With the default --shutdown-timeout, a worker whose command outlives it
// releases its slots, and exits, within Kubernetes' default grace period
// after SIGTERM: the command gets the shutdown timeout, then it is killed
// and the slots are released at once. Meanwhile the worker is live and not
// ready. The default's bound is checked against the grace period; the run
// itself gives the command 3 s (the default's 20 s would only wait longer).
func TestBinaryWorkReleasesItsSlotsWithinTheGracePeriod(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	if def := partitionq.ShutdownTimeoutDefault; stopBound(def) > kubernetesGrace {
		t.Fatalf("work stops within %s with the default --shutdown-timeout (%s): more than Kubernetes' default grace period (%s)",
			stopBound(def), def, kubernetesGrace)
	}
	const timeout = 3 * time.Second
	h := newHarness(t)
	h.setup(2)
	pool := pgtest.Pool(t, h.db, 2)
	dir := t.TempDir()
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "x")
	var stderr pgtest.SyncBuffer
	cmd, exited := startBinaryWork(t, h.url, &stderr, "--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms",
		"--handler-timeout", "0", "--shutdown-timeout", timeout.String(), "--metrics-addr", "127.0.0.1:0",
		"--exec", fmt.Sprintf(`touch '%s/started'; exec sleep 600`, dir))
	livez, readyz := probeURLs(t, &stderr)
	waitFor(t, 30*time.Second, "the command running, both slots owned", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil && ownedSlots(t, pool) == 2
	})

	sent := time.Now() // before the signal: the times measured from it are upper bounds
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "/readyz answering 503 once stopping", func() bool {
		c, b := probeGet(readyz)
		return c == 503 && strings.Contains(b, "stopping")
	})
	if c, b := probeGet(livez); c != 200 {
		t.Errorf("/livez answered %d %q while the worker stops", c, b)
	}
	waitFor(t, kubernetesGrace+10*time.Second, "both slots released", func() bool { return ownedSlots(t, pool) == 0 })
	released := time.Since(sent)
	var exit error
	select {
	case exit = <-exited:
	case <-time.After(kubernetesGrace + 10*time.Second - time.Since(sent)):
		t.Fatalf("work has not exited %s after SIGTERM:\n%s", time.Since(sent), stderr.String())
	}
	ended := time.Since(sent)
	t.Logf("SIGTERM, then the slots released after %s, the process gone after %s (--shutdown-timeout %s)", released, ended, timeout)
	if exit != nil {
		t.Errorf("work after SIGTERM: %v\n%s", exit, stderr.String())
	}
	if released < timeout {
		t.Errorf("the slots were released %s after SIGTERM, before the command's %s were up", released, timeout)
	}
	if released > stopBound(timeout) || ended > stopBound(timeout) {
		t.Errorf("released after %s, exited after %s: more than --shutdown-timeout + 10s (%s)", released, ended, stopBound(timeout))
	}
}

// When the database freezes, the stop cannot record or release anything;
// work exits within --shutdown-timeout + 10s all the same (its slots then
// move when its lease runs out).
func TestBinaryWorkStopIsBoundedWhenTheDatabaseFreezes(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	pool := pgtest.Pool(t, h.db, 2)
	px, url := netproxy.Front(t, h.url, "connect_timeout", "1")
	const timeout = time.Second
	var stderr pgtest.SyncBuffer
	cmd, exited := startBinaryWork(t, url, &stderr, "--poll-interval", "10ms", "--shutdown-timeout", timeout.String(), "--exec", "true")
	waitFor(t, 30*time.Second, "both slots owned", func() bool { return ownedSlots(t, pool) == 2 })
	px.Freeze()
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(stopBound(timeout) + 5*time.Second):
		t.Fatalf("work has not exited %s after SIGTERM with the database frozen (--shutdown-timeout %s):\n%s", time.Since(sent), timeout, stderr.String())
	}
	t.Logf("exited %s after SIGTERM", time.Since(sent))
	if !strings.Contains(stderr.String(), "worker stopped; per slot") {
		t.Errorf("no stats at exit:\n%s", stderr.String())
	}
}
