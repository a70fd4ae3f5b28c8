package partitionq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
)

// testWorker is a Worker of n slots, running slots (its one generation's
// run), that was never started: enough for its metrics and its handler
// wrapper.
func testWorker(n int, slots []int, cfg WorkerConfig) (*Worker, *genRun) {
	cfg.Queue, cfg.Group = "q", "g"
	w := &Worker{cfg: cfg, group: Group{Queue: "q", Group: "g", Slots: n}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	gr := &genRun{n: n, slots: slots, stats: map[int]*runner.Stats{}}
	for _, s := range slots {
		gr.stats[s] = &runner.Stats{}
	}
	return w, gr
}

// TestMetricsStatusReadCachedAndBounded: however many slots and scrapes,
// one status read a second, each with a deadline of at most 2s; a failed
// read leaves the gauges out and keeps the counters.
func TestMetricsStatusReadCachedAndBounded(t *testing.T) {
	w, gr := testWorker(64, []int{0, 5, 63}, WorkerConfig{})
	m := newWorkerMetrics(w, gr)
	now := time.Unix(1000, 0)
	w.status.now = func() time.Time { return now }
	reads := 0
	var fail error
	w.status.read = func(ctx context.Context) (GroupStatus, error) {
		reads++
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > statusTimeout {
			t.Errorf("status read without a deadline of at most %s (deadline %v, set %v)", statusTimeout, dl, ok)
		}
		gs := GroupStatus{Slots: 64, SlotStatus: make([]SlotStatus, 64)}
		for i := range gs.SlotStatus {
			gs.SlotStatus[i] = SlotStatus{Slot: i, Slots: 64}
		}
		gs.SlotStatus[5] = SlotStatus{Slot: 5, Slots: 64, Owner: &Owner{Name: "x"}, BlockedKeys: 2, SetAside: 7, Pending: 11, Lag: 1500 * time.Millisecond}
		return gs, fail
	}
	hotReads := 0
	w.status.readHot = func(ctx context.Context, gs GroupStatus) (HotKeys, error) {
		hotReads++
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > statusTimeout {
			t.Errorf("busiest keys read without a deadline of at most %s", statusTimeout)
		}
		hk := HotKeys{Busiest: make([]KeyPending, gs.Slots)}
		hk.Busiest[5] = KeyPending{Key: "tenant-9", Slot: 5, Pending: 9}
		return hk, nil
	}
	reg := prometheus.NewPedanticRegistry()
	if err := m.register(reg); err != nil {
		t.Fatal(err)
	}
	gr.stats[5].Handled.Add(3)
	gather := func() map[string]map[string]float64 { // name: slot: value
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]float64{}
		for _, f := range fams {
			out[f.GetName()] = map[string]float64{}
			for _, mm := range f.GetMetric() {
				var slot string
				for _, l := range mm.GetLabel() {
					if l.GetName() == "slot" {
						slot = l.GetValue()
					}
				}
				switch {
				case mm.Counter != nil:
					out[f.GetName()][slot] = mm.Counter.GetValue()
				case mm.Gauge != nil:
					out[f.GetName()][slot] = mm.Gauge.GetValue()
				}
			}
		}
		return out
	}
	g := gather()
	gather()
	if reads != 1 {
		t.Fatalf("%d status reads for two scrapes within a second of 3 slots, want 1", reads)
	}
	if len(g[metricOwned]) != 3 || g[metricOwned]["5"] != 1 || g[metricOwned]["0"] != 0 {
		t.Errorf("owned = %v, want slots 0, 5, 63 with 5 owned", g[metricOwned])
	}
	if g[metricBlocked]["5"] != 2 || g[metricSetAside]["5"] != 7 || g[metricPending]["5"] != 11 || g[metricLag]["5"] != 1.5 {
		t.Errorf("slot 5: blocked %v set aside %v pending %v lag %v, want 2 7 11 1.5",
			g[metricBlocked]["5"], g[metricSetAside]["5"], g[metricPending]["5"], g[metricLag]["5"])
	}
	if g[metricBusiestKey]["5"] != 9 || g[metricBusiestKey]["0"] != 0 || hotReads != 1 {
		t.Errorf("busiest key gauge = %v (%d reads), want 9 on slot 5, 0 on slot 0, one read", g[metricBusiestKey], hotReads)
	}
	if g[metricHandled]["5"] != 3 {
		t.Errorf("handled = %v, want 3 on slot 5", g[metricHandled])
	}

	now = now.Add(statusMaxAge)
	fail = errors.New("database down")
	g = gather()
	if reads != 2 {
		t.Fatalf("%d status reads after a second, want 2", reads)
	}
	if len(g[metricOwned]) != 0 || len(g[metricHandled]) != 3 {
		t.Errorf("after a failed read: owned %v (want none), handled %v (want 3 slots)", g[metricOwned], g[metricHandled])
	}
}

