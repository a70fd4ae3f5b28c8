package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The three kinds of handler of partitionq work (--exec, --http, --pipe),
// each a real process or server, judged by the start and end of every
// handler run (handlerroles_test.go) with internal/ordercheck.

var handlerModes = []string{"exec", "http", "pipe"}

// handlerRig is one handler test: a fresh database with queue q and group g,
// a run log, a hang flag (a file: handlers that hang run while it exists)
// and, for --http, the test's server.
type handlerRig struct {
	t      *testing.T
	h      *harness
	mode   string
	dir    string
	runLog string
	hang   string
	srv    *testServer
	sent   map[string]int // events sent per key (seqs 0, 1, ...)
}

func newRig(t *testing.T, mode string, slots int) *handlerRig {
	t.Helper()
	h := newHarness(t)
	h.setup(slots)
	dir := rigDir(t)
	r := &handlerRig{t: t, h: h, mode: mode, dir: dir, runLog: filepath.Join(dir, "runs.log"),
		hang: filepath.Join(dir, "hang"), sent: map[string]int{}}
	r.setHang(true)
	if mode == "http" {
		r.srv = newTestServer(t, r.runLog, r.hang)
	}
	return r
}

// rigDir makes the rig's directory (the run log, the hang file), removed
// at the test's end. Not t.TempDir: its removal fails the test at once
// when a file appears during it, and a handler process killed at the
// worker's stop may append its last line to the run log a moment after
// its group was killed (seen once on a machine under full load). The removal
// is tried again for 2 s; a file still appearing after that is a handler
// process that outlived its worker, and fails the test.
func rigDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pqrig-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				left, _ := os.ReadDir(dir)
				var names []string
				for _, e := range left {
					names = append(names, e.Name())
				}
				t.Errorf("removing the rig's directory: %v (still written 2s after the worker stopped: %v)", err, names)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}

// setHang makes handlers that hang run on (true) or end (false).
func (r *handlerRig) setHang(on bool) {
	r.t.Helper()
	if on {
		if err := os.WriteFile(r.hang, nil, 0o644); err != nil {
			r.t.Fatal(err)
		}
	} else if err := os.Remove(r.hang); err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
}

// handlerArgs are the work flags of the rig's handler.
func (r *handlerRig) handlerArgs() []string {
	switch r.mode {
	case "exec":
		return []string{"--exec", r.roleCmd("exec")}
	case "pipe":
		return []string{"--pipe", r.roleCmd("pipe")}
	}
	return []string{"--http", r.srv.URL + "/events"}
}

// roleCmd is the shell command that runs this test binary as role.
func (r *handlerRig) roleCmd(role string) string {
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	return fmt.Sprintf("%s=%s PQTEST_RUNLOG='%s' PQTEST_HANG='%s' exec '%s'", roleEnv, role, r.runLog, r.hang, self)
}

// work starts a worker with the rig's handler and more flags.
func (r *handlerRig) work(args ...string) *worker {
	r.t.Helper()
	return r.h.startWork(append(r.handlerArgs(), append([]string{"--shutdown-timeout", "2s"}, args...)...)...)
}

// send sends events to key, one per do, with seqs continuing the key's.
func (r *handlerRig) send(key string, dos ...string) {
	r.t.Helper()
	var in strings.Builder
	for _, do := range dos {
		p, _ := json.Marshal(testPayload{Seq: r.sent[key], Do: do})
		fmt.Fprintf(&in, `{"key":%q,"type":"Test","payload":%s}`+"\n", key, p)
		r.sent[key]++
	}
	if res := r.h.runStdin(in.String(), "send", "--queue", "q"); res.code != cli.ExitOK {
		r.t.Fatal(res)
	}
}

// records is what the run log says.
type records struct {
	runs      []ordercheck.Run
	handlings []ordercheck.Handling // in the order they happened
	workers   map[string]bool       // every worker (handler process) named
	okSeen    map[string]map[int]bool
}

