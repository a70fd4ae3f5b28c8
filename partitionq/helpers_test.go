package partitionq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// bundle is what most tests need: a fresh database, a pool and a client.
type bundle struct {
	db     pgtest.DB
	pool   *pgxpool.Pool
	client *partitionq.Client
	ctx    context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupPool(t, 40)
}

// setupPool is setup with a client pool of maxConns connections.
func setupPool(t *testing.T, maxConns int) *bundle {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, maxConns)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := partitionq.Config{}
	if os.Getenv("PQ_TEST_LOG") != "" { // debug aid: PQ_TEST_LOG=1 go test -v
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := partitionq.NewClient(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, pool: pool, client: c, ctx: ctx}
}

// group sets up queue "q" with group "g" of n slots, ticking fast.
func (b *bundle) group(t *testing.T, n int) {
	t.Helper()
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: n, TickMaxLag: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

// worker starts a worker on q/g that ticks fast; it is stopped at cleanup.
func (b *bundle) worker(t *testing.T, cfg partitionq.WorkerConfig) *partitionq.Worker {
	t.Helper()
	return startWorker(t, b.ctx, b.client, cfg)
}

// startWorker starts a worker of client c on q/g that ticks fast, as
// bundle.worker does, for a test whose worker needs a client of its own;
// it is stopped at cleanup.
func startWorker(t *testing.T, ctx context.Context, c *partitionq.Client, cfg partitionq.WorkerConfig) *partitionq.Worker {
	t.Helper()
	cfg.Queue, cfg.Group = "q", "g"
	if cfg.Ticker == nil {
		cfg.Ticker = &partitionq.TickerConfig{Interval: 25 * time.Millisecond}
	}
	if cfg.Limits.PollInterval == 0 {
		cfg.Limits.PollInterval = 25 * time.Millisecond
	}
	if cfg.Ownership.StandbyPoll == 0 {
		cfg.Ownership.StandbyPoll = 100 * time.Millisecond
	}
	if cfg.Retry.HeadScanInterval == 0 {
		cfg.Retry.HeadScanInterval = 50 * time.Millisecond
	}
	w, err := c.NewWorker(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return w
}

// sendRounds sends rounds x keys events, key-major inside each round, one
// batch per round, and returns the payload sequence sent per key.
func (b *bundle) sendRounds(t *testing.T, keys, rounds int) map[string][]string {
	t.Helper()
	sent := map[string][]string{}
	for r := 0; r < rounds; r++ {
		var ms []partitionq.Message
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("tenant-%d", k)
			p := fmt.Sprintf(`{"seq":%d}`, r)
			ms = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(p)})
			sent[key] = append(sent[key], p)
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
	}
	return sent
}

// recorder is a handler that records what it handles and checks that no
// key is ever handled twice at once.
type recorder struct {
	mu     sync.Mutex
	t      *testing.T
	byKey  map[string][]string
	slotOf map[string]int
	ids    map[int64]int
	inKey  map[string]bool
	total  int
	fail   func(ev *partitionq.Event) error // optional
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, byKey: map[string][]string{}, slotOf: map[string]int{}, ids: map[int64]int{}, inKey: map[string]bool{}}
}

func (r *recorder) Handle(ctx context.Context, ev *partitionq.Event) error {
	r.mu.Lock()
	if r.inKey[ev.Key] {
		r.t.Errorf("key %s handled twice at once (event %d)", ev.Key, ev.ID)
	}
	r.inKey[ev.Key] = true
	if s, ok := r.slotOf[ev.Key]; ok && s != ev.Slot {
		r.t.Errorf("key %s handled on slots %d and %d", ev.Key, s, ev.Slot)
	}
	r.slotOf[ev.Key] = ev.Slot
	fail := r.fail
	r.mu.Unlock()

	var err error
	if fail != nil {
		err = fail(ev)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.inKey[ev.Key] = false
	if err == nil {
		r.byKey[ev.Key] = append(r.byKey[ev.Key], string(ev.Payload))
		r.ids[ev.ID]++
		r.total++
	}
	return err
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *recorder) waitTotal(t *testing.T, n int) {
	t.Helper()
	pgtest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d handled events", n), func() (bool, error) {
		return r.count() >= n, nil
	})
}

// resultIDs are the event ids of a send's results.
func resultIDs(res []partitionq.SendResult) []int64 {
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}
