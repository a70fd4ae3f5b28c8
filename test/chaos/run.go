// Package chaos runs partitionq through the failures it must survive, on a
// throwaway PostgreSQL cluster of its own: worker processes killed with
// SIGKILL, the server restarted (cleanly and by crash), worker backends
// terminated with pg_terminate_backend, all at random while events flow
// under the pause policy with about 2% failing events. Afterwards it judges
// the run with internal/ordercheck: nothing lost, no event handled while an
// earlier event of its key was unresolved, blocked keys still blocked across
// restarts, and the number of repeated deliveries.
//
// Soak runs a steady load for minutes and samples worker memory, goroutines,
// and the engine's table rotation and dead tuples.
//
// The short chaos run is a test (go test ./test/chaos); the long form and
// the soak are the command test/cmd/chaos (make chaos). See
// docs/chaos.md.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// Config configures a chaos run. Zero values mean the defaults, which are
// the short form (about 30 seconds).
type Config struct {
	// Workers is the number of worker processes. Defaults to 4: two that
	// run half the slots each and two that run all (standbys).
	Workers int
	// Slots is the number of slots N of the group. Defaults to 8.
	Slots int
	// Keys is the number of partition keys. Defaults to 300.
	Keys int
	// EventsPerKey defaults to 25.
	EventsPerKey int
	// StuckKeys is the number of keys whose second event fails until an
	// operator skips it at the end: they stay blocked across every restart.
	// Defaults to 3.
	StuckKeys int
	// FailPermille is how many events in 1000 fail once or twice, then
	// succeed. Defaults to 16.
	FailPermille int
	// PoisonPermille is how many events in 1000 fail up to twice and then
	// ask for a dead letter (partitionq.DeadLetterNow). Defaults to 4.
	PoisonPermille int
	// Duration is the length of the chaos phase; events are sent during its
	// first 80%. Defaults to 25s.
	Duration time.Duration
	// Kills, Restarts and Terminations are how many kill -9 of a worker
	// process, PostgreSQL restarts, and pg_terminate_backend rounds the run
	// does. Defaults to 12, 2 and 12.
	Kills, Restarts, Terminations int
	// Concurrency is the in-slot concurrency of each worker. Defaults to 8.
	Concurrency int
	// Seed seeds the random choices. Defaults to the clock.
	Seed uint64
	// WorkerBin is the testworker binary (BuildWorker). Required.
	WorkerBin string
	// WorkerLog receives the workers' stderr. Defaults to discarding it.
	WorkerLog io.Writer
	// Logf receives progress messages. Defaults to discarding them.
	Logf func(format string, args ...any)
	// Engine is the queue engine the run's database gets. Defaults to PgQ.
	Engine freshdb.Engine
}

// Long returns the long form: minutes, many workers and keys.
func Long() Config {
	return Config{Workers: 8, Slots: 16, Keys: 1000, EventsPerKey: 150, StuckKeys: 5,
		Duration: 5 * time.Minute, Kills: 100, Restarts: 6, Terminations: 150}
}