// read parses the run log.
func (r *handlerRig) read() records {
	r.t.Helper()
	died := map[string]time.Time{}
	type timed struct {
		h  ordercheck.Handling
		ns int64
	}
	var hs []timed
	rec := records{workers: map[string]bool{}, okSeen: map[string]map[int]bool{}}
	f, err := os.Open(r.runLog)
	if err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
	if f != nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "D "):
				var w string
				var ns int64
				if _, err := fmt.Sscanf(l, "D %s %d", &w, &ns); err == nil {
					died[w] = time.Unix(0, ns)
				}
			case strings.HasPrefix(l, "H "):
				q, err := strconv.QuotedPrefix(l[2:])
				if err != nil {
					continue
				}
				key, _ := strconv.Unquote(q)
				f := strings.Fields(l[2+len(q):])
				if len(f) != 4 {
					continue
				}
				seq, _ := strconv.Atoi(f[0])
				ns, _ := strconv.ParseInt(f[3], 10, 64)
				hs = append(hs, timed{ordercheck.Handling{Key: key, Seq: seq, OK: f[1] == "ok"}, ns})
				rec.workers[f[2]] = true
				if f[1] == "ok" {
					if rec.okSeen[key] == nil {
						rec.okSeen[key] = map[int]bool{}
					}
					rec.okSeen[key][seq] = true
				}
			}
		}
		f.Close()
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].ns < hs[j].ns })
	for _, h := range hs {
		rec.handlings = append(rec.handlings, h.h)
	}
	if rec.runs, err = ordercheck.ReadRunLogs([]string{r.runLog}, died); err != nil {
		r.t.Fatal(err)
	}
	for _, run := range rec.runs {
		rec.workers[run.Worker] = true
	}
	return rec
}

// deadLetters reads the group's dead letters: seqs per key.
func (r *handlerRig) deadLetters() (map[string][]int, []deadLetterOut) {
	r.t.Helper()
	var out dlqListOut
	r.h.json(&out, with(qg, "dlq", "list")...)
	dead := map[string][]int{}
	for _, d := range out.DeadLetters {
		var p testPayload
		if err := json.Unmarshal([]byte(d.Payload), &p); err != nil {
			r.t.Fatalf("dead letter %d: payload %q: %v", d.ID, d.Payload, err)
		}
		dead[d.Key] = append(dead[d.Key], p.Seq)
	}
	return dead, out.DeadLetters
}

// waitAll waits until every event sent is handled or a dead letter.
func (r *handlerRig) waitAll(timeout time.Duration) {
	r.t.Helper()
	waitFor(r.t, timeout, "every event handled or dead", func() bool {
		rec := r.read()
		var dead map[string][]int
		for k, n := range r.sent {
			for s := range n {
				if rec.okSeen[k][s] {
					continue
				}
				if dead == nil {
					dead, _ = r.deadLetters()
				}
				found := false
				for _, d := range dead[k] {
					found = found || d == s
				}
				if !found {
					return false
				}
			}
		}
		return true
	})
}

// check judges the run log: nothing lost, every key in order, no two runs
// of a key at once.
func (r *handlerRig) check() (ordercheck.Report, records) {
	r.t.Helper()
	rec := r.read()
	dead, _ := r.deadLetters()
	rep := ordercheck.Check(r.sent, rec.handlings, dead).WithRuns(rec.runs)
	if !rep.OK() {
		r.t.Errorf("%s: %s\n%s", r.mode, rep, strings.Join(rep.Examples, "\n"))
	}
	return rep, rec
}

// countFails counts the failed handlings of key's event seq.
func (rec records) countFails(key string, seq int) int {
	n := 0
	for _, h := range rec.handlings {
		if h.Key == key && h.Seq == seq && !h.OK {
			n++
		}
	}
	return n
}

