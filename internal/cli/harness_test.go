package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/pgtest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
)

// harness runs commands in process against one fresh database.
type harness struct {
	t   *testing.T
	db  pgtest.DB
	url string
	env map[string]string // what Getenv sees
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	db := pgtest.New(t)
	url := db.URL
	return &harness{t: t, db: db, url: url, env: map[string]string{"DATABASE_URL": url, "USER": "tester"}}
}

// offline is a harness whose database does not answer: for checks that
// must fail before connecting.
func offline(t *testing.T) *harness {
	return &harness{t: t, url: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1",
		env: map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}}
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCtx runs one command line with stdin, until it ends or ctx is cancelled.
func (h *harness) runCtx(ctx context.Context, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := cli.Main(ctx, args, cli.Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return h.env[k] },
	})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (h *harness) run(args ...string) result {
	return h.runCtx(h.t.Context(), "", args...)
}

func (h *harness) runStdin(stdin string, args ...string) result {
	return h.runCtx(h.t.Context(), stdin, args...)
}

// ok runs a command that must succeed and returns its standard output.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != cli.ExitOK {
		h.t.Fatalf("partitionq %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// fails runs a command that must exit with code and mention every want.
func (h *harness) fails(code int, want []string, args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	h.expect(r, code, want, args)
	return r
}

func (h *harness) expect(r result, code int, want []string, args []string) {
	h.t.Helper()
	if r.code != code {
		h.t.Fatalf("partitionq %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			h.t.Fatalf("partitionq %s: stderr does not mention %q: %s", strings.Join(args, " "), w, r)
		}
	}
	if code != cli.ExitOK && !strings.HasPrefix(r.stderr, "partitionq: ") {
		h.t.Fatalf("partitionq %s: error not printed as 'partitionq: <error>': %s", strings.Join(args, " "), r)
	}
}

// json runs a command with --json and decodes its output into v.
func (h *harness) json(v any, args ...string) {
	h.t.Helper()
	out := h.ok(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		h.t.Fatalf("partitionq %s --json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// qg are the queue and group flags of the test group.
var qg = []string{"--queue", "q", "--group", "g"}

func with(args []string, more ...string) []string { return append(slices.Clone(args), more...) }

// setup creates queue q with group g of n slots that ticks fast.
func (h *harness) setup(n int) {
	h.t.Helper()
	h.ok(with(qg, "setup", "--slots", strconv.Itoa(n), "--tick-max-lag", "20ms")...)
}

// client opens a library client on the test database, for observing.
func (h *harness) client() *partitionq.Client {
	h.t.Helper()
	pool, err := pgxpool.New(context.Background(), h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(pool.Close)
	c, err := partitionq.NewClient(context.Background(), pool, partitionq.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// storedEvent is an event as the engine's event table holds it.
type storedEvent struct {
	ID              int64
	Key, Type, Data string
}

// events reads every event of a queue from the engine's tables.
func (h *harness) events(queue string) []storedEvent {
	h.t.Helper()
	ctx := h.t.Context()
	conn, err := pgx.Connect(ctx, h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var table string
	if err := conn.QueryRow(ctx, h.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = $1`), queue).Scan(&table); err != nil {
		h.t.Fatalf("queue %s: %v", queue, err)
	}
	rows, err := conn.Query(ctx, `select ev_id, coalesce(ev_extra1, ''), coalesce(ev_type, ''), coalesce(ev_data, '') from `+
		pgx.Identifier(strings.Split(table, ".")).Sanitize()+` order by ev_id`)
	if err != nil {
		h.t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedEvent, error) {
		var e storedEvent
		err := r.Scan(&e.ID, &e.Key, &e.Type, &e.Data)
		return e, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// worker runs `partitionq work` in process until stop is called, which
// cancels it like SIGTERM and returns its result.
type worker struct {
	cancel context.CancelFunc
	done   chan result
}

// startWork starts a worker on q/g with a fast in-process ticker.
func (h *harness) startWork(args ...string) *worker {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{cancel: cancel, done: make(chan result, 1)}
	full := with(qg, append([]string{"work", "--ticker", "--tick-interval", "25ms", "--poll-interval", "25ms"}, args...)...)
	go func() { w.done <- h.runCtx(ctx, "", full...) }()
	h.t.Cleanup(func() { w.stop(h.t) })
	return w
}

func (w *worker) stop(t *testing.T) result {
	t.Helper()
	w.cancel()
	slow, deadline := time.After(10*time.Second), time.After(60*time.Second)
	for {
		select {
		case r, ok := <-w.done:
			if ok {
				close(w.done)
			}
			return r
		case <-slow:
			// What a slow stop waits for (the worker runs in this process).
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Logf("the worker has not stopped 10s after its context was cancelled; goroutines:\n%s", b.String())
		case <-deadline:
			t.Fatal("the worker did not stop within 60s of its context being cancelled")
		}
	}
}

// waitFor waits until cond holds or timeout passes (pgtest.WaitFor).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	pgtest.WaitFor(t, timeout, what, func() (bool, error) { return cond(), nil })
}

// blockedKey returns the blocked key named key, via the blocked command.
func (h *harness) blockedKey(key string) (blockedKeyOut, bool) {
	h.t.Helper()
	var out blockedOut
	h.json(&out, with(qg, "blocked")...)
	for _, bk := range out.BlockedKeys {
		if bk.Key == key {
			return bk, true
		}
	}
	return blockedKeyOut{}, false
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// pinKeys checks that a JSON object has exactly the documented keys.
func pinKeys(t *testing.T, what string, raw json.RawMessage, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := keysOf(t, raw); !slices.Equal(got, want) {
		t.Errorf("JSON keys of %s changed (docs/cli.md pins them):\n got %v\nwant %v", what, got, want)
	}
}

// files lists the names in dir that start with prefix.
func files(t *testing.T, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func readFile(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// raw runs a command with --json and returns its output.
func (h *harness) raw(args ...string) json.RawMessage {
	h.t.Helper()
	return json.RawMessage(h.ok(append(args, "--json")...))
}

// field returns one member of a JSON object (or the first element of an
// array member when index is 0 or more).
func field(t *testing.T, raw json.RawMessage, name string, index int) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("no %q in %s", name, raw)
	}
	if index < 0 {
		return v
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(v, &arr); err != nil || len(arr) <= index {
		t.Fatalf("%q has no element %d: %s", name, index, v)
	}
	return arr[index]
}

func jsonUnmarshal(raw json.RawMessage, v any) error { return json.Unmarshal(raw, v) }