func (c Config) withDefaults() Config {
	if c.Engine.Name == "" {
		c.Engine.Name = freshdb.PgQ
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Workers, 4)
	def(&c.Slots, 8)
	def(&c.Keys, 300)
	def(&c.EventsPerKey, 25)
	def(&c.StuckKeys, 3)
	def(&c.FailPermille, 16)
	def(&c.PoisonPermille, 4)
	def(&c.Kills, 12)
	def(&c.Restarts, 2)
	def(&c.Terminations, 12)
	def(&c.Concurrency, 8)
	if c.Duration == 0 {
		c.Duration = 25 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.WorkerLog == nil {
		c.WorkerLog = io.Discard
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Report is the verdict of a chaos run.
type Report struct {
	ordercheck.Report
	Seed                          uint64
	Kills, Restarts, Terminations int
	// TerminatedBackends counts the server sessions pg_terminate_backend
	// ended (a round ends one to three).
	TerminatedBackends int
	// OwnerTerminations counts terminated sessions that held a slot.
	OwnerTerminations int
	// SendRetries counts producer batches sent again because the server
	// went away before the commit was known.
	SendRetries int
	// StuckChecks counts the times a stuck key was found still blocked on
	// the same head right after a restart.
	StuckChecks int
	// Recoveries holds, per restart, the time from the server accepting
	// connections again until every slot was owned and handling resumed.
	Recoveries []time.Duration
	// FailingEvents and PoisonEvents are what the plan sent; WantDead is
	// PoisonEvents plus the stuck keys' heads (skipped at the end).
	FailingEvents, PoisonEvents, WantDead int
	// Leftover counts rows left in the engine's retry queue and in
	// partitionq.failure after everything was resolved (must be 0).
	Leftover int
	Elapsed  time.Duration
	Problems []string
}

// OK reports a clean run.
func (r Report) OK() bool {
	return r.Report.OK() && len(r.Problems) == 0 && r.Dead == r.WantDead && r.Leftover == 0
}

func (r Report) String() string {
	var rec []string
	for _, d := range r.Recoveries {
		rec = append(rec, d.Round(10*time.Millisecond).String())
	}
	s := fmt.Sprintf("%s; %d kills, %d restarts (recovered in %s), %d termination rounds (%d backends, %d slot owners), "+
		"%d stuck-key checks, %d send retries, %d failing + %d poison events, want %d dead, leftover %d; %s, seed %d",
		r.Report.String(), r.Kills, r.Restarts, strings.Join(rec, ", "), r.Terminations, r.TerminatedBackends, r.OwnerTerminations,
		r.StuckChecks, r.SendRetries, r.FailingEvents, r.PoisonEvents, r.WantDead, r.Leftover, r.Elapsed.Round(time.Second), r.Seed)
	if len(r.Problems) > 0 {
		s += "; problems: " + strings.Join(r.Problems, "; ")
	}
	if len(r.Examples) > 0 {
		s += "; examples: " + strings.Join(r.Examples, "; ")
	}
	return s
}

const (
	queueName = "q"
	groupName = "g"
)

// planned is one event to send.
type planned struct {
	key  string
	seq  int
	f    int  // failures before success
	dead bool // ask for a dead letter after the failures
}

type plan struct {
	batches  [][]planned
	sent     map[string]int
	stuck    []string // stuck keys; their head is seq 1
	failing  int
	poison   int
	stuckSeq int
}

func makePlan(cfg Config, rng *rand.Rand) plan {
	p := plan{sent: map[string]int{}, stuckSeq: 1}
	keys := make([]string, 0, cfg.Keys+cfg.StuckKeys)
	for k := range cfg.Keys {
		keys = append(keys, fmt.Sprintf("tenant-%d", k))
	}
	for k := range cfg.StuckKeys {
		s := fmt.Sprintf("stuck-%d", k)
		keys = append(keys, s)
		p.stuck = append(p.stuck, s)
	}
	stuck := map[string]bool{}
	for _, k := range p.stuck {
		stuck[k] = true
	}
	var all []planned
	for s := range cfg.EventsPerKey {
		order := rng.Perm(len(keys))
		for _, i := range order {
			k := keys[i]
			ev := planned{key: k, seq: s}
			switch x := rng.IntN(1000); {
			case stuck[k] && s == p.stuckSeq:
				ev.f = 1 << 30 // fails until an operator skips it
			case x < cfg.PoisonPermille:
				ev.f, ev.dead = rng.IntN(3), true
				p.poison++
			case x < cfg.PoisonPermille+cfg.FailPermille:
				ev.f = 1 + rng.IntN(2)
				p.failing++
			}
			all = append(all, ev)
			p.sent[k] = cfg.EventsPerKey
		}
	}
	size := max(20, len(all)/150)
	for len(all) > 0 {
		n := min(size, len(all))
		p.batches = append(p.batches, all[:n])
		all = all[n:]
	}
	return p
}

type run struct {
	cfg     Config
	cl      *Cluster
	url     string
	pool    *pgxpool.Pool
	client  *partitionq.Client
	rng     *rand.Rand
	procs   []*Proc
	args    [][]string
	rep     *Report
	retries atomic.Int64
}

// Run does one chaos run on cl (which it restarts) and returns its report.
// An error means the run could not be carried out (the harness failed);
// the verdict on the library is in the report (Report.OK).
func Run(ctx context.Context, cl *Cluster, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	if cfg.WorkerBin == "" {
		return Report{}, errors.New("chaos.Config.WorkerBin is required: build it with BuildWorker")
	}
	start := time.Now()
	rep := &Report{Seed: cfg.Seed}
	r := &run{cfg: cfg, cl: cl, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), rep: rep}
	var err error
	if r.url, err = NewDatabase(ctx, cl, cfg.Engine); err != nil {
		return *rep, err
	}
	if r.pool, err = harnessPool(ctx, r.url, 8); err != nil {
		return *rep, err
	}
	defer r.pool.Close()
	if r.client, err = partitionq.NewClient(ctx, r.pool, partitionq.Config{Actor: "chaos"}); err != nil {
		return *rep, err
	}
	if _, err := r.client.Setup(ctx, partitionq.GroupSpec{Queue: queueName, Group: groupName, Slots: cfg.Slots, TickMaxLag: 20 * time.Millisecond}); err != nil {
		return *rep, err
	}
	if _, err := r.pool.Exec(ctx, runLogDDL); err != nil {
		return *rep, err
	}
	p := makePlan(cfg, r.rng)
	rep.FailingEvents, rep.PoisonEvents, rep.WantDead = p.failing, p.poison, p.poison+len(p.stuck)
	defer r.stopWorkers()
	if err := r.startWorkers(ctx); err != nil {
		return *rep, err
	}
	cfg.Logf("chaos: %d workers own all %d slots; sending %d events over %d keys (%d failing, %d poison, %d stuck keys) during %s",
		cfg.Workers, cfg.Slots, cfg.EventsPerKey*(cfg.Keys+cfg.StuckKeys), cfg.Keys+cfg.StuckKeys, p.failing, p.poison, len(p.stuck), cfg.Duration)

	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	prodDone := make(chan error, 1)
	window := cfg.Duration * 8 / 10
	go func() { prodDone <- r.produce(prodCtx, p.batches, window) }()

	heads := map[string]int64{} // stuck key -> its head, once seen blocked
	if err := r.chaos(ctx, p, heads); err != nil {
		stopProd()
		<-prodDone
		return *rep, err
	}
	if err := <-prodDone; err != nil {
		return *rep, fmt.Errorf("producer: %w", err)
	}
	rep.SendRetries = int(r.retries.Load())
	if err := r.finish(ctx, p, heads); err != nil {
		return *rep, err
	}
	rep.Elapsed = time.Since(start)
	return *rep, nil
}

// workerArgs gives half the workers a share of the slots each and the
// other half all slots, so every slot has an owner and a standby.
func (r *run) workerArgs(i int) []string {
	n, w := r.cfg.Slots, r.cfg.Workers
	slots := "all"
	if owners := w / 2; i < owners && owners > 0 {
		var s []string
		for x := i * n / owners; x < (i+1)*n/owners; x++ {
			s = append(s, strconv.Itoa(x))
		}
		if len(s) > 0 {
			slots = strings.Join(s, ",")
		}
	}
	return []string{"-db", r.url, "-queue", queueName, "-group", groupName, "-slots", slots,
		"-concurrency", strconv.Itoa(r.cfg.Concurrency), "-backoff-max", "500ms"}
}

func (r *run) startWorkers(ctx context.Context) error {
	for i := range r.cfg.Workers {
		args := r.workerArgs(i)
		p, err := StartWorkerRetry(ctx, r.cfg.WorkerBin, args, r.cfg.WorkerLog, time.Minute)
		if err != nil {
			return err
		}
		r.procs, r.args = append(r.procs, p), append(r.args, args)
	}
	return poll(ctx, 60*time.Second, "every slot owned", func(ctx context.Context) (bool, error) {
		o, err := slotOwners(ctx, r.client, queueName, groupName)
		return len(o) == r.cfg.Slots, err
	})
}

func (r *run) stopWorkers() {
	for _, p := range r.procs {
		if p != nil {
			p.Kill()
		}
	}
}

// produce sends the batches spread over window, each with a marker row in
// the same transaction, so a batch whose commit was cut off is sent again
// exactly when it did not commit.
func (r *run) produce(ctx context.Context, batches [][]planned, window time.Duration) error {
	t0 := time.Now()
	for i, b := range batches {
		if err := r.sendBatch(ctx, i, b); err != nil {
			return err
		}
		if d := time.Until(t0.Add(window * time.Duration(i+1) / time.Duration(len(batches)))); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return nil
}

type payload struct {
	K string `json:"k"`
	S int    `json:"s"`
	F int    `json:"f"`
	D bool   `json:"d,omitempty"`
}

func (r *run) sendBatch(ctx context.Context, id int, evs []planned) error {
	ms := make([]partitionq.Message, len(evs))
	for i, ev := range evs {
		b, _ := json.Marshal(payload{K: ev.key, S: ev.seq, F: ev.f, D: ev.dead})
		ms[i] = partitionq.Message{Key: ev.key, Type: "ChaosEvent", Payload: b}
	}
	for {
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := r.client.SendBatchTx(ctx, tx, queueName, ms); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `insert into pq_sent_batch (id, events) values ($1, $2)`, id, len(ms))
			return err
		})
		if err == nil || ctx.Err() != nil {
			return err
		}
		var done bool
		if perr := poll(ctx, 2*time.Minute, "the server after a failed send", func(ctx context.Context) (bool, error) {
			return true, r.pool.QueryRow(ctx, `select exists (select 1 from pq_sent_batch where id = $1)`, id).Scan(&done)
		}); perr != nil {
			return fmt.Errorf("send batch %d: %v; then %w", id, err, perr)
		}
		if done {
			return nil
		}
		r.retries.Add(1)
	}
}