// execSQL runs one statement on its own connection.
func execSQL(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// testServer is the HTTP handler of the tests: it acts as the payload says
// (handlerroles_test.go), logging each run to the run log.
type testServer struct {
	*httptest.Server
	runLog, hang string
	hugeSent     atomic.Int64 // bytes of the last 1 GiB body sent before the worker stopped reading
}

const oneGiB = 1 << 30

func newTestServer(t *testing.T, runLog, hang string) *testServer {
	s := &testServer{runLog: runLog, hang: hang}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// serve is one handler run.
func (s *testServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if r.Header.Get("Content-Type") == "application/cloudevents-batch+json" {
		s.serveRun(w, r, body)
		return
	}
	key, _ := url.PathUnescape(r.Header.Get("Ce-Subject"))
	attempt, _ := strconv.Atoi(r.Header.Get("Ce-Partitionqattempt"))
	var p testPayload
	json.Unmarshal(body, &p)
	q := strconv.Quote(key)
	appendRunLog(s.runLog, "S %s %d http", q, p.Seq)
	done := func(ok bool) {
		res := "fail"
		if ok {
			res = "ok"
		}
		appendRunLog(s.runLog, "H %s %d %s http", q, p.Seq, res)
		appendRunLog(s.runLog, "E %s %d http", q, p.Seq)
	}
	switch {
	case p.Do == "huge1" && attempt == 1, p.Do == "hugeok":
		status := http.StatusInternalServerError
		if p.Do == "hugeok" {
			status = http.StatusOK
		}
		done(status == http.StatusOK)
		w.WriteHeader(status)
		s.hugeSent.Store(stream(w, oneGiB))
		return
	}
	o := act(p, attempt, r.Context().Done(), s.hang)
	done(o.kind == "done")
	switch {
	case o.kind == "done":
		w.WriteHeader(http.StatusNoContent)
	case o.kind == "dead_letter":
		w.Header().Set("Partitionq-Outcome", "dead-letter")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, o.text)
	case o.retryAfter > 0:
		w.Header().Set("Retry-After", strconv.FormatFloat(o.retryAfter, 'f', -1, 64))
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, o.text)
	default:
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, o.text)
	}
}

