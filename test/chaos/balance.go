package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// The balance matrix (docs/chaos.md, "Identical workers"): worker processes
// started with one configuration, as a Deployment runs replicas, share a
// group's slots while a producer sends and some events fail (so that keys
// are blocked at the moves), through these steps:
//
//  1. 4 workers start one after another;
//  2. one is killed (SIGKILL);
//  3. one stops (SIGTERM);
//  4. two join, one after the other;
//  5. a rolling restart replaces all 4, one at a time (SIGTERM, then a new
//     one), with a resize from N to 2N slots started after the first;
//  6. the membership stays steady for a while: nothing moves.
//
// After each step every live worker must own the floor or the ceil of N/P
// within the step's bound, and at the end the handler runs are judged: 0
// lost, 0 order violations, 0 overlaps; the graceful moves repeat nothing
// (a repeat of an event whose first success was not the killed worker's is
// a failure); the kill repeats at most what the killed worker had in
// flight.

// BalanceConfig configures one run of the balance matrix. Zero values mean
// the defaults: the short form.
type BalanceConfig struct {
	// Exec runs the workers as `partitionq work --exec` (ExecBin, with
	// RunWatchBin), else as library workers (WorkerBin).
	Exec                            bool
	WorkerBin, ExecBin, RunWatchBin string
	// Slots is N before the resize (then 2N). Defaults to 8.
	Slots int
	// Keys the producer sends to, Rate its events a second. Defaults to 64
	// and 200 (20 with Exec: each event starts a few processes).
	Keys, Rate int
	// FailPercent of the events fail their first attempt. Defaults to 2.
	FailPercent int
	// Hold is the longest a handler holds an event (each a random time up
	// to it): runs are in flight at every move. Defaults to 200ms.
	Hold time.Duration
	// Lease is the workers' lease. Defaults to 3s.
	Lease time.Duration
	// Steady is how long the last step watches a steady membership.
	// Defaults to 5s.
	Steady time.Duration
	// Slack stretches every step's bound by this factor: the short form
	// in make test gives 1.5 (two halves of the suite share two cores, and
	// a handover waits for runs the load slows down); the long form keeps
	// the stated bounds. Defaults to 1.
	Slack float64
	// Concurrency is the in-slot concurrency. Defaults to 4. Drains is
	// how many blocked keys a library worker drains at once (the test
	// worker's -drains: 2 by default, for a shared server's connections);
	// the long form gives 8: at 2, the keys its failures blocked could
	// receive events faster than two drains ran them, and its parked
	// events grew without end.
	Concurrency, Drains int
	Engine              freshdb.Engine
	Dir                 string // the run logs; required
	Seed                uint64
	WorkerLog           io.Writer
	Logf                func(format string, args ...any)
}

