package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/chaos"
	"github.com/partitionq/partitionq/test/pgtest"
)

// inproc is a library worker running in the test process on a database of
// the throwaway cluster.
type inproc struct {
	t      *testing.T
	cl     *chaos.Cluster
	pool   *pgxpool.Pool
	client *partitionq.Client
	ctx    context.Context

	mu     sync.Mutex
	log    []ordercheck.Handling
	inKey  map[string]bool
	sent   map[string]int
	batch  int
	errors []string
}

func newInproc(t *testing.T, slots int) *inproc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cl, pool, c := clusterGroup(ctx, t, slots, partitionq.WorkerConns(), "inproc-worker")
	if _, err := pool.Exec(ctx, `create table sent_batch (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	return &inproc{t: t, cl: cl, pool: pool, client: c, ctx: ctx, inKey: map[string]bool{}, sent: map[string]int{}}
}

// clusterGroup makes a database of its own on the throwaway cluster, a
// pool of maxConns connections to it (named app, when given) and a client,
// and sets up group "g" of queue "q" with slots slots and a 20 ms tick lag.
func clusterGroup(ctx context.Context, t *testing.T, slots, maxConns int, app string) (*chaos.Cluster, *pgxpool.Pool, *partitionq.Client) {
	t.Helper()
	cl := needCluster(t)
	url, err := chaos.NewDatabase(ctx, cl, pgtest.Engine(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(maxConns)
	if app != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: slots, TickMaxLag: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return cl, pool, c
}

// Handle logs each handling in call order and fails the run if a key is
// ever handled twice at once.
func (p *inproc) Handle(ctx context.Context, ev *partitionq.Event) error {
	var seq int
	if _, err := fmt.Sscanf(string(ev.Payload), "%d", &seq); err != nil {
		return partitionq.DeadLetterNow(err)
	}
	p.mu.Lock()
	if p.inKey[ev.Key] {
		p.errors = append(p.errors, fmt.Sprintf("key %s handled twice at once", ev.Key))
	}
	p.inKey[ev.Key] = true
	p.mu.Unlock()
	time.Sleep(time.Millisecond)
	p.mu.Lock()
	p.inKey[ev.Key] = false
	p.log = append(p.log, ordercheck.Handling{Key: ev.Key, Seq: seq, OK: true})
	p.mu.Unlock()
	return nil
}

func (p *inproc) start(cfg partitionq.WorkerConfig) *partitionq.Worker {
	p.t.Helper()
	cfg.Queue, cfg.Group, cfg.Handler = "q", "g", p
	cfg.Ticker, cfg.Limits.PollInterval = &partitionq.TickerConfig{Interval: 10 * time.Millisecond}, 10*time.Millisecond
	cfg.Ownership.StandbyPoll, cfg.Retry.HeadScanInterval = 100*time.Millisecond, 50*time.Millisecond
	cfg.Retry.BackoffMin, cfg.Retry.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	w, err := p.client.NewWorker(p.ctx, cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := w.Start(p.ctx); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { // Stop is safe to call again
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			p.t.Errorf("stop worker: %v", err)
		}
	})
	return w
}

// noLeaks checks at the end of the test, after every cleanup (the worker
// stopped, the pool closed), that no goroutine the test started is left.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// send sends one round of events for keys, with a marker row in the same
// transaction so that a send whose commit answer was lost is retried only
// when it did not commit.
func (p *inproc) send(keys int) {
	p.t.Helper()
	p.mu.Lock()
	p.batch++
	id := p.batch
	var ms []partitionq.Message
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		ms = append(ms, partitionq.Message{Key: key, Payload: []byte(fmt.Sprint(p.sent[key]))})
		p.sent[key]++
	}
	p.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		err := pgx.BeginFunc(p.ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := p.client.SendBatchTx(p.ctx, tx, "q", ms); err != nil {
				return err
			}
			_, err := tx.Exec(p.ctx, `insert into sent_batch values ($1)`, id)
			return err
		})
		if err == nil {
			return
		}
		var done bool
		if qerr := p.pool.QueryRow(p.ctx, `select exists (select 1 from sent_batch where id = $1)`, id).Scan(&done); qerr == nil && done {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("send: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the server is restarting: try again
	}
}

// waitAll waits until every event sent was handled.
func (p *inproc) waitAll(what string) {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p.mu.Lock()
		r := ordercheck.Check(p.sent, p.log, nil)
		p.mu.Unlock()
		if r.Lost == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: after a minute: %s", what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *inproc) verdict() ordercheck.Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errors {
		p.t.Error(e)
	}
	return ordercheck.Check(p.sent, p.log, nil)
}

func (p *inproc) terminateAll() int {
	p.t.Helper()
	var n int
	if err := p.pool.QueryRow(p.ctx, `select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'`).Scan(&n); err != nil {
		p.t.Fatal(err)
	}
	return n
}