// serveRun is a run handler's request (work --runs): its events one after
// another, each logged as a run of its own; the first that is not done
// ends it, named by its index in Partitionq-Failed-Index.
func (s *testServer) serveRun(w http.ResponseWriter, r *http.Request, body []byte) {
	var evs []struct {
		Subject string          `json:"subject"`
		Attempt string          `json:"partitionqattempt"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &evs); err != nil || len(evs) == 0 {
		http.Error(w, fmt.Sprintf("not a batch of events: %v", err), http.StatusBadRequest)
		return
	}
	appendRunLog(s.runLog, "R %s %d http", strconv.Quote(evs[0].Subject), len(evs))
	for i, ev := range evs {
		attempt, _ := strconv.Atoi(ev.Attempt)
		var p testPayload
		json.Unmarshal(ev.Data, &p)
		q := strconv.Quote(ev.Subject)
		appendRunLog(s.runLog, "S %s %d http", q, p.Seq)
		o := act(p, attempt, r.Context().Done(), s.hang)
		res := "ok"
		if o.kind != "done" {
			res = "fail"
		}
		appendRunLog(s.runLog, "H %s %d %s http", q, p.Seq, res)
		appendRunLog(s.runLog, "E %s %d http", q, p.Seq)
		if o.kind == "done" {
			continue
		}
		w.Header().Set("Partitionq-Failed-Index", strconv.Itoa(i))
		status := http.StatusInternalServerError
		switch {
		case o.kind == "dead_letter":
			w.Header().Set("Partitionq-Outcome", "dead-letter")
			status = http.StatusUnprocessableEntity
		case o.retryAfter > 0:
			w.Header().Set("Retry-After", strconv.FormatFloat(o.retryAfter, 'f', -1, 64))
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		io.WriteString(w, o.text)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream writes n bytes of "x" lines, flushed as it goes, and returns how
// many were written before a write failed.
func stream(w http.ResponseWriter, n int64) int64 {
	chunk := []byte(strings.Repeat(strings.Repeat("x", 1023)+"\n", 64))
	var sent int64
	for sent < n {
		m, err := w.Write(chunk)
		sent += int64(m)
		if err != nil {
			break
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return sent
}

// Per key, events run in order and one at a time; a failure pauses its
// key until the event succeeds, the others flowing meanwhile.
func TestHandlerOrderAndPause(t *testing.T) {
	t.Parallel()
	for _, mode := range handlerModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mode, 2)
			for k := range 6 {
				dos := []string{"ok", "ok", "fail1", "ok", "ok", "ok", "ok", "ok"}
				if k == 1 {
					dos[5] = "fail1"
				}
				r.send(fmt.Sprintf("k%d", k), dos...)
			}
			w := r.work("--concurrency", "4", "--backoff-min", "50ms", "--backoff-max", "100ms")
			r.waitAll(60 * time.Second)
			rep, rec := r.check()
			if rep.Handled != 48 || rep.Dead != 0 {
				t.Errorf("%s: want 48 handled, 0 dead", rep)
			}
			for k := range 6 {
				if n := rec.countFails(fmt.Sprintf("k%d", k), 2); n != 1 {
					t.Errorf("event 2 of k%d failed %d times, want once", k, n)
				}
			}
			if n := rec.countFails("k1", 5); n != 1 {
				t.Errorf("event 5 of k1 failed %d times, want once", n)
			}
			if res := w.stop(t); res.code != cli.ExitOK {
				t.Fatal(res)
			}
		})
	}
}

// With --runs, the --http and --pipe handlers get runs of a key's events
// in one request; a failure in the middle of a run (a plain failure, a
// dead letter now, a retry after) is named by its index: the events
// before it are done once, the failed one is handled by the policy, the
// key's later events wait behind it and flow again after its retry.
func TestHandlerRuns(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"http", "pipe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mode, 2)
			for k := range 4 {
				dos := []string{"ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"}
				switch k {
				case 0:
					dos[5] = "fail1"
				case 1:
					dos[6] = "dead"
				case 2:
					dos[7] = "retry1"
				}
				r.send(fmt.Sprintf("k%d", k), dos...)
			}
			w := r.work("--runs", "--max-run", "8", "--backoff-min", "1h", "--policy", "pause")
			// k0's failure waits an hour's backoff: it alone stays blocked,
			// with its later events waiting; an operator's retry lets it go on.
			waitFor(t, 30*time.Second, "k0 blocked, the others done", func() bool {
				rec := r.read()
				_, blocked := r.h.blockedKey("k0")
				return blocked && len(rec.okSeen["k0"]) == 5 && len(rec.okSeen["k1"]) == 11 && len(rec.okSeen["k2"]) == 12 && len(rec.okSeen["k3"]) == 12
			})
			r.h.ok(with(qg, "retry", "--key", "k0", "--reason", "test")...)
			r.waitAll(30 * time.Second)
			rep, rec := r.check()
			if rep.Handled != 47 || rep.Dead != 1 {
				t.Errorf("%s: want 47 handled and 1 dead letter", rep)
			}
			if n := rec.countFails("k0", 5); n != 1 {
				t.Errorf("k0's event 5 failed %d times, want once", n)
			}
			if n := rec.countFails("k2", 7); n != 1 {
				t.Errorf("k2's event 7 failed %d times, want once", n)
			}
			_, dls := r.deadLetters()
			if len(dls) != 1 || dls[0].Key != "k1" || dls[0].Reason != "handler" {
				t.Errorf("dead letters %+v: want k1's event 6, reason handler", dls)
			}
			if m := r.longestRun(); m < 2 || m > 8 {
				t.Errorf("the longest request held %d events, want 2 to 8 (--max-run)", m)
			}
			if res := w.stop(t); res.code != cli.ExitOK {
				t.Fatal(res)
			}
		})
	}
}

// longestRun is the most events a request of the run log held ("R" lines
// of --runs handlers).
func (r *handlerRig) longestRun() int {
	r.t.Helper()
	b, err := os.ReadFile(r.runLog)
	if err != nil {
		r.t.Fatal(err)
	}
	m := 0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "R ") {
			continue
		}
		q, err := strconv.QuotedPrefix(l[2:])
		if err != nil {
			continue
		}
		if f := strings.Fields(l[2+len(q):]); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			m = max(m, n)
		}
	}
	return m
}

// A handler says "dead letter now" (the event is given up at once, its
// key goes on) or "retry after 0.2s" (honoured although the backoff is an
// hour).
func TestHandlerSignals(t *testing.T) {
	t.Parallel()
	for _, mode := range handlerModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mode, 2)
			r.send("d", "dead", "ok")
			r.send("r", "retry1", "ok")
			w := r.work("--backoff-min", "1h")
			r.waitAll(60 * time.Second)
			rep, rec := r.check()
			if rep.Handled != 3 || rep.Dead != 1 {
				t.Errorf("%s: want 3 handled and 1 dead letter", rep)
			}
			if n := rec.countFails("r", 0); n != 1 {
				t.Errorf("the retried event failed %d times, want once", n)
			}
			_, dls := r.deadLetters()
			if len(dls) != 1 || dls[0].Key != "d" || dls[0].Reason != "handler" || dls[0].Attempts != 1 ||
				!strings.Contains(dls[0].LastError, "scripted poison") {
				t.Errorf("dead letters %+v: want d's first event, reason handler, 1 attempt, the handler's error", dls)
			}
			if res := w.stop(t); res.code != cli.ExitOK {
				t.Fatal(res)
			}
		})
	}
}

// A handler that runs past --handler-timeout is stopped (the command
// killed, the request cancelled, the pipe's event cancelled): a failure
// that blocks its key; other keys go on.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range handlerModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mode, 2)
			r.send("h", "hang", "ok")
			r.send("o", "ok", "ok")
			// An --exec command here is this test binary, which can take a
			// second to start on a busy machine (with -race): its timeout
			// must not cut the events that do not hang.
			timeout := "500ms"
			if mode == "exec" {
				timeout = "5s"
			}
			w := r.work("--handler-timeout", timeout, "--backoff-min", "1h")
			waitFor(t, 60*time.Second, "h blocked after a timeout", func() bool {
				bk, ok := r.h.blockedKey("h")
				return ok && strings.Contains(bk.Head.LastError, "timed out after "+timeout)
			})
			waitFor(t, 30*time.Second, "o handled", func() bool { return r.read().okSeen["o"][1] })
			rec := r.read()
			if n, ex := ordercheck.Overlaps(rec.runs); n != 0 {
				t.Errorf("%d overlaps: %v", n, ex)
			}
			for _, run := range rec.runs {
				if run.End.IsZero() {
					t.Errorf("a run of %s/%d never ended", run.Key, run.Seq)
				}
			}
			r.setHang(false)
			if res := w.stop(t); res.code != cli.ExitOK {
				t.Fatal(res)
			}
		})
	}
}

// A worker that loses its slot (its network frozen, its sessions ended)
// stops its handlers before a standby takes the slot: the run it had in
// flight ends before the standby's run of the same event starts.
func TestHandlerLostSlot(t *testing.T) {
	t.Parallel()
	for _, mode := range handlerModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, mode, 1)
			r.send("k", "hang", "ok")

			// Worker a reaches the database through a proxy that can freeze.
			cs, err := connstr.Parse(r.h.url)
			if err != nil {
				t.Fatal(err)
			}
			host, _ := cs.Get("host")
			port, _ := cs.Get("port")
			px, err := netproxy.New(net.JoinHostPort(host, port))
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			_, pxPort, _ := net.SplitHostPort(px.Addr())
			cs.Set("host", "127.0.0.1")
			cs.Set("port", pxPort)
			ha := &harness{t: t, db: r.h.db, url: cs.String(), env: map[string]string{"DATABASE_URL": cs.String(), "USER": "tester"}}
			extra := []string{"--lease-duration", "2s", "--identity", "a"}
			if mode == "pipe" {
				extra = append(extra, "--pipe-cancel-grace", "150ms")
			}
			wa := ha.startWork(append(r.handlerArgs(), append([]string{"--shutdown-timeout", "2s"}, extra...)...)...)
			waitFor(t, 30*time.Second, "a's run of k's event", func() bool { return len(r.read().runs) == 1 })

			wb := r.work("--identity", "b")
			px.Freeze()
			execSQL(t, r.h.url, `select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'a'`)
			waitFor(t, 30*time.Second, "a's run to end", func() bool {
				runs := r.read().runs
				return len(runs) >= 1 && !runs[0].End.IsZero()
			})
			r.setHang(false)
			r.waitAll(60 * time.Second)
			rep, rec := r.check()
			if rep.Handled != 2 {
				t.Errorf("%s: want both events handled", rep)
			}
			var first []ordercheck.Run
			for _, run := range rec.runs {
				if run.Seq == 0 {
					first = append(first, run)
				}
			}
			if len(first) < 2 {
				t.Fatalf("runs of k's first event: %+v; want a's, cut short, and b's", first)
			}
			if !first[0].End.Before(first[1].Start) {
				t.Errorf("a's run ended at %s, b's started at %s: they overlap", first[0].End.Format("15:04:05.000"), first[1].Start.Format("15:04:05.000"))
			}
			px.Resume()
			wa.stop(t)
			wb.stop(t)
		})
	}
}

// A --pipe process that dies in the middle of an event fails the events it
// had in flight (each a failed attempt: the key pauses), and is started
// again; nothing is lost, every key stays in order.
func TestPipeProcessDies(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	r := newRig(t, "pipe", 2)
	r.send("a", "die1", "ok", "ok")
	r.send("b", "ok", "ok", "ok")
	w := r.work("--backoff-min", "50ms", "--backoff-max", "100ms")
	r.waitAll(60 * time.Second)
	rep, rec := r.check()
	if rep.Handled != 6 {
		t.Errorf("%s: want 6 handled", rep)
	}
	pipes := 0
	for name := range rec.workers {
		if strings.HasPrefix(name, "pipe-") {
			pipes++
		}
	}
	if pipes < 2 {
		t.Errorf("%d pipe processes ran, want the first and the one started after it died", pipes)
	}
	res := w.stop(t)
	if res.code != cli.ExitOK {
		t.Fatal(res)
	}
	for _, want := range []string{"the pipe handler ended", "exit status 3", "scripted death", "the pipe handler ended before it answered for event"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("the worker's log does not say %q:\n%s", want, res.stderr)
		}
	}
}

// Lines of a --pipe process that are not replies (not JSON, a request not
// in flight, a second answer) are logged and ignored; a reply with an
// outcome partitionq does not know fails its event. The worker goes on.
func TestPipeBadReplies(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	r := newRig(t, "pipe", 2)
	r.send("n", "notjson", "ok")
	r.send("u", "unknown", "ok")
	r.send("t", "twice", "ok")
	r.send("o", "badoutcome1", "ok")
	w := r.work("--backoff-min", "50ms", "--backoff-max", "100ms")
	r.waitAll(60 * time.Second)
	rep, rec := r.check()
	if rep.Handled != 8 {
		t.Errorf("%s: want 8 handled", rep)
	}
	if n := rec.countFails("o", 0); n != 1 {
		t.Errorf("the event answered with an unknown outcome failed %d times, want once", n)
	}
	res := w.stop(t)
	if res.code != cli.ExitOK {
		t.Fatal(res)
	}
	for _, want := range []string{
		`problem="not a reply: invalid character`,
		`problem="it answers request 999999999, which is not in flight`,
		`which is not in flight (never sent, answered before, or given up)"`,
		`has outcome \"maybe\", not done, failed or dead_letter: a failure`,
	} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("the worker's log does not say %s:\n%s", want, res.stderr)
		}
	}
}