func (c BalanceConfig) withDefaults() BalanceConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Slots, 8)
	def(&c.Keys, 64)
	if c.Exec {
		def(&c.Rate, 20)
	}
	def(&c.Rate, 200)
	def(&c.FailPercent, 2)
	def(&c.Concurrency, 4)
	if c.Hold == 0 {
		c.Hold = 200 * time.Millisecond
	}
	if c.Lease == 0 {
		c.Lease = 3 * time.Second
	}
	if c.Steady == 0 {
		c.Steady = 5 * time.Second
	}
	if c.Slack < 1 {
		c.Slack = 1
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

// BalanceStep is one step of a run, as measured.
type BalanceStep struct {
	What    string
	Workers int           // live workers after it
	Settle  time.Duration // from the step to every worker holding its share
	Bound   time.Duration // what it was allowed
}

// BalanceReport is the verdict of one run of the balance matrix.
type BalanceReport struct {
	ordercheck.Report
	Exec  bool
	Seed  uint64
	Steps []BalanceStep
	// Moves counts the slots that came to a worker from another, by reason
	// (the workers' logs).
	Moves map[string]int
	// CrashRepeats are the repeats of events whose first success was the
	// killed worker's (at most what it had in flight: CrashInFlight);
	// GracefulRepeats the others, which must be none.
	CrashRepeats, GracefulRepeats, CrashInFlight int
	// SteadyMoves are the slots that changed owner while the membership
	// was steady.
	SteadyMoves int
	// Lapses counts the slots the workers stopped because their lease was
	// not renewed in time (a loaded machine: a renewal late by more than
	// 4/5 of the lease); each repeats what it had in flight, fenced. A run
	// with none must repeat nothing after its graceful moves.
	Lapses   int
	KeyWaits int64
}

// OK reports a clean run.
func (r BalanceReport) OK() bool {
	graceful := r.GracefulRepeats == 0 || (r.Lapses > 0 && r.GracefulRepeats <= r.Lapses*r.CrashInFlight)
	return r.Report.OK() && graceful && r.CrashRepeats <= r.CrashInFlight && r.SteadyMoves == 0 && r.KeyWaits == 0
}

func (r BalanceReport) String() string {
	mode := "library"
	if r.Exec {
		mode = "exec"
	}
	var steps []string
	for _, s := range r.Steps {
		steps = append(steps, fmt.Sprintf("%s (%d workers): %s of %s", s.What, s.Workers, s.Settle.Round(10*time.Millisecond), s.Bound))
	}
	reasons := make([]string, 0, len(r.Moves))
	for k, n := range r.Moves {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("balance/%s (seed %d): %s; moves %s; repeats after the kill %d (in flight at most %d), after graceful moves %d; moves while steady %d; slots stopped by a late lease renewal %d; key-guard waits %d; settled: %s",
		mode, r.Seed, r.Report, strings.Join(reasons, ", "), r.CrashRepeats, r.CrashInFlight, r.GracefulRepeats, r.SteadyMoves, r.Lapses, r.KeyWaits,
		strings.Join(steps, "; "))
}

// RunBalance runs the balance matrix once on a fresh database of cl.
func RunBalance(ctx context.Context, cl *Cluster, cfg BalanceConfig) (BalanceReport, error) {
	cfg = cfg.withDefaults()
	rep := BalanceReport{Exec: cfg.Exec, Seed: cfg.Seed, Moves: map[string]int{}}
	if cfg.Dir == "" || (cfg.Exec && (cfg.ExecBin == "" || cfg.RunWatchBin == "")) || (!cfg.Exec && cfg.WorkerBin == "") {
		return rep, errors.New("chaos.BalanceConfig needs Dir and the worker binary of its mode")
	}
	r := &faultRun{cfg: FaultConfig{Exec: cfg.Exec, WorkerBin: cfg.WorkerBin, ExecBin: cfg.ExecBin, RunWatchBin: cfg.RunWatchBin,
		Concurrency: cfg.Concurrency, Lease: cfg.Lease, Hold: cfg.Hold, Dir: cfg.Dir, WorkerLog: cfg.WorkerLog, Logf: cfg.Logf,
		execArgs: []string{"--log-level", "info"}, workerArgs: []string{"-log", "info", "-drains", strconv.Itoa(max(cfg.Drains, 2))}}, // the moves are logged at info
		cl: cl, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5a)), died: map[string]time.Time{},
		poison: map[int64]bool{}, dead: map[string][]int{}, seqOf: map[int64]int{}, sentDuring: map[string]int{}, rep: &FaultReport{}}
	var err error
	if r.url, err = NewDatabase(ctx, cl, cfg.Engine); err != nil {
		return rep, err
	}
	if r.pool, err = harnessPool(ctx, r.url, 8); err != nil {
		return rep, err
	}
	defer r.pool.Close()
	if r.client, err = partitionq.NewClient(ctx, r.pool, partitionq.Config{Actor: "balance"}); err != nil {
		return rep, err
	}
	if _, err := r.client.Setup(ctx, partitionq.GroupSpec{Queue: queueName, Group: groupName, Slots: cfg.Slots, TickMaxLag: 20 * time.Millisecond}); err != nil {
		return rep, err
	}
	if _, err := r.pool.Exec(ctx, runLogDDL); err != nil {
		return rep, err
	}
	defer r.killAll()

	prod := &producer{r: r, cfg: cfg, sent: map[string]int{}, rng: rand.New(rand.NewPCG(cfg.Seed^0x9e, cfg.Seed))}
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	prodDone := make(chan error, 1)
	go func() { prodDone <- prod.run(pctx) }()

	// The bounds (docs/architecture.md, "Sharing the slots"): a join or a
	// graceful leave within 2 leases, a crash within a lease, a standby
	// poll and that.
	standbyPoll := 100 * time.Millisecond
	if cfg.Exec {
		standbyPoll = partitionq.StandbyPollDefault
	}
	gentle := 2 * cfg.Lease
	crash := cfg.Lease + standbyPoll + gentle
	n := cfg.Slots
	live := []int{} // indexes into r.procs of the live workers
	settle := func(what string, bound time.Duration, since time.Time) error {
		bound = time.Duration(float64(bound) * cfg.Slack)
		got, err := r.waitShares(ctx, len(live), n, 4*bound)
		step := BalanceStep{What: what, Workers: len(live), Settle: time.Since(since), Bound: bound}
		rep.Steps = append(rep.Steps, step)
		cfg.Logf("balance: %s: %d workers hold %v after %s", what, len(live), got, step.Settle.Round(10*time.Millisecond))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if step.Settle > bound {
			return fmt.Errorf("%s: the shares settled after %s, past the bound %s (%v)", what, step.Settle.Round(10*time.Millisecond), bound, got)
		}
		return nil
	}
	// join starts a worker and waits for the shares, timed from its
	// registration; leave stops one (SIGTERM) and waits for the shares,
	// timed from its exit.
	join := func(what string) error {
		i := len(r.procs)
		if err := r.start(ctx, i); err != nil {
			return err
		}
		live = append(live, i)
		return settle(what, gentle, time.Now())
	}
	leave := func(what string) error {
		if err := r.stop(ctx, live[0]); err != nil {
			return err
		}
		live = live[1:]
		return settle(what, gentle, time.Now())
	}

	// 1. Four workers, one after another.
	for k := range 4 {
		if err := join(fmt.Sprintf("worker %d joined", k+1)); err != nil {
			return rep, err
		}
	}
	// 2. One killed.
	victim := live[r.rng.IntN(len(live))]
	owned, err := r.ownedBy(ctx, r.procs[victim].pid())
	if err != nil {
		return rep, err
	}
	rep.CrashInFlight = owned*cfg.Concurrency + 2 // its slots' runs, and its drains (-drains 2 / a run of drains of the CLI's default at most)
	if cfg.Exec {
		rep.CrashInFlight = owned*cfg.Concurrency + partitionq.DrainConcurrencyDefault
	}
	t0 := time.Now()
	r.procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-r.procs[victim].done
	killed := strconv.Itoa(r.procs[victim].pid())
	live = without(live, victim)
	if err := settle("a worker killed", crash, t0); err != nil {
		return rep, err
	}
	// 3. One stopped.
	if err := leave("a worker stopped"); err != nil {
		return rep, err
	}
	// 4. Two join.
	for k := range 2 {
		if err := join(fmt.Sprintf("a worker joined (%d of 2)", k+1)); err != nil {
			return rep, err
		}
	}
	// 5. A rolling restart, with a resize from N to 2N started as its
	// second step begins: the old slots drain to the cutover and hand off
	// while a worker stops and its replacement starts, and the new slots
	// are shared as they start.
	for k := range 4 {
		if k != 1 {
			if err := leave(fmt.Sprintf("rolling restart %d of 4: a worker stopped", k+1)); err != nil {
				return rep, err
			}
			if err := join(fmt.Sprintf("rolling restart %d of 4: its replacement joined", k+1)); err != nil {
				return rep, err
			}
			continue
		}
		t0 := time.Now()
		if _, err := r.client.Resize(ctx, partitionq.ResizeRequest{Queue: queueName, Group: groupName, Slots: 2 * cfg.Slots,
			Reason: "a resize during a rolling restart", Actor: "balance"}); err != nil {
			return rep, err
		}
		if err := r.stop(ctx, live[0]); err != nil {
			return rep, err
		}
		live = live[1:]
		i := len(r.procs)
		if err := r.start(ctx, i); err != nil {
			return rep, err
		}
		live = append(live, i)
		if err := r.resizeEnded(ctx, 2*cfg.Slots); err != nil {
			return rep, err
		}
		n = 2 * cfg.Slots
		// The resize's own time (its old slots drain to the cutover) is
		// no move's: its bound is a generous one.
		if err := settle(fmt.Sprintf("rolling restart 2 of 4 during a resize from %d to %d slots", cfg.Slots, n), 30*time.Second, t0); err != nil {
			return rep, err
		}
	}
	// 6. Steady.
	before, err := r.epochs(ctx)
	if err != nil {
		return rep, err
	}
	if err := sleepCtx(ctx, cfg.Steady); err != nil {
		return rep, err
	}
	after, err := r.epochs(ctx)
	if err != nil {
		return rep, err
	}
	for s, e := range after {
		if before[s] != e {
			rep.SteadyMoves++
		}
	}

	stopProducing()
	if err := <-prodDone; err != nil {
		return rep, err
	}
	total := 0
	for _, k := range prod.sent {
		total += k
	}
	if err := poll(ctx, 2*time.Minute, fmt.Sprintf("all %d events handled", total), func(ctx context.Context) (bool, error) {
		h, err := r.handled(ctx)
		return h >= total, err
	}); err != nil {
		return rep, fmt.Errorf("%w\nthe database:%s", err, diagnose(ctx, r.pool, r.client.EngineSchema()))
	}
	r.stopAll()
	handlings, err := r.handlings(ctx)
	if err != nil {
		return rep, err
	}
	runs, err := ordercheck.ReadRunLogs(r.runLogs, r.diedTimes())
	if err != nil {
		return rep, err
	}
	rep.Report = ordercheck.Check(prod.sent, handlings, nil).WithRuns(runs)
	rep.CrashRepeats, rep.GracefulRepeats, err = r.repeatsBy(ctx, killed)
	if err != nil {
		return rep, err
	}
	rep.Moves = r.moves.counts()
	rep.Lapses = r.moves.lapses()
	rep.KeyWaits = r.keyWaits.Load()
	return rep, nil
}