// A library worker in this process keeps going on its own across a clean
// PostgreSQL restart, a crash restart (immediate shutdown, crash recovery)
// and the termination of all its sessions: events sent after each are
// handled, in order, nothing lost. Then it stops within its shutdown
// timeout and leaves no goroutine behind.
func TestWorkerReconnectsInProcess(t *testing.T) {
	noLeaks(t)
	p := newInproc(t, 4)
	w := p.start(partitionq.WorkerConfig{Limits: partitionq.LimitsConfig{Concurrency: 4, ShutdownTimeout: 5 * time.Second}})
	const keys = 40
	p.send(keys)
	p.waitAll("before any restart")
	for i, step := range []string{"fast", "immediate", "terminate", "fast"} {
		if step == "terminate" {
			t.Logf("terminated %d sessions", p.terminateAll())
		} else if err := p.cl.Restart(p.ctx, step); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		for range 3 {
			p.send(keys)
		}
		p.waitAll(fmt.Sprintf("after step %d (%s)", i+1, step))
		t.Logf("after %s: all events handled %s later", step, time.Since(up).Round(10*time.Millisecond))
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	r := p.verdict()
	t.Logf("%s", r)
	if !r.OK() {
		t.Fatalf("%s: %v", r, r.Examples)
	}
}

// How long a slot stays without an owner after its session is cut, when
// no standby runs: the slot loop retries with a backoff that starts at
// 200ms. Each cut is a separate incident after a healthy period, so each
// recovery should take about the first backoff step, not grow with the
// number of incidents the slot has seen over its life.
func TestSlotRecoveryDoesNotSlowDownOverIncidents(t *testing.T) {
	noLeaks(t)
	p := newInproc(t, 1)
	p.start(partitionq.WorkerConfig{Identity: "inproc-worker", Limits: partitionq.LimitsConfig{Concurrency: 2, ShutdownTimeout: 5 * time.Second}})
	owner := func() *partitionq.Owner {
		st, err := p.client.Status(p.ctx, "q", "g")
		if err != nil {
			return nil
		}
		return st.SlotStatus[0].Owner
	}
	var first *partitionq.Owner
	pgtest.WaitFor(t, 30*time.Second, "the slot owned", func() (bool, error) { first = owner(); return first != nil, nil })
	var took []time.Duration
	for i := range 7 {
		// A healthy period between incidents: events flow.
		p.send(10)
		p.waitAll(fmt.Sprintf("before incident %d", i+1))
		var n int
		if err := p.pool.QueryRow(p.ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
			where application_name = 'inproc-worker' and pid <> pg_backend_pid()`).Scan(&n); err != nil || n == 0 {
			t.Fatalf("terminate the worker's sessions: %d terminated, %v", n, err)
		}
		cut := time.Now()
		// Recovery: an event sent after the cut is handled.
		p.send(1)
		p.waitAll(fmt.Sprintf("after incident %d", i+1))
		d := time.Since(cut)
		took = append(took, d.Round(10*time.Millisecond))
		// Losing sessions loses no ownership: the worker reconnects and
		// renews its lease in time, so the slot never changes hands.
		if o := owner(); o == nil || o.Epoch != first.Epoch || o.PID != first.PID {
			t.Fatalf("incident %d: owner %+v, was %+v: the slot changed hands", i+1, o, first)
		}
		// A retry backoff that is never reset grows with every incident;
		// a reset one stays near its first step. 5s leaves a loaded machine
		// room without hiding the growth.
		if d > 5*time.Second {
			t.Fatalf("incident %d: handling resumed %s after the sessions were cut (so far: %v): recovery slows down with every incident", i+1, d, took)
		}
	}
	t.Logf("time until handling resumed after each of 7 incidents: %v", took)
}