// A --pipe process that does not answer a cancelled event within
// --pipe-cancel-grace is killed with its process group, and started again;
// the killed run ends before the event runs again. The handler timeout
// leaves room for the process's start (the race detector's test binary
// takes most of a second to start: at 300ms every attempt timed out).
func TestPipeCancelIgnored(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	r := newRig(t, "pipe", 1)
	r.send("x", "hard1", "ok")
	w := r.work("--handler-timeout", "2s", "--pipe-cancel-grace", "100ms", "--backoff-min", "50ms", "--backoff-max", "100ms")
	r.waitAll(60 * time.Second)
	rep, rec := r.check()
	if rep.Handled != 2 || rep.Runs < 3 {
		t.Errorf("%s: want 2 handled in at least 3 runs (the killed one, its retry, the next)", rep)
	}
	if len(rec.workers) < 2 {
		t.Errorf("pipe processes %v: want the one killed and the next", rec.workers)
	}
	res := w.stop(t)
	if res.code != cli.ExitOK {
		t.Fatal(res)
	}
	if want := "did not answer the cancel of event"; !strings.Contains(res.stderr, want) {
		t.Errorf("the worker's log does not say %q:\n%s", want, res.stderr)
	}
}

// An HTTP handler that refuses connections fails every event: the keys
// pause, and once it listens, every event is handled in order, none lost.
func TestHTTPRefusedConnections(t *testing.T) {
	t.Parallel()
	r := newRig(t, "http", 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, k := range []string{"a", "b", "c"} {
		r.send(k, "ok", "ok", "ok")
	}
	w := r.h.startWork("--http", "http://"+addr+"/events", "--backoff-min", "100ms", "--backoff-max", "200ms", "--shutdown-timeout", "2s")
	waitFor(t, 60*time.Second, "every key blocked on connection refused", func() bool {
		for _, k := range []string{"a", "b", "c"} {
			bk, ok := r.h.blockedKey(k)
			if !ok || !strings.Contains(bk.Head.LastError, "connection refused") {
				return false
			}
		}
		return true
	})
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.srv.Config.Handler}
	go srv.Serve(ln)
	defer srv.Close()
	r.waitAll(60 * time.Second)
	if rep, _ := r.check(); rep.Handled != 9 || rep.Lost != 0 {
		t.Errorf("%s: want 9 handled", rep)
	}
	if res := w.stop(t); res.code != cli.ExitOK {
		t.Fatal(res)
	}
}

