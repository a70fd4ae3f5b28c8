// The examples in Node.js (examples/node) and Python (examples/python) run
// against a real worker (partitionq work, in this process) and a real
// database: each handler's runs (their starts and ends, which the examples
// log to $RUN_LOG) are judged by internal/ordercheck, and each producer's
// sends are read back from the engine. A test skips, saying why, when node,
// the Node.js modules (npm ci in examples/node) or psycopg
// (apt-get install python3-psycopg) are missing.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/test/pgtest"
)

// python is the interpreter the examples run with: the system's, not a
// version manager's shim on PATH.
const python = "/usr/bin/python3"

// needNode skips without node; modules also needs examples/node's
// node_modules.
func needNode(t *testing.T, modules bool) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the Node.js examples need Node.js 20 or later")
	}
	if modules {
		if _, err := os.Stat(filepath.Join("node", "node_modules", "pg")); err != nil {
			t.Skip("the Node.js modules are not installed: run npm ci in examples/node (CI's .ci/run does)")
		}
	}
	return node
}

// needPython skips without /usr/bin/python3, or without psycopg when
// psycopg is asked for.
func needPython(t *testing.T, psycopg bool) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed: the Python examples need Python 3", python)
	}
	if psycopg {
		if err := exec.Command(python, "-c", "import psycopg").Run(); err != nil {
			t.Skip("psycopg is not installed: apt-get install python3-psycopg (CI's .ci/run does)")
		}
	}
}

// rig is a fresh database with queue files and group indexer of 4 slots.
type rig struct {
	t   *testing.T
	db  pgtest.DB
	ctx context.Context
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, db: pgtest.New(t), ctx: t.Context()}
	r.cli(r.ctx, "setup", "--queue", "files", "--group", "indexer", "--slots", "4", "--tick-max-lag", "20ms")
	return r
}