type actionKind int

const (
	kill actionKind = iota
	restart
	terminate
)

type action struct {
	at   time.Duration
	kind actionKind
}

func (r *run) schedule() []action {
	d := r.cfg.Duration
	var as []action
	for i := range r.cfg.Restarts {
		as = append(as, action{at: d * time.Duration(i+1) / time.Duration(r.cfg.Restarts+1), kind: restart})
	}
	rnd := func() time.Duration { return d/20 + time.Duration(r.rng.Int64N(int64(d*9/10))) }
	for range r.cfg.Kills {
		as = append(as, action{at: rnd(), kind: kill})
	}
	for range r.cfg.Terminations {
		as = append(as, action{at: rnd(), kind: terminate})
	}
	sort.SliceStable(as, func(i, j int) bool { return as[i].at < as[j].at })
	return as
}

// chaos carries out the schedule. Actions run one after another, at their
// planned time or as soon as the previous one is done.
func (r *run) chaos(ctx context.Context, p plan, heads map[string]int64) error {
	t0 := time.Now()
	for _, a := range r.schedule() {
		if d := time.Until(t0.Add(a.at)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		var err error
		switch a.kind {
		case kill:
			err = r.kill(ctx)
		case restart:
			err = r.restart(ctx, p, heads)
		case terminate:
			err = r.terminate(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *run) kill(ctx context.Context) error {
	i := r.rng.IntN(len(r.procs))
	r.procs[i].Kill()
	r.rep.Kills++
	p, err := StartWorkerRetry(ctx, r.cfg.WorkerBin, r.args[i], r.cfg.WorkerLog, time.Minute)
	if err != nil {
		r.procs[i] = nil
		return fmt.Errorf("restart worker after kill -9: %w", err)
	}
	r.procs[i] = p
	if r.rep.Kills%5 == 0 {
		r.cfg.Logf("chaos: %d kills", r.rep.Kills)
	}
	return nil
}

// snapshotHeads records the head of every stuck key that is blocked now.
func (r *run) snapshotHeads(ctx context.Context, p plan, heads map[string]int64) error {
	for _, k := range p.stuck {
		if _, ok := heads[k]; ok {
			continue
		}
		var bk partitionq.BlockedKey
		var blocked bool
		if err := poll(ctx, time.Minute, "blocked key "+k, func(ctx context.Context) (bool, error) {
			var err error
			bk, err = r.client.BlockedKey(ctx, queueName, groupName, k)
			if errors.Is(err, partitionq.ErrNotBlocked) {
				return true, nil
			}
			blocked = err == nil
			return err == nil, err
		}); err != nil {
			return err
		}
		if blocked {
			heads[k] = bk.Head.ID
		}
	}
	return nil
}

func (r *run) restart(ctx context.Context, p plan, heads map[string]int64) error {
	if err := r.snapshotHeads(ctx, p, heads); err != nil {
		return err
	}
	var lastID int64
	if err := poll(ctx, time.Minute, "the run log", func(ctx context.Context) (bool, error) {
		return true, r.pool.QueryRow(ctx, `select coalesce(max(id), 0) from pq_run_log`).Scan(&lastID)
	}); err != nil {
		return err
	}
	mode := "fast"
	if r.rep.Restarts%2 == 1 {
		mode = "immediate"
	}
	if err := r.cl.Restart(ctx, mode); err != nil {
		return err
	}
	r.rep.Restarts++
	up := time.Now()
	// Workers are not restarted: they must reconnect on their own.
	if err := poll(ctx, 2*time.Minute, "every slot owned and handlings resumed after the restart", func(ctx context.Context) (bool, error) {
		o, err := slotOwners(ctx, r.client, queueName, groupName)
		if err != nil || len(o) < r.cfg.Slots {
			return false, err
		}
		var more bool
		err = r.pool.QueryRow(ctx, `select exists (select 1 from pq_run_log where id > $1)`, lastID).Scan(&more)
		return more, err
	}); err != nil {
		return fmt.Errorf("after restart %d (%s): %w", r.rep.Restarts, mode, err)
	}
	r.rep.Recoveries = append(r.rep.Recoveries, time.Since(up))
	for k, head := range heads {
		var bk partitionq.BlockedKey
		var gone bool
		if err := poll(ctx, time.Minute, "blocked key "+k, func(ctx context.Context) (bool, error) {
			var err error
			bk, err = r.client.BlockedKey(ctx, queueName, groupName, k)
			if errors.Is(err, partitionq.ErrNotBlocked) {
				gone = true
				return true, nil
			}
			return err == nil, err
		}); err != nil {
			return err
		}
		switch {
		case gone:
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("stuck key %s was no longer blocked after restart %d", k, r.rep.Restarts))
		case bk.Head.ID != head:
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("stuck key %s blocked on event %d after restart %d, was %d", k, bk.Head.ID, r.rep.Restarts, head))
		default:
			r.rep.StuckChecks++
		}
	}
	r.cfg.Logf("chaos: restart %d (%s): slots owned and handling resumed %s after the server was up; %d stuck keys still blocked",
		r.rep.Restarts, mode, r.rep.Recoveries[len(r.rep.Recoveries)-1].Round(10*time.Millisecond), len(heads))
	return nil
}

// terminate ends one to three server sessions of the workers: half the
// time one that owns a slot, else any of their sessions.
func (r *run) terminate(ctx context.Context) error {
	var pids []int32
	owner := r.rng.IntN(2) == 0
	err := poll(ctx, time.Minute, "the sessions of the workers", func(ctx context.Context) (bool, error) {
		pids = pids[:0]
		if owner {
			o, err := slotOwners(ctx, r.client, queueName, groupName)
			if err != nil {
				return false, err
			}
			for _, pid := range o {
				pids = append(pids, pid)
			}
			return true, nil
		}
		rows, err := r.pool.Query(ctx, `select pid from pg_stat_activity
			where datname = current_database() and backend_type = 'client backend'
			  and pid <> pg_backend_pid() and coalesce(application_name, '') <> $1`, harnessApp)
		if err != nil {
			return false, err
		}
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		return err == nil, err
	})
	if err != nil {
		return err
	}
	r.rep.Terminations++
	r.rng.Shuffle(len(pids), func(i, j int) { pids[i], pids[j] = pids[j], pids[i] })
	n := 1
	if !owner {
		n = 1 + r.rng.IntN(3)
	}
	for _, pid := range pids[:min(n, len(pids))] {
		var ok bool
		if err := r.pool.QueryRow(ctx, `select pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
			continue // the server may be restarting: this round ends fewer
		}
		if ok {
			r.rep.TerminatedBackends++
			if owner {
				r.rep.OwnerTerminations++
			}
		}
	}
	return nil
}

// finish waits for every event but the stuck keys' to be resolved, checks
// that the stuck keys are still blocked on the same head with nothing of
// theirs handled past it, skips their heads as an operator would, waits for
// everything, and judges the run.
func (r *run) finish(ctx context.Context, p plan, heads map[string]int64) error {
	total := 0
	for _, n := range p.sent {
		total += n
	}
	blockedEvents := len(p.stuck) * (r.cfg.EventsPerKey - p.stuckSeq)
	// Every batch the producer saw committed must still be there: the
	// server keeps what it acknowledged, across crashes too. Were one lost,
	// the wait below would wait for events that no longer exist.
	var kept int
	if err := r.pool.QueryRow(ctx, `select count(*) from pq_sent_batch`).Scan(&kept); err != nil {
		return err
	}
	if kept != len(p.batches) {
		return fmt.Errorf("the server lost committed sends: %d of the %d batches acknowledged to the producer are in pq_sent_batch", kept, len(p.batches))
	}
	r.cfg.Logf("chaos: chaos over; waiting for %d of %d events (the rest wait behind the stuck keys)", total-blockedEvents, total)
	if err := r.waitResolved(ctx, total-blockedEvents); err != nil {
		return err
	}
	if err := r.snapshotHeads(ctx, p, heads); err != nil {
		return err
	}
	for _, k := range p.stuck {
		// The key's last events may sit in a batch whose handled events are
		// logged but which is not finished yet: wait for them to be parked.
		want := int64(r.cfg.EventsPerKey - p.stuckSeq - 1)
		var bk partitionq.BlockedKey
		err := poll(ctx, time.Minute, fmt.Sprintf("stuck key %s blocked on event %d with %d waiting", k, heads[k], want), func(ctx context.Context) (bool, error) {
			var err error
			bk, err = r.client.BlockedKey(ctx, queueName, groupName, k)
			return err == nil && bk.Head.ID == heads[k] && bk.Waiting == want, err
		})
		if err != nil {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("%v (found head %d, %d waiting)", err, bk.Head.ID, bk.Waiting))
		}
		var past int
		if err := r.pool.QueryRow(ctx, `select count(*) from pq_run_log where key = $1 and ok and seq >= $2`, k, p.stuckSeq).Scan(&past); err != nil {
			return err
		}
		if past > 0 {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("stuck key %s: %d events handled past its blocked head", k, past))
		}
		if err := poll(ctx, time.Minute, "skip of "+k, func(ctx context.Context) (bool, error) {
			_, err := r.client.Act(ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: queueName, Group: groupName, Key: k, HeadID: heads[k], Reason: "chaos: end of run"})
			return err == nil, err
		}); err != nil {
			return err
		}
	}
	if err := r.waitResolved(ctx, total); err != nil {
		return err
	}
	for i, pr := range r.procs {
		if pr != nil {
			if err := pr.Stop(30 * time.Second); err != nil {
				r.rep.Problems = append(r.rep.Problems, err.Error())
			}
			r.procs[i] = nil
		}
	}
	rep, err := judge(ctx, r.pool, p.sent)
	if err != nil {
		return err
	}
	r.rep.Report = rep
	return r.pool.QueryRow(ctx, engineSQL(r.cfg.Engine.Schema(), `select (select count(*) from pgq.retry_queue) + (select count(*) from partitionq.failure)`)).Scan(&r.rep.Leftover)
}

// stuckRun adds what the database shows to a wait that timed out. The
// test's own context may be what ran out, so the dump gets its own.
func (r *run) stuckRun(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return fmt.Errorf("%w; the database shows:%s", err, diagnose(ctx, r.pool, r.cfg.Engine.Schema()))
}

// stallTimeout is how long waitResolved waits without a single event being
// resolved before it calls the run stalled.
const stallTimeout = time.Minute

// waitResolved waits until want events are resolved. It gives up when no
// event was resolved for stallTimeout (not after a fixed time: the long
// form has ten times the events of the short one), and then reports what
// the database shows.
func (r *run) waitResolved(ctx context.Context, want int) error {
	n, lastAt := -1, time.Now()
	var lastErr error
	err := poll(ctx, 24*time.Hour, fmt.Sprintf("%d events resolved", want), func(ctx context.Context) (bool, error) {
		got, err := resolved(ctx, r.pool)
		switch {
		case err != nil:
			lastErr = err // the server may be restarting
		case got >= want:
			return true, nil
		case got != n:
			n, lastAt = got, time.Now()
		}
		if time.Since(lastAt) > stallTimeout {
			return false, endPoll{fmt.Errorf("stalled: %d of %d events resolved, none for %s (last error: %v)",
				n, want, time.Since(lastAt).Round(time.Second), lastErr)}
		}
		return false, err
	})
	if err != nil {
		return r.stuckRun(fmt.Errorf("%w (%d resolved)", err, n))
	}
	return nil
}