// A reply with a 1 GiB body is read to a bound: a failure's error text is
// its first 4 KiB, a success's body is not read past 64 KiB, and the
// connection is closed rather than read on.
func TestHTTPHugeBody(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	r := newRig(t, "http", 1)
	r.send("a", "huge1", "hugeok", "ok")
	w := r.work("--backoff-min", "1h")
	var bk blockedKeyOut
	waitFor(t, 60*time.Second, "a blocked by the failure with a 1 GiB body", func() bool {
		var ok bool
		bk, ok = r.h.blockedKey("a")
		return ok && bk.Head.LastError != ""
	})
	if !strings.HasPrefix(bk.Head.LastError, "HTTP 500 Internal Server Error: xxxx") || len(bk.Head.LastError) > 4200 {
		t.Errorf("error text of a failure with a 1 GiB body: %d bytes, starting %.60q; want the status and the body's first 4 KiB",
			len(bk.Head.LastError), bk.Head.LastError)
	}
	// The server could write no more than the socket buffers hold once the
	// worker stopped reading.
	waitFor(t, 30*time.Second, "the server to give the failure's body up", func() bool { return r.srv.hugeSent.Load() != 0 })
	if n := r.srv.hugeSent.Load(); n > 64<<20 {
		t.Errorf("the server wrote %d bytes of the failure's body before the worker closed the connection; want the worker to stop reading early", n)
	}
	r.srv.hugeSent.Store(0)
	h := r.h
	h.ok(with(qg, "retry", "--key", "a", "--reason", "test")...)
	r.waitAll(60 * time.Second)
	if rep, _ := r.check(); rep.Handled != 3 {
		t.Errorf("%s: want 3 handled", rep)
	}
	waitFor(t, 30*time.Second, "the server to give the success's body up", func() bool { return r.srv.hugeSent.Load() != 0 })
	if n := r.srv.hugeSent.Load(); n > 64<<20 {
		t.Errorf("the server wrote %d bytes of a success's 1 GiB body; want the worker to stop reading early", n)
	}
	if res := w.stop(t); res.code != cli.ExitOK {
		t.Fatal(res)
	}
}
