package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// runsRecorder is a RunHandler that records the events it does, checks that
// no key has two runs at once and that a run holds consecutive events of
// one key, and lets a test fail an event of a run (fail returns the index
// and the error, or -1).
type runsRecorder struct {
	mu     sync.Mutex
	t      *testing.T
	byKey  map[string][]int   // the seq of each event done, in the order done
	ids    map[int64]int      // times each event was done
	inKey  map[string]bool    // a run of the key is in the handler
	sizes  []int              // every run's length
	events map[int64]attempts // the attempts each event came with, and when
	total  int
	fail   func(evs []*partitionq.Event) (int, error)
}

type attempts struct {
	attempt []int
	at      []time.Time
}

func newRunsRecorder(t *testing.T) *runsRecorder {
	return &runsRecorder{t: t, byKey: map[string][]int{}, ids: map[int64]int{}, inKey: map[string]bool{}, events: map[int64]attempts{}}
}

func runSeq(t *testing.T, ev *partitionq.Event) int {
	var seq int
	if _, err := fmt.Sscanf(string(ev.Payload), `{"seq":%d}`, &seq); err != nil {
		t.Errorf("event %d: payload %q: %v", ev.ID, ev.Payload, err)
	}
	return seq
}

func (r *runsRecorder) HandleRun(ctx context.Context, evs []*partitionq.Event) error {
	key := evs[0].Key
	r.mu.Lock()
	if r.inKey[key] {
		r.t.Errorf("key %s: two runs at once", key)
	}
	r.inKey[key] = true
	r.sizes = append(r.sizes, len(evs))
	for i, ev := range evs {
		if ev.Key != key {
			r.t.Errorf("a run of key %s holds an event of key %s", key, ev.Key)
		}
		if i > 0 && ev.ID <= evs[i-1].ID {
			r.t.Errorf("key %s: run out of order: %d after %d", key, ev.ID, evs[i-1].ID)
		}
		a := r.events[ev.ID]
		a.attempt, a.at = append(a.attempt, ev.Attempt), append(a.at, time.Now())
		r.events[ev.ID] = a
	}
	fail := r.fail
	r.mu.Unlock()

	n, err := len(evs), error(nil)
	if fail != nil {
		if i, ferr := fail(evs); i >= 0 {
			n, err = i, partitionq.RunFailed(i, ferr)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inKey[key] = false
	for _, ev := range evs[:n] {
		r.byKey[key] = append(r.byKey[key], runSeq(r.t, ev))
		r.ids[ev.ID]++
		r.total++
	}
	return err
}

func (r *runsRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *runsRecorder) waitTotal(t *testing.T, n int) {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d events done in runs", n), func() (bool, error) { return r.count() >= n, nil })
}

// check fails t unless every key's events were done once each, in order,
// rounds of them.
func (r *runsRecorder) check(t *testing.T, keys, rounds int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byKey) != keys {
		t.Fatalf("%d keys done, want %d", len(r.byKey), keys)
	}
	for k, seqs := range r.byKey {
		if len(seqs) != rounds {
			t.Fatalf("key %s: %d events done, want %d: %v", k, len(seqs), rounds, seqs)
		}
		for i, s := range seqs {
			if s != i {
				t.Fatalf("key %s: event %d done is seq %d: out of order (%v)", k, i, s, seqs)
			}
		}
	}
	for id, n := range r.ids {
		if n != 1 {
			t.Fatalf("event %d done %d times", id, n)
		}
	}
}

func (r *runsRecorder) maxRun() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, n := range r.sizes {
		m = max(m, n)
	}
	return m
}

// sendBurst sends n events of key in one batch (one tick), seq 0 to n-1
// after from.
func (b *bundle) sendBurst(t *testing.T, key string, from, n int) []int64 {
	t.Helper()
	var ms []partitionq.Message
	for i := from; i < from+n; i++ {
		ms = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i))})
	}
	res, err := b.client.SendBatch(b.ctx, "q", ms)
	if err != nil {
		t.Fatal(err)
	}
	return resultIDs(res)
}

