package partitionq_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// scrape fetches url over HTTP and parses the text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: parse: %v", url, err)
	}
	return fams
}

// series returns the value of every series of name by its slot label,
// after checking its queue and group labels. For a histogram, the value
// is its count.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	f, ok := fams[name]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["queue"] != "q" || labels["group"] != "g" || labels["slots"] == "" || len(labels) != 4 {
			t.Errorf("%s has labels %v, want queue=q group=g slots slot", name, labels)
		}
		slot, err := strconv.Atoi(labels["slot"])
		if err != nil {
			t.Fatalf("%s: slot label %q", name, labels["slot"])
		}
		switch {
		case m.Counter != nil:
			out[slot] = m.Counter.GetValue()
		case m.Gauge != nil:
			out[slot] = m.Gauge.GetValue()
		case m.Histogram != nil:
			out[slot] = float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

func sum(m map[int]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// serveRegistry serves reg's /metrics over HTTP for the test.
func serveRegistry(t *testing.T, reg *prometheus.Registry) string {
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// TestMetricsScrapedAgreeWithStatsAndStatus runs a worker with a
// Registerer, one key that blocks (pause, a retry far away) and one whose
// event goes to the dead letters at once, scrapes /metrics over HTTP and
// checks the counters against what was handled and the gauges against
// Status.
func TestMetricsScrapedAgreeWithStatsAndStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	reg := prometheus.NewRegistry()
	url := serveRegistry(t, reg)
	rec := newRecorder(t)
	rec.fail = func(ev *partitionq.Event) error {
		switch ev.Key {
		case "bad":
			return errBoom
		case "dead":
			return partitionq.DeadLetterNow(errBoom)
		}
		return nil
	}
	w := b.worker(t, partitionq.WorkerConfig{Handler: rec, Registerer: reg, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}})
	b.sendRounds(t, 10, 3) // 30 events that succeed
	for _, k := range []string{"bad", "bad", "dead"} {
		if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: k, Type: "T", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	slotBad, err := b.client.SlotOf(b.ctx, "bad", 2)
	if err != nil {
		t.Fatal(err)
	}
	var st partitionq.GroupStatus
	pgtest.WaitFor(t, 60*time.Second, "30 handled, 2 failed, 1 dead letter, 1 blocked key, every batch finished", func() (bool, error) {
		var handled, failed, dead int64
		for _, s := range w.Stats() {
			handled, failed, dead = handled+s.Handled, failed+s.Failed, dead+s.DeadLettered
		}
		if handled != 30 || failed != 2 || dead != 1 {
			return false, nil
		}
		var err error
		st, err = b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for _, s := range st.SlotStatus {
			if s.InBatch || s.Pending != 0 { // the end state: what the scrape reads next is the same
				return false, nil
			}
		}
		return st.SlotStatus[slotBad].BlockedKeys == 1 && st.SlotStatus[slotBad].SetAside == 2, nil
	})

	fams := scrape(t, url)
	stats := w.Stats()
	handled, failed, dead := series(t, fams, "partitionq_events_handled_total"), series(t, fams, "partitionq_events_failed_total"),
		series(t, fams, "partitionq_dead_letters_total")
	calls := series(t, fams, "partitionq_handler_duration_seconds")
	for _, s := range stats {
		if handled[s.Slot] != float64(s.Handled) || failed[s.Slot] != float64(s.Failed) || dead[s.Slot] != float64(s.DeadLettered) {
			t.Errorf("slot %d: scraped handled %v failed %v dead %v, worker counted %d %d %d", s.Slot,
				handled[s.Slot], failed[s.Slot], dead[s.Slot], s.Handled, s.Failed, s.DeadLettered)
		}
		if calls[s.Slot] != float64(s.Handled+s.Failed) {
			t.Errorf("slot %d: %v handler durations observed, want one per call (%d)", s.Slot, calls[s.Slot], s.Handled+s.Failed)
		}
	}
	if sum(handled) != 30 || sum(failed) != 2 || sum(dead) != 1 || sum(calls) != 32 {
		t.Errorf("scraped handled %v failed %v dead letters %v calls %v, want 30, 2, 1, 32", sum(handled), sum(failed), sum(dead), sum(calls))
	}

	// The gauges, from one status read, agree with Status.
	owned, pending, lag := series(t, fams, "partitionq_slot_owned"), series(t, fams, "partitionq_slot_pending_events"),
		series(t, fams, "partitionq_slot_lag_seconds")
	blocked, setAside, longest := series(t, fams, "partitionq_blocked_keys"), series(t, fams, "partitionq_set_aside_events"),
		series(t, fams, "partitionq_slot_longest_blocked_seconds")
	for _, s := range st.SlotStatus {
		if owned[s.Slot] != 1 {
			t.Errorf("slot %d: partitionq_slot_owned %v, want 1 (owner %+v)", s.Slot, owned[s.Slot], s.Owner)
		}
		if blocked[s.Slot] != float64(s.BlockedKeys) || setAside[s.Slot] != float64(s.SetAside) {
			t.Errorf("slot %d: scraped blocked keys %v, set aside %v; Status says %d, %d",
				s.Slot, blocked[s.Slot], setAside[s.Slot], s.BlockedKeys, s.SetAside)
		}
		if pending[s.Slot] != float64(s.Pending) {
			t.Errorf("slot %d: scraped pending %v, Status says %d", s.Slot, pending[s.Slot], s.Pending)
		}
		if _, ok := lag[s.Slot]; !ok || math.Abs(lag[s.Slot]-s.Lag.Seconds()) > 2 {
			t.Errorf("slot %d: scraped lag %v s, Status says %s", s.Slot, lag[s.Slot], s.Lag)
		}
	}
	if blocked[slotBad] != 1 || setAside[slotBad] != 2 {
		t.Errorf("slot %d of key bad: blocked keys %v, set-aside events %v; want 1 and 2", slotBad, blocked[slotBad], setAside[slotBad])
	}
	if l := longest[slotBad]; l <= 0 || l > 60 {
		t.Errorf("slot %d: longest blocked %v s, want the age of bad's first failure", slotBad, l)
	}
	if l := longest[1-slotBad]; l != 0 {
		t.Errorf("slot %d blocks no key, but longest blocked is %v s", 1-slotBad, l)
	}

	// Stopped, the worker leaves the registry.
	if err := w.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	if fams := scrape(t, url); len(fams) != 0 {
		t.Errorf("a stopped worker's metrics are still registered: %d families", len(fams))
	}
}

// TestMetricsTwoWorkersOneRegisterer: workers of one process running
// disjoint slots of a group share a Registerer; one asking for slots
// already registered there fails to start with an error that says what to
// do; a worker's stop frees its slots' metrics for the next.
func TestMetricsTwoWorkersOneRegisterer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	reg := prometheus.NewRegistry()
	url := serveRegistry(t, reg)
	h := partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })
	a := b.worker(t, partitionq.WorkerConfig{Handler: h, Registerer: reg, Pins: []int{0, 1}, Identity: "a"})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Registerer: reg, Pins: []int{2, 3}, Identity: "b"})
	b.sendRounds(t, 8, 2)
	pgtest.WaitFor(t, 60*time.Second, "16 events handled", func() (bool, error) {
		return sum(series(t, scrape(t, url), "partitionq_events_handled_total")) == 16, nil
	})
	owned := series(t, scrape(t, url), "partitionq_slot_owned")
	if len(owned) != 4 {
		t.Errorf("partitionq_slot_owned for slots %v, want 0 to 3 (two workers)", owned)
	}

	c, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h, Registerer: reg, Pins: []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(b.ctx)
	if err == nil {
		c.Stop(b.ctx) // the test fails anyway
		t.Fatal("a third worker registered slots 1 and 2 a second time on the same Registerer")
	}
	for _, want := range []string{"WorkerConfig.Registerer", `queue "q" group "g" slots 1,2`, "disjoint Slots", "its own Registerer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not mention %q", err, want)
		}
	}

	// A Registerer of its own takes the same slots.
	b.worker(t, partitionq.WorkerConfig{Handler: h, Registerer: prometheus.NewRegistry(), Pins: []int{1, 2}, Identity: "c"})

	if err := a.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.worker(t, partitionq.WorkerConfig{Handler: h, Registerer: reg, Pins: []int{0, 1}, Identity: "a2"})
}