// cli runs one partitionq command line in this process; it must succeed.
func (r *rig) cli(ctx context.Context, args ...string) string {
	r.t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(ctx, args, cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return r.db.URL
			}
			return ""
		}})
	if code != cli.ExitOK {
		r.t.Fatalf("partitionq %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String()
}

// event is one event of the queue, as the engine holds it.
type event struct {
	id      int64
	key     string
	seq     int // its place among its key's events, from 0
	typ     string
	payload string
}

// events reads the queue's events, in order.
func (r *rig) events() map[int64]event {
	r.t.Helper()
	conn, err := pgx.Connect(r.ctx, r.db.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var table string
	if err := conn.QueryRow(r.ctx, r.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = 'files'`)).Scan(&table); err != nil {
		r.t.Fatal(err)
	}
	rows, err := conn.Query(r.ctx, `select ev_id, ev_extra1, ev_type, ev_data from `+table+` order by ev_id`)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[int64]event{}
	seqs := map[string]int{}
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.id, &e.key, &e.typ, &e.payload); err != nil {
			r.t.Fatal(err)
		}
		e.seq = seqs[e.key]
		seqs[e.key]++
		out[e.id] = e
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// deadLetters reads the group's dead letters' event ids.
func (r *rig) deadLetters() []int64 {
	r.t.Helper()
	conn, err := pgx.Connect(r.ctx, r.db.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(r.ctx, `select ev_id from partitionq.dead_letter order by ev_id`)
	if err != nil {
		r.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		r.t.Fatal(err)
	}
	return ids
}

// send sends the handler tests' events through partitionq.send: 6 tenants
// of 8 file events, then a payload that is not JSON for one tenant (a dead
// letter at once) and, for another, one without a path (a failure, on
// every attempt: a dead letter after --max-attempts).
func (r *rig) send() {
	r.t.Helper()
	conn, err := pgx.Connect(r.ctx, r.db.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	send := func(key, typ, payload string) {
		if _, err := conn.Exec(r.ctx, `select * from partitionq.send('files', $1, $2, $3)`, key, typ, payload); err != nil {
			r.t.Fatal(err)
		}
	}
	for n := range 8 {
		for k := range 6 {
			send(fmt.Sprintf("tenant-%d", k), "FileCreated", fmt.Sprintf(`{"path":"/f%d","n":%d}`, n, n))
		}
	}
	send("tenant-1", "FileCreated", "not json")
	send("tenant-2", "FileDeleted", `{"n":8}`)
	send("tenant-1", "FileCreated", `{"path":"/after","n":9}`)
	send("tenant-2", "FileCreated", `{"path":"/after","n":9}`)
}

// work runs partitionq work with the handler flags until the test ends.
func (r *rig) work(handler ...string) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		args := append([]string{"work", "--queue", "files", "--group", "indexer", "--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms",
			"--max-attempts", "3", "--backoff-min", "50ms", "--backoff-max", "100ms", "--shutdown-timeout", "5s"}, handler...)
		code := cli.Main(ctx, args, cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return r.db.URL
				}
				return ""
			}})
		done <- fmt.Sprintf("exit %d\n%s%s", code, out.String(), errb.String())
	}()
	r.t.Cleanup(func() {
		cancel()
		select {
		case res := <-done:
			if !strings.HasPrefix(res, "exit 0\n") {
				r.t.Errorf("partitionq work: %s", res)
			}
		case <-time.After(60 * time.Second):
			r.t.Error("partitionq work did not stop within 60s")
		}
	})
}

// judge waits until every event is handled or dead, then judges the run
// log of the example's handler: nothing lost, every tenant in order, no
// two runs of a tenant at once. It returns the dead letters' events.
func (r *rig) judge(runLog string, wantDead int) []event {
	r.t.Helper()
	evs := r.events()
	deadline := time.Now().Add(90 * time.Second)
	for {
		done := map[int64]bool{}
		for _, l := range readLines(r.t, runLog) {
			if f := strings.Fields(l); len(f) == 4 && f[0] == "end" && f[1] == "done" {
				id, _ := strconv.ParseInt(f[2], 10, 64)
				done[id] = true
			}
		}
		if len(done)+len(r.deadLetters()) >= len(evs) {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after 90s: %d of %d events handled, %d dead letters", len(done), len(evs), len(r.deadLetters()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	type timed struct {
		h  ordercheck.Handling
		ns int64
	}
	var hs []timed
	var runs []ordercheck.Run
	open := map[int64]int{}
	for _, l := range readLines(r.t, runLog) {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		id, _ := strconv.ParseInt(f[len(f)-2], 10, 64)
		ns, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		e, ok := evs[id]
		if !ok {
			r.t.Fatalf("the run log names event %d, which was not sent: %q", id, l)
		}
		switch f[0] {
		case "start":
			open[id] = len(runs)
			runs = append(runs, ordercheck.Run{Key: e.key, Seq: e.seq, Worker: "example", Start: time.Unix(0, ns)})
		case "end":
			if i, ok := open[id]; ok {
				runs[i].End = time.Unix(0, ns)
				delete(open, id)
			}
			hs = append(hs, timed{ordercheck.Handling{Key: e.key, Seq: e.seq, OK: f[1] == "done"}, ns})
		}
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].ns < hs[j].ns })
	var log []ordercheck.Handling
	for _, h := range hs {
		log = append(log, h.h)
	}
	sent := map[string]int{}
	for _, e := range evs {
		sent[e.key]++
	}
	dead := map[string][]int{}
	var deadEvs []event
	for _, id := range r.deadLetters() {
		dead[evs[id].key] = append(dead[evs[id].key], evs[id].seq)
		deadEvs = append(deadEvs, evs[id])
	}
	rep := ordercheck.Check(sent, log, dead).WithRuns(runs)
	r.t.Logf("%s", rep)
	if !rep.OK() || rep.Dead != wantDead || rep.Handled != len(evs)-wantDead {
		r.t.Errorf("%s; want %d handled, %d dead\n%s", rep, len(evs)-wantDead, wantDead, strings.Join(rep.Examples, "\n"))
	}
	return deadEvs
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// startHTTP starts an example's HTTP handler on a free port and returns
// its URL; it is stopped when the test ends.
func startHTTP(t *testing.T, runLog string, command ...string) string {
	t.Helper()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), "PORT=0", "RUN_LOG="+runLog)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "listening on ") {
		t.Fatalf("%s did not say where it listens: %q, %v", strings.Join(command, " "), lines.Text(), lines.Err())
	}
	url := strings.TrimPrefix(lines.Text(), "listening on ")
	go func() { // what it prints per event
		for lines.Scan() {
		}
	}()
	return url
}

// checkDead checks the dead letters of the handler tests' events: the
// payload that is not JSON (at once) and the one without a path (out of
// attempts).
func checkDead(t *testing.T, dead []event) {
	t.Helper()
	var got []string
	for _, e := range dead {
		got = append(got, e.key+" "+e.payload)
	}
	sort.Strings(got)
	if want := []string{"tenant-1 not json", `tenant-2 {"n":8}`}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("dead letters %q, want %q", got, want)
	}
}

func TestNodeHTTPHandler(t *testing.T) {
	t.Parallel()
	node := needNode(t, false)
	r := newRig(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	url := startHTTP(t, runLog, node, filepath.Join("node", "http-handler.js"))
	r.send()
	r.work("--http", url)
	checkDead(t, r.judge(runLog, 2))
}

func TestNodePipeHandler(t *testing.T) {
	t.Parallel()
	node := needNode(t, false)
	r := newRig(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	script, err := filepath.Abs(filepath.Join("node", "pipe-handler.js"))
	if err != nil {
		t.Fatal(err)
	}
	r.send()
	r.work("--pipe", fmt.Sprintf("RUN_LOG='%s' exec '%s' '%s'", runLog, node, script))
	checkDead(t, r.judge(runLog, 2))
}

func TestPythonHTTPHandler(t *testing.T) {
	t.Parallel()
	needPython(t, false)
	r := newRig(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	url := startHTTP(t, runLog, python, filepath.Join("python", "http_handler.py"))
	r.send()
	r.work("--http", url)
	checkDead(t, r.judge(runLog, 2))
}

func TestPythonPipeHandler(t *testing.T) {
	t.Parallel()
	needPython(t, false)
	r := newRig(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	script, err := filepath.Abs(filepath.Join("python", "pipe_handler.py"))
	if err != nil {
		t.Fatal(err)
	}
	r.send()
	r.work("--pipe", fmt.Sprintf("RUN_LOG='%s' exec %s '%s'", runLog, python, script))
	checkDead(t, r.judge(runLog, 2))
}

// A producer's sends, read back from the engine: three tenants' three file
// events, in order, each once; a second run sends duplicates only.
func checkProducer(t *testing.T, r *rig, run func() string) {
	t.Helper()
	first := run()
	if n := strings.Count(first, ": event "); n != 9 || strings.Contains(first, "duplicate") {
		t.Fatalf("the producer's first run:\n%s\nwant 9 events sent, none a duplicate", first)
	}
	second := run()
	if n := strings.Count(second, "(a duplicate: sent before)"); n != 9 {
		t.Fatalf("the producer's second run:\n%s\nwant 9 duplicates", second)
	}
	if first != strings.ReplaceAll(second, " (a duplicate: sent before)", "") {
		t.Errorf("the duplicates do not name the first run's events:\n%s\n%s", first, second)
	}
	evs := r.events()
	if len(evs) != 9 {
		t.Fatalf("%d events in the queue, want 9", len(evs))
	}
	for _, e := range evs {
		var p struct {
			Path string `json:"path"`
			N    int    `json:"n"`
		}
		if err := json.Unmarshal([]byte(e.payload), &p); err != nil || p.N != e.seq || p.Path != "/report.pdf" {
			t.Errorf("event %d of %s: %q (seq %d)", e.id, e.key, e.payload, e.seq)
		}
		if want := []string{"FileCreated", "FileOverwritten", "FileDeleted"}[e.seq]; e.typ != want {
			t.Errorf("event %d of %s is a %s, want %s", e.id, e.key, e.typ, want)
		}
	}
}

func TestNodeProducer(t *testing.T) {
	t.Parallel()
	node := needNode(t, true)
	r := newRig(t)
	checkProducer(t, r, func() string {
		cmd := exec.Command(node, filepath.Join("node", "producer.js"), "files")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+r.db.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node producer.js: %v\n%s", err, out)
		}
		return string(out)
	})
}

func TestPythonProducer(t *testing.T) {
	t.Parallel()
	needPython(t, true)
	r := newRig(t)
	checkProducer(t, r, func() string {
		cmd := exec.Command(python, filepath.Join("python", "producer.py"), "files")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+r.db.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 producer.py: %v\n%s", err, out)
		}
		return string(out)
	})
}