func TestRunHandlerOrderAcrossRunsAndBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	const keys, rounds, maxRun = 6, 40, 8
	rec := newRunsRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: partitionq.Runs(rec), Limits: partitionq.LimitsConfig{MaxRun: maxRun}})
	for r := 0; r < rounds; r += 10 { // bursts of 10 a key, several batches
		for k := 0; k < keys; k++ {
			b.sendBurst(t, "tenant-"+strconv.Itoa(k), r, 10)
		}
	}
	rec.waitTotal(t, keys*rounds)
	rec.check(t, keys, rounds)
	if m := rec.maxRun(); m < 2 || m > maxRun {
		t.Fatalf("the longest run had %d events, want 2 to %d (MaxRun)", m, maxRun)
	}
}

// failOnce fails, once, the second event of the first run of key with two
// events or more, and records which event that was.
type failOnce struct {
	mu     sync.Mutex
	key    string
	err    func() error
	failed int64 // the failed event (0: none yet)
}

func (f *failOnce) fail(evs []*partitionq.Event) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed == 0 && evs[0].Key == f.key && len(evs) >= 2 {
		f.failed = evs[1].ID
		return 1, f.err()
	}
	return -1, nil
}

func (f *failOnce) id() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func TestRunHandlerFailureInTheMiddleOfARun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy partitionq.Policy
		err    func() error
		dead   bool          // the failed event is dead-lettered
		after  time.Duration // the failed event's retry comes this long after at least
	}{
		{name: "pause", policy: partitionq.PolicyPause, err: func() error { return errors.New("boom") }},
		{name: "retry-later", policy: partitionq.PolicyRetryLater, err: func() error { return errors.New("boom") }},
		{name: "dead-letter-now", policy: partitionq.PolicyPause, err: func() error { return partitionq.DeadLetterNow(errors.New("bad")) }, dead: true},
		{name: "retry-after", policy: partitionq.PolicyPause, err: func() error { return partitionq.RetryAfter(300*time.Millisecond, errors.New("later")) },
			after: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, 1)
			const n = 40
			rec := newRunsRecorder(t)
			f := &failOnce{key: "k", err: tc.err}
			rec.fail = f.fail
			backoff := 50 * time.Millisecond
			if tc.after > 0 {
				backoff = time.Hour // only RetryAfter can bring the event back in time
			}
			b.worker(t, partitionq.WorkerConfig{Handler: partitionq.Runs(rec),
				Retry: partitionq.RetryConfig{Policy: tc.policy, BackoffMin: backoff, BackoffMax: backoff}})
			b.sendBurst(t, "k", 0, n)
			want := n
			if tc.dead {
				want = n - 1
			}
			rec.waitTotal(t, want)
			failed := f.id()
			if failed == 0 {
				t.Fatal("no run of two events or more: the burst was handed one event at a time")
			}
			rec.mu.Lock()
			seqs := append([]int(nil), rec.byKey["k"]...)
			tries := rec.events[failed]
			for id, c := range rec.ids {
				if c != 1 {
					t.Errorf("event %d done %d times", id, c)
				}
			}
			rec.mu.Unlock()
			if len(seqs) != want {
				t.Fatalf("%d events done, want %d: %v", len(seqs), want, seqs)
			}
			switch {
			case tc.dead:
				dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
				if err != nil {
					t.Fatal(err)
				}
				if len(dls) != 1 || dls[0].EventID != failed || dls[0].Reason != "handler" {
					t.Fatalf("dead letters %+v, want event %d (reason handler)", dls, failed)
				}
				if len(tries.attempt) != 1 {
					t.Fatalf("the dead-lettered event was tried %d times, want 1", len(tries.attempt))
				}
			case tc.policy == partitionq.PolicyRetryLater:
				// The key went on: the failed event came back later, out of
				// its place; every other event in order.
				if len(tries.attempt) != 2 || tries.attempt[1] != 2 {
					t.Fatalf("the failed event's attempts: %v, want [1 2]", tries.attempt)
				}
			default:
				if len(tries.attempt) != 2 || tries.attempt[1] != 2 {
					t.Fatalf("the failed event's attempts: %v, want [1 2]", tries.attempt)
				}
				if d := tries.at[1].Sub(tries.at[0]); d < tc.after {
					t.Fatalf("the failed event was tried again after %s, want at least %s", d, tc.after)
				}
			}
			if tc.policy == partitionq.PolicyPause {
				for i, s := range seqs { // in order, the dead letter left out
					if i > 0 && s <= seqs[i-1] {
						t.Fatalf("out of order: %v", seqs)
					}
				}
			}
		})
	}
}

