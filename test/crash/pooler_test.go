package crash

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// pgbouncer starts a real PgBouncer (Debian package pgbouncer) in pool mode
// mode in front of the test server, for database db, and returns the URL
// of db through it. The test is skipped when PgBouncer is not installed,
// unless CI is set (then .ci/run installs it, and its absence fails).
func pgbouncer(t *testing.T, db pgtest.DB, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, serr := os.Stat(bin); serr != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("PgBouncer is not installed (Debian package pgbouncer; .ci/run installs it)")
			}
			t.Skip("PgBouncer is not installed (apt-get install pgbouncer)")
		}
	}
	server, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pqbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777) // PgBouncer may run as another user (below)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	host := server.Host
	if strings.HasPrefix(host, "/") {
		host = "127.0.0.1"
	}
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%d dbname=%s user=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = %s
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
`, db.Name, host, server.Port, db.Name, server.User, port, dir, mode, dir, dir)
	for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", server.User)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{bin, filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 { // PgBouncer will not run as root
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...) // its output goes to its logfile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // stopped at cleanup
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // runuser and PgBouncer
		<-done
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("PgBouncer's log:\n%s", log)
		}
	})
	url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=simple_protocol", server.User, port, db.Name)
	pgtest.WaitFor(t, 20*time.Second, "PgBouncer to answer", func() (bool, error) {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return false, fmt.Errorf("PgBouncer exited: %s", log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return false, nil
		}
		defer c.Close(ctx)
		return c.Ping(ctx) == nil, nil
	})
	return url
}

// Ownership needs no session of its own, so workers run through PgBouncer
// in transaction mode (where a session-level advisory lock would not follow
// the worker): the worker sees it is pooled, one owner runs each slot, a
// kill -9 of the owner hands its slots to the standby within the lease, and
// nothing is lost, reordered or run twice at once.
func TestThroughPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	url := pgbouncer(t, e.db, "transaction")
	dir := t.TempDir()
	runlogs := []string{filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")}
	args := func(log string) []string {
		return []string{"-db", url, "-slots", "all", "-lease", "1s", "-hold", "300ms", "-runlog", log}
	}
	a := e.start(t, args(runlogs[0])...)
	pgtest.WaitFor(t, 20*time.Second, "A to own all 4 slots", func() (bool, error) {
		o := e.owners(t)
		return len(o) == 4 && o[0] == int32(a.pid()) && o[3] == int32(a.pid()), nil
	})
	b := e.start(t, args(runlogs[1])...)
	// Through a pooler the lease session's server process is not the
	// worker's: it is not recorded (a takeover then waits for the lease alone).
	var unknown int
	if err := e.pool.QueryRow(e.ctx, `select count(*) from partitionq.worker where backend_pid is null and os_pid = any($1)`,
		[]int32{int32(a.pid()), int32(b.pid())}).Scan(&unknown); err != nil || unknown != 2 {
		t.Fatalf("workers seen as pooled: %d of 2 (%v)", unknown, err)
	}
	sent := map[string]int{}
	var evs []sentEvent
	for s := 0; s < 10; s++ {
		for k := 0; k < 12; k++ {
			key := fmt.Sprintf("tenant-%d", k)
			evs = append(evs, sentEvent{key: key, seq: s})
			sent[key] = 10
		}
	}
	e.send(t, evs[:60])
	pgtest.WaitFor(t, 30*time.Second, "A to handle some events", func() (bool, error) { return e.resolved(t) >= 20, nil })
	killedAt := time.Now()
	a.kill()
	pgtest.WaitFor(t, 20*time.Second, "B to take over all 4 slots", func() (bool, error) {
		o := e.owners(t)
		return len(o) == 4 && o[0] == int32(b.pid()) && o[1] == int32(b.pid()) && o[2] == int32(b.pid()) && o[3] == int32(b.pid()), nil
	})
	t.Logf("takeover through PgBouncer (transaction mode) after kill -9: %s", time.Since(killedAt).Round(10*time.Millisecond))
	e.send(t, evs[60:])
	pgtest.WaitFor(t, 60*time.Second, "120 events handled", func() (bool, error) { return e.resolved(t) == 120, nil })
	b.stop(t)
	runs, err := ordercheck.ReadRunLogs(runlogs, map[string]time.Time{strconv.Itoa(a.pid()): killedAt.Add(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.check(t, sent).WithRuns(runs); !r.OK() {
		t.Fatalf("%s: %v", r, r.Examples)
	} else {
		t.Logf("%s", r)
	}
}

// A pooler in statement mode refuses the transactions partitionq needs:
// the worker says so and refuses to start, instead of running unsafely.
func TestPgBouncerStatementModeRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	url := pgbouncer(t, e.db, "statement")
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := partitionq.NewClient(e.ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NewWorker(e.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g",
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(e.ctx)
	if err == nil {
		w.Stop(context.Background())
		t.Fatal("a worker started through a pooler in statement mode")
	}
	for _, want := range []string{"statement mode", "transaction mode"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if !errors.Is(err, partitionq.ErrStatementPooling) {
		t.Errorf("the error is not ErrStatementPooling: %v", err)
	}
}