func without(xs []int, x int) []int {
	out := xs[:0:0]
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

// stop stops worker i gracefully and waits for it to exit.
func (r *faultRun) stop(ctx context.Context, i int) error {
	p := r.procs[i]
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("worker %d did not stop within 30s of SIGTERM", p.pid())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitShares waits until p live workers own every slot of the current
// generation, each floor or ceil of n/p; it returns the counts it saw
// last.
func (r *faultRun) waitShares(ctx context.Context, p, n int, timeout time.Duration) ([]int, error) {
	var counts []int
	lo, hi := n/p, (n+p-1)/p
	err := poll(ctx, timeout, fmt.Sprintf("%d workers holding %d or %d of %d slots each", p, lo, hi, n), func(ctx context.Context) (bool, error) {
		st, err := r.client.Status(ctx, queueName, groupName)
		if err != nil {
			return false, nil // a step may cut the harness's sessions: look again
		}
		counts = counts[:0]
		total := 0
		for _, w := range st.Workers {
			counts = append(counts, len(w.Slots))
			total += len(w.Slots)
		}
		if st.Slots != n || st.Resize != nil || len(st.Workers) != p || total != n {
			return false, nil
		}
		for _, c := range counts {
			if c < lo || c > hi {
				return false, nil
			}
		}
		return true, nil
	})
	return counts, err
}

// ownedBy counts the slots the worker process pid owns.
func (r *faultRun) ownedBy(ctx context.Context, pid int) (int, error) {
	o, _, err := r.owners(ctx)
	n := 0
	for _, ow := range o {
		if int(ow.PID) == pid {
			n++
		}
	}
	return n, err
}

// epochs reads every slot's owner process.
func (r *faultRun) epochs(ctx context.Context) (map[slotID]string, error) {
	o, _, err := r.owners(ctx)
	out := map[slotID]string{}
	for s, ow := range o {
		out[s] = strconv.Itoa(int(ow.PID)) // a worker that takes its own slot back after a late renewal moves nothing
	}
	return out, err
}

// repeatsBy splits the repeats (a success of an event handled with success
// before) by whose the first success was: the killed worker's, or another's.
func (r *faultRun) repeatsBy(ctx context.Context, killed string) (crash, graceful int, err error) {
	type success struct {
		key    string
		seq    int
		worker string
	}
	var ss []success
	if r.cfg.Exec {
		hs, err := r.execSuccesses()
		if err != nil {
			return 0, 0, err
		}
		for _, h := range hs {
			ss = append(ss, success{h.key, h.seq, strings.SplitN(h.worker, "/", 2)[0]})
		}
	} else {
		rows, err := r.pool.Query(ctx, `select key, seq, pid::text from pq_run_log where ok order by id`)
		if err != nil {
			return 0, 0, err
		}
		defer rows.Close()
		for rows.Next() {
			var s success
			if err := rows.Scan(&s.key, &s.seq, &s.worker); err != nil {
				return 0, 0, err
			}
			ss = append(ss, s)
		}
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
	}
	first := map[string]string{}
	for _, s := range ss {
		k := s.key + "/" + strconv.Itoa(s.seq)
		w, seen := first[k]
		switch {
		case !seen:
			first[k] = s.worker
		case w == killed:
			crash++
		default:
			graceful++
		}
	}
	return crash, graceful, nil
}

type execSuccess struct {
	key, worker string
	seq         int
}

// execSuccesses reads the exec handlers' successes (O lines) with their
// workers, in time order.
func (r *faultRun) execSuccesses() ([]execSuccess, error) {
	type ok struct {
		s  execSuccess
		at int64
	}
	var oks []ok
	for _, p := range r.runLogs {
		lines, err := readLines(p)
		if err != nil {
			return nil, err
		}
		for _, line := range lines {
			if !strings.HasPrefix(line, "O ") {
				continue
			}
			q, err := strconv.QuotedPrefix(line[2:])
			if err != nil {
				continue
			}
			key, _ := strconv.Unquote(q)
			f := strings.Fields(line[2+len(q):])
			if len(f) != 3 {
				continue
			}
			seq, err1 := strconv.Atoi(f[0])
			at, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			oks = append(oks, ok{execSuccess{key: key, seq: seq, worker: f[1]}, at})
		}
	}
	sort.SliceStable(oks, func(i, j int) bool { return oks[i].at < oks[j].at })
	out := make([]execSuccess, len(oks))
	for i, o := range oks {
		out[i] = o.s
	}
	return out, nil
}

// producer sends cfg.Rate events a second over cfg.Keys keys until its
// context ends; FailPercent of them fail their first attempt.
type producer struct {
	r    *faultRun
	cfg  BalanceConfig
	rng  *rand.Rand
	mu   sync.Mutex
	sent map[string]int
}

func (p *producer) run(ctx context.Context) error {
	const tick = 50 * time.Millisecond
	per := max(1, p.cfg.Rate*int(tick/time.Millisecond)/1000)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var ms []partitionq.Message
		var keys []string
		p.mu.Lock()
		next := map[string]int{}
		for range per {
			key := fmt.Sprintf("k-%d", p.rng.IntN(p.cfg.Keys))
			s := p.sent[key] + next[key]
			next[key]++
			body := map[string]any{"k": key, "s": s}
			if p.rng.IntN(100) < p.cfg.FailPercent {
				body["f"] = 1
			}
			b, _ := json.Marshal(body)
			ms, keys = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: b}), append(keys, key)
		}
		p.mu.Unlock()
		// A send cut by a step (it ends sessions) is sent again: the
		// events are the same, and sent counts only what committed.
		for {
			if _, err := p.r.client.SendBatch(ctx, queueName, ms); err == nil {
				break
			} else if ctx.Err() != nil {
				return nil
			}
			if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
				return nil
			}
		}
		p.mu.Lock()
		for _, k := range keys {
			p.sent[k]++
		}
		p.mu.Unlock()
	}
}

// moveTally counts, by reason, the slots moved to a worker, from the
// workers' logs ("slot moved to this worker ... reason=join").
type moveTally struct {
	mu    sync.Mutex
	n     map[string]int
	lapse int
}

// lapseLog is what a worker logs for each slot it stops when its lease was
// not renewed in time.
const lapseLog = "the lease was not renewed in time"

func (t *moveTally) lapses() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lapse
}

func (t *moveTally) line(line []byte) {
	if bytes.Contains(line, []byte(lapseLog)) && bytes.Contains(line, []byte("slot lost")) {
		t.mu.Lock()
		t.lapse++
		t.mu.Unlock()
	}
	i := bytes.Index(line, []byte("slot moved to this worker"))
	if i < 0 {
		return
	}
	_, after, ok := bytes.Cut(line[i:], []byte(" reason="))
	if !ok {
		return
	}
	reason := string(bytes.Fields(after)[0])
	t.mu.Lock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[reason]++
	t.mu.Unlock()
}

func (t *moveTally) counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.n))
	for k, v := range t.n {
		out[k] = v
	}
	return out
}

// readLines reads a file's lines (none when it does not exist).
func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}