func TestTxRunHandlerCommitsWithProgressAndRollsBackAFailedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.pool.Exec(b.ctx, `create table written (n bigserial primary key, ev_id bigint not null, key text not null, seq int not null)`); err != nil {
		t.Fatal(err)
	}
	const keys, n = 3, 30
	f := &failOnce{key: "tenant-0", err: func() error { return errors.New("boom") }}
	var mu sync.Mutex
	var calls [][]int64 // the events of every call
	h := partitionq.TxRunHandlerFunc(func(ctx context.Context, tx pgx.Tx, evs []*partitionq.Event) error {
		ids, ks, seqs := make([]int64, len(evs)), make([]string, len(evs)), make([]int32, len(evs))
		for i, ev := range evs {
			ids[i], ks[i], seqs[i] = ev.ID, ev.Key, int32(runSeq(t, ev))
		}
		mu.Lock()
		calls = append(calls, ids)
		mu.Unlock()
		// The whole run is written first: a failure must roll all of it back.
		if _, err := tx.Exec(ctx, `insert into written (ev_id, key, seq) select * from unnest($1::bigint[], $2::text[], $3::int[])`, ids, ks, seqs); err != nil {
			return err
		}
		if i, err := f.fail(evs); i >= 0 {
			return partitionq.RunFailed(i, err)
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: partitionq.RunsInTx(h), Retry: partitionq.RetryConfig{BackoffMin: 50 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	for k := 0; k < keys; k++ {
		b.sendBurst(t, "tenant-"+strconv.Itoa(k), 0, n)
	}
	pgtest.WaitFor(t, 30*time.Second, "every event written", func() (bool, error) {
		var c int
		err := b.pool.QueryRow(b.ctx, `select count(distinct ev_id) from written`).Scan(&c)
		return c >= keys*n, err
	})
	failed := f.id()
	if failed == 0 {
		t.Fatal("no run of two events or more: the bursts were handed one event at a time")
	}
	// Every event written once (the failed run's tx left nothing), each
	// key's in order.
	rows, err := b.pool.Query(b.ctx, `select key, seq, count(*) over (partition by ev_id) from written order by n`)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct {
		key       string
		seq, dups int
	}, error) {
		var r struct {
			key       string
			seq, dups int
		}
		return r, row.Scan(&r.key, &r.seq, &r.dups)
	})
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for _, r := range seqs {
		if r.dups != 1 {
			t.Fatalf("key %s seq %d written %d times", r.key, r.seq, r.dups)
		}
		if r.seq != next[r.key] {
			t.Fatalf("key %s: seq %d written where %d was next", r.key, r.seq, next[r.key])
		}
		next[r.key]++
	}
	// The failed run was called again with the event before the failed one
	// alone, which committed.
	mu.Lock()
	defer mu.Unlock()
	prefix := false
	for i, c := range calls {
		if len(c) >= 2 && c[1] == failed && i+1 < len(calls) {
			for _, later := range calls[i+1:] {
				prefix = prefix || (len(later) == 1 && later[0] == c[0])
			}
		}
	}
	if !prefix {
		t.Fatalf("no call with the failed run's first event alone after it failed at its second (calls %v)", calls)
	}
	// The completions committed with the writes: nothing is pending.
	pgtest.WaitFor(t, 10*time.Second, "the group empty", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		return st.Pending == 0, nil
	})
}

func TestWorkerConfigOneHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	run := partitionq.RunHandlerFunc(func(context.Context, []*partitionq.Event) error { return nil })
	for _, tc := range []struct {
		cfg   partitionq.WorkerConfig
		field string
	}{
		{partitionq.WorkerConfig{}, "WorkerConfig.Handler"},
		{partitionq.WorkerConfig{Handler: partitionq.Runs(run), Limits: partitionq.LimitsConfig{MaxRun: -1}}, "WorkerConfig.Limits.MaxRun"},
	} {
		tc.cfg.Queue, tc.cfg.Group = "q", "g"
		_, err := b.client.NewWorker(b.ctx, tc.cfg)
		var ve *partitionq.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Fatalf("NewWorker: %v, want a *ValidationError for %s", err, tc.field)
		}
	}
}

// The handler kinds called outside a worker: Runs hands its RunHandler a
// run of one event and returns that event's failure; InTx and RunsInTx
// say that their transaction is the worker's.
func TestHandlerKindsOutsideAWorker(t *testing.T) {
	ev := &partitionq.Event{ID: 7, Key: "k"}
	boom := errors.New("boom")
	var got []*partitionq.Event
	h := partitionq.Runs(partitionq.RunHandlerFunc(func(_ context.Context, evs []*partitionq.Event) error {
		got = evs
		return partitionq.RunFailed(0, boom)
	}))
	if err := h.Handle(context.Background(), ev); !errors.Is(err, boom) || len(got) != 1 || got[0] != ev {
		t.Fatalf("Runs(h).Handle: %v with a run of %d, want boom with a run of the one event", err, len(got))
	}
	tx := partitionq.InTx(partitionq.TxHandlerFunc(func(context.Context, pgx.Tx, *partitionq.Event) error { return nil }))
	txRun := partitionq.RunsInTx(partitionq.TxRunHandlerFunc(func(context.Context, pgx.Tx, []*partitionq.Event) error { return nil }))
	for name, h := range map[string]partitionq.Handler{"InTx": tx, "RunsInTx": txRun} {
		if err := h.Handle(context.Background(), ev); err == nil || !strings.Contains(err.Error(), "runs in a Worker") {
			t.Fatalf("%s(h).Handle: %v, want an error saying it runs in a Worker", name, err)
		}
	}
}

// A run handler's call is one span, with the run's number of events as an
// attribute, and one observation of partitionq_handler_run_events.
func TestRunHandlerSpansAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	calls, events := 0, 0
	h := partitionq.RunHandlerFunc(func(ctx context.Context, evs []*partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		events += len(evs)
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: partitionq.Runs(h), TracerProvider: tp, Registerer: reg})
	const n = 30
	b.sendBurst(t, "k", 0, n)
	pgtest.WaitFor(t, 30*time.Second, "every event handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return events >= n, nil
	})
	mu.Lock()
	wantCalls := calls
	mu.Unlock()
	pgtest.WaitFor(t, 10*time.Second, "a span per call", func() (bool, error) { return len(exp.GetSpans()) >= wantCalls, nil })
	spanEvents := 0
	for _, s := range exp.GetSpans() {
		attrs := attribute.NewSet(s.Attributes...)
		v, ok := attrs.Value("partitionq.run.events")
		if !ok {
			t.Fatalf("span %s without partitionq.run.events: %v", s.Name, s.Attributes)
		}
		spanEvents += int(v.AsInt64())
	}
	if got := len(exp.GetSpans()); got != wantCalls || spanEvents != n {
		t.Fatalf("%d spans holding %d events, want %d spans (one per call) holding %d", got, spanEvents, wantCalls, n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "partitionq_handler_run_events" {
			continue
		}
		for _, m := range mf.GetMetric() {
			found = true
			if h := m.GetHistogram(); h.GetSampleCount() != uint64(wantCalls) || h.GetSampleSum() != n {
				t.Fatalf("partitionq_handler_run_events: %d calls, %v events; want %d and %d", h.GetSampleCount(), h.GetSampleSum(), wantCalls, n)
			}
		}
	}
	if !found {
		t.Fatal("no partitionq_handler_run_events")
	}
}