// TestInstrumentNothingConfigured: without Registerer and TracerProvider
// the handler runs unwrapped.
func TestInstrumentNothingConfigured(t *testing.T) {
	w, _ := testWorker(1, []int{0}, WorkerConfig{})
	called := 0
	h := w.instrument(nil, func(context.Context, runner.Call) runner.Result { called++; return runner.Result{} })
	h(context.Background(), runner.Call{})
	if called != 1 {
		t.Fatal("the handler was not called")
	}
	if testing.AllocsPerRun(100, func() { h(context.Background(), runner.Call{}) }) != 0 {
		t.Error("the bare handler path allocates")
	}
}

// BenchmarkHandlerWrapper measures what the wrapper of a handler call costs,
// around a handler that does nothing: plain (no Registerer, no
// TracerProvider), metrics (the duration observation), tracing with a
// no-op provider, both, and tracing with the SDK's provider sampling every
// span (no exporter: the span's own cost, attributes included).
//
//	go test -run '^$' -bench HandlerWrapper -benchmem ./partitionq/
func BenchmarkHandlerWrapper(b *testing.B) {
	call := runner.Call{Event: engine.Event{ID: 42, Key: "tenant-1", Type: "FileCreated"}, Slot: 3, Attempt: 1}
	nop := func(context.Context, runner.Call) runner.Result { return runner.Result{} }
	for _, c := range []struct {
		name    string
		metrics bool
		tp      trace.TracerProvider
	}{{"plain", false, nil}, {"metrics", true, nil}, {"tracing-noop", false, noop.NewTracerProvider()},
		{"metrics+tracing-noop", true, noop.NewTracerProvider()}, {"tracing-sdk", false, sdktrace.NewTracerProvider()}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := WorkerConfig{TracerProvider: c.tp}
			w, gr := testWorker(8, []int{0, 1, 2, 3, 4, 5, 6, 7}, cfg)
			var m *workerMetrics
			if c.metrics {
				m = newWorkerMetrics(w, gr)
			}
			h := w.instrument(m, nop)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				h(ctx, call)
			}
		})
	}
}

// TestDocsListEveryMetric: docs/operations.md lists every metric a worker
// or a client (its counter of duplicates) exports, and its rules and
// queries name no other.
func TestDocsListEveryMetric(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	// A worker with a run handler: it exports every metric a worker may.
	w, gr := testWorker(1, []int{0}, WorkerConfig{Handler: Runs(RunHandlerFunc(func(context.Context, []*Event) error { return nil }))})
	m := newWorkerMetrics(w, gr)
	w.status.read = func(context.Context) (GroupStatus, error) {
		return GroupStatus{Slots: 1, SlotStatus: []SlotStatus{{Slots: 1}}}, nil
	}
	w.status.readHot = func(context.Context, GroupStatus) (HotKeys, error) {
		return HotKeys{Busiest: []KeyPending{{}}}, nil
	}
	reg := prometheus.NewRegistry()
	if err := m.register(reg); err != nil {
		t.Fatal(err)
	}
	dups, err := registerClientMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	dups.WithLabelValues("q").Inc() // a vector without a series is not gathered
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range fams {
		known[f.GetName()] = true
		row := "| `" + f.GetName() + "` | " + strings.ToLower(f.GetType().String()) + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/operations.md has no row %q", row)
		}
	}
	if len(known) != 14 {
		t.Errorf("the worker and the client export %d metrics, want 14", len(known))
	}
	for _, name := range regexp.MustCompile(`partitionq_[a-z_]+`).FindAllString(doc, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !known[base] {
			t.Errorf("docs/operations.md names %s, which neither a worker nor a client exports", name)
		}
	}
}