// TestMetricsScrapeBoundedWhenTheDatabaseHangs: with every connection of
// the client's pool held, the status read cannot run; a scrape still
// answers (within the read's 2s bound), with the counters and without the
// gauges.
func TestMetricsScrapeBoundedWhenTheDatabaseHangs(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setupPool(t, 3)
	b.group(t, 2)
	reg := prometheus.NewRegistry()
	url := serveRegistry(t, reg)
	b.worker(t, partitionq.WorkerConfig{Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil }), Registerer: reg})
	var held []*pgxpool.Conn
	for range 3 {
		conn, err := b.pool.Acquire(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	fams := scrape(t, url) // the client's timeout (20s) fails the test if it hangs
	if len(series(t, fams, "partitionq_events_handled_total")) != 2 {
		t.Errorf("the counters are missing from a scrape whose status read could not run")
	}
	if g := series(t, fams, "partitionq_slot_owned"); len(g) != 0 {
		t.Errorf("gauges %v served though the status read could not run", g)
	}
	for _, c := range held {
		c.Release()
	}
	// The cached failure is read again once it is a second old.
	pgtest.WaitFor(t, 30*time.Second, "the gauges back once the database answers", func() (bool, error) {
		return len(series(t, scrape(t, url), "partitionq_slot_owned")) == 2, nil
	})
}

// The client's counter of duplicates (Config.Registerer): one per message
// refused, by queue, in batches too; clients sharing a registry share it;
// a client without a Registerer counts nothing.
func TestSendDuplicatesMetric(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q2", Group: "g", Slots: 1}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c1, err := partitionq.NewClient(b.ctx, b.pool, partitionq.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := partitionq.NewClient(b.ctx, b.pool, partitionq.Config{Registerer: reg})
	if err != nil {
		t.Fatalf("a second client on the same registry: %v", err)
	}
	m := func(id string) partitionq.Message { return partitionq.Message{Key: "k", DedupID: id} }
	for _, send := range []func() error{
		func() error { _, err := c1.Send(b.ctx, "q", m("a")); return err }, // new
		func() error { _, err := c1.Send(b.ctx, "q", m("a")); return err }, // 1
		func() error {
			_, err := c2.SendBatch(b.ctx, "q", []partitionq.Message{m("a"), m("b"), m("b")})
			return err
		}, // 2
		func() error { _, err := c2.Send(b.ctx, "q2", m("a")); return err },      // new, on q2
		func() error { _, err := c1.Send(b.ctx, "q2", m("a")); return err },      // q2: 1
		func() error { _, err := b.client.Send(b.ctx, "q", m("a")); return err }, // not counted here
	} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "partitionq_send_duplicates_total" {
			t.Errorf("unexpected metric %s", mf.GetName())
			continue
		}
		for _, s := range mf.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	if got["q"] != 3 || got["q2"] != 1 || len(got) != 2 {
		t.Errorf("partitionq_send_duplicates_total: %v, want q 3, q2 1", got)
	}
}
