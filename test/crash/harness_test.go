// Package crashtest proves the guarantees that only hold across processes:
// exclusive slot ownership, and order and completeness when workers are
// killed with SIGKILL at random. Workers are separate processes
// (test/cmd/testworker) on the real PostgreSQL with the real PgQ.
package crash

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pqcrash")
	if err != nil {
		panic(err)
	}
	workerBin = filepath.Join(dir, "testworker")
	goBin := "go"
	build := exec.Command(goBin, "build", "-o", workerBin, "../cmd/testworker")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build testworker:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const logDDL = `create table pq_run_log (
	id bigserial primary key, key text not null, seq int not null, attempt int not null,
	ok bool not null, pid int not null, at timestamptz not null default clock_timestamp());
create table pq_gate (name text primary key)`

type env struct {
	db     pgtest.DB
	pool   *pgxpool.Pool
	client *partitionq.Client
	ctx    context.Context
	logs   string // each worker's log, worker-<pid>.log, kept when the test fails
}

func newEnv(t *testing.T, slots int) *env {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 10) // beside 3 workers that own slots (each some 15 connections), two tests at a time
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: slots, TickMaxLag: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, logDDL); err != nil {
		t.Fatal(err)
	}
	logs, err := os.MkdirTemp("", "pqcrash-logs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the workers' logs are kept in %s", logs)
			return
		}
		os.RemoveAll(logs)
	})
	return &env{db: db, pool: pool, client: c, ctx: ctx, logs: logs}
}

// proc is a worker process.
type proc struct {
	cmd  *exec.Cmd
	args []string
	done chan struct{}
}

// start starts a worker process and waits until it is running.
func (e *env) start(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(workerBin, append([]string{"-db", e.db.URL}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Each worker logs to its own file: the tests of this package run at
	// once, and one stream of every worker's lines tells nothing.
	logf, err := os.CreateTemp(e.logs, "worker-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	os.Rename(logf.Name(), filepath.Join(e.logs, fmt.Sprintf("worker-%d.log", cmd.Process.Pid))) // the name is a convenience
	p := &proc{cmd: cmd, args: args, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait() // killed on purpose
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("worker %v exited before it was ready", args)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %v not ready after 30s", args)
	}
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM (a graceful stop) and waits for the process to end.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("worker %d did not stop within 30s of SIGTERM", p.pid())
		p.kill()
	}
}

type sentEvent struct {
	key  string
	seq  int
	f    int
	gate string // the handler waits for this gate (testworker's "g")
}

// send sends events in one batch, payloads as the testworker expects.
func (e *env) send(t *testing.T, evs []sentEvent) {
	t.Helper()
	ms := make([]partitionq.Message, len(evs))
	for i, ev := range evs {
		m := map[string]any{"k": ev.key, "s": ev.seq, "f": ev.f}
		if ev.gate != "" {
			m["g"] = ev.gate
		}
		p, _ := json.Marshal(m)
		ms[i] = partitionq.Message{Key: ev.key, Type: "FileCreated", Payload: p}
	}
	if _, err := e.client.SendBatch(e.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
}

// resolved counts distinct events handled successfully plus dead letters.
func (e *env) resolved(t *testing.T) int {
	t.Helper()
	var n int
	err := e.pool.QueryRow(e.ctx, `select (select count(*) from (select distinct key, seq from pq_run_log where ok) h)
		+ (select count(*) from partitionq.dead_letter)`).Scan(&n)
	if err != nil && strings.Contains(err.Error(), "dead_letter") {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitResolved waits until total events are resolved, failing when none
// more was resolved for 30 s (a stall, whatever the machine's load).
func (e *env) waitResolved(t *testing.T, total int) {
	t.Helper()
	last, moved := e.resolved(t), time.Now()
	for last < total {
		if time.Since(moved) > 30*time.Second {
			t.Fatalf("%d of %d events resolved, none more for 30s", last, total)
		}
		time.Sleep(50 * time.Millisecond)
		if n := e.resolved(t); n > last {
			last, moved = n, time.Now()
		}
	}
}

// check runs the shared order checker over the run log and dead letters.
func (e *env) check(t *testing.T, sent map[string]int) ordercheck.Report {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `select key, seq, ok from pq_run_log order by id`)
	if err != nil {
		t.Fatal(err)
	}
	var log []ordercheck.Handling
	for rows.Next() {
		var h ordercheck.Handling
		if err := rows.Scan(&h.Key, &h.Seq, &h.OK); err != nil {
			t.Fatal(err)
		}
		log = append(log, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	dead := map[string][]int{}
	drows, err := e.pool.Query(e.ctx, `select key, (ev_data::json->>'s')::int from partitionq.dead_letter`)
	if err != nil {
		t.Fatal(err)
	}
	for drows.Next() {
		var k string
		var s int
		if err := drows.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		dead[k] = append(dead[k], s)
	}
	if err := drows.Err(); err != nil {
		t.Fatal(err)
	}
	return ordercheck.Check(sent, log, dead)
}

func (e *env) owners(t *testing.T) map[int]int32 {
	t.Helper()
	st, err := e.client.Status(e.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int32{}
	for _, s := range st.SlotStatus {
		if s.Owner != nil {
			var pid int32
			fmt.Sscanf(strings.TrimPrefix(s.Owner.Name, "testworker:"), "%d", &pid)
			out[s.Slot] = pid
		}
	}
	return out
}
