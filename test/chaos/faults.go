package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/netproxy"
)

// Fault is one kind of fault of the fault matrix (docs/chaos.md): what a
// real deployment does to a worker that owns slots while its handlers run.
type Fault string

// The faults.
const (
	// FaultKill is SIGKILL of an owner's process (its --exec commands must
	// die with it).
	FaultKill Fault = "kill"
	// FaultTerminateOwner is pg_terminate_backend of every session of one
	// owner (a proxy restart, an idle-session timeout).
	FaultTerminateOwner Fault = "terminate-owner"
	// FaultTerminateAll is pg_terminate_backend of every session of the
	// workers (a failover).
	FaultTerminateAll Fault = "terminate-all"
	// FaultRestart is a PostgreSQL crash: pg_ctl restart -m immediate.
	FaultRestart Fault = "restart"
	// FaultPartition cuts an owner off: its connections freeze (a network
	// partition), then the server drops its sessions, then the network
	// heals.
	FaultPartition Fault = "partition"
	// FaultStop pauses an owner (SIGSTOP) for longer than its lease, then
	// wakes it (SIGCONT): a long GC pause, a frozen VM.
	FaultStop Fault = "stop"
)

// Faults are all the faults, in the order the matrix runs them.
var Faults = []Fault{FaultKill, FaultTerminateOwner, FaultTerminateAll, FaultRestart, FaultPartition, FaultStop}

// FaultConfig configures one run of the fault matrix. Zero values mean the
// defaults, which are the short form (seconds).
type FaultConfig struct {
	Fault Fault
	// Exec runs the workers as `partitionq work --exec` (ExecBin) with a
	// shell handler, else as library workers (WorkerBin).
	Exec bool
	// Workers is the number of worker processes (each may own any slot).
	// Defaults to 3.
	Workers int
	// Slots is N. Defaults to 4.
	Slots int
	// Keys and EventsPerKey: what is sent. Defaults to 16 and 8.
	Keys, EventsPerKey int
	// Rounds is how many times the fault is done. Defaults to 2 (the
	// short form in make test; the long form gives 10).
	Rounds int
	// Hold is the longest a handler holds an event (each holds a random
	// time up to it), honouring its context: long enough to outlive a
	// takeover. Defaults to 1.2s.
	Hold time.Duration
	// Lease is the workers' lease duration. Defaults to 1s.
	Lease time.Duration
	// Concurrency is the in-slot concurrency. Defaults to 4.
	Concurrency int
	// FailEvery makes every FailEvery-th event of a key fail its first two
	// attempts, so that keys are blocked and draining when faults hit; and
	// each key's event 2 of every fourth key is a poison event that fails
	// until an operator skips it, which the run does as each fault hits.
	// Defaults to 4; -1 sends no failing events.
	FailEvery int
	// WorkerBin (test/cmd/testworker) and ExecBin (cmd/partitionq), and
	// RunWatchBin (test/cmd/runwatch) for the exec handlers.
	WorkerBin, ExecBin, RunWatchBin string
	// Resizes, when set, resizes the group once before each fault, to
	// each of these slot counts in turn (Rounds is then their number): a
	// round starts its resize (Client.Resize, as partitionq resize does)
	// and the fault hits 0-500ms later, before the resize's cutover, while
	// the old slots drain and hand off, or just after its end
	// (FaultReport.ResizeHits says which); the next round waits for the
	// resize to end, and so does the end of the run.
	Resizes []int
	// SendDuringResize sends 8 events of keys of their own as each resize
	// starts: they make the tick that is its cutover at once, so that the
	// fault hits the old slots' drain (a quiet queue ticks only after its
	// idle period, and most faults then hit before the cutover).
	SendDuringResize bool
	// Engine is the database's queue engine. Defaults to PgQ.
	Engine freshdb.Engine
	// Dir holds the run logs. Required.
	Dir  string
	Seed uint64
	// WorkerLog receives the workers' stderr; Logf progress.
	WorkerLog io.Writer
	Logf      func(format string, args ...any)

	execArgs, workerArgs []string // more flags for partitionq work and for the test worker (the balance matrix's)
}

func (c FaultConfig) withDefaults() FaultConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Workers, 3)
	def(&c.Slots, 4)
	def(&c.Keys, 16)
	def(&c.EventsPerKey, 8)
	def(&c.Rounds, 2)
	if len(c.Resizes) > 0 {
		c.Rounds = len(c.Resizes)
	}
	def(&c.Concurrency, 4)
	def(&c.FailEvery, 4)
	if c.Hold == 0 {
		c.Hold = 1200 * time.Millisecond
	}
	if c.Lease == 0 {
		c.Lease = time.Second
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

// FaultReport is the verdict of one run of the fault matrix.
type FaultReport struct {
	ordercheck.Report
	Fault Fault
	Exec  bool
	Seed  uint64
	// Faults counts the faults done.
	Faults int
	// Takeovers are the times from a fault to another worker owning every
	// slot the victim owned (none when the fault left the slots with their
	// owner, as it should for terminate-*, restart within the lease, stop).
	Takeovers []time.Duration
	// Kept counts the faults after which the victim still owned its slots
	// (perhaps at a new epoch, taken again after its lease lapsed).
	Kept int
	// InFlight is the most handler runs that can be in flight at once
	// (slots x concurrency, plus the drains of blocked keys): what a fault
	// may cut short and so repeat.
	InFlight int
	// Skipped counts the poison heads an operator skipped, Blocked the
	// keys seen blocked at a fault.
	Skipped, Blocked int
	// ResizeHits counts the faults by the state of the resize each hit,
	// as read just before it (FaultConfig.Resizes): "before the cutover",
	// "old slots draining" (past the cutover, some old slot not handed
	// off), "after the end".
	ResizeHits map[string]int
	// KeyWaits counts the handler runs that waited for another run of
	// their key in the same worker (the worker's key guard logs each): a
	// path that would have run a key twice at once, made safe there.
	KeyWaits int64
}

// The states of a resize a fault can hit (FaultReport.ResizeHits).
const (
	HitBeforeCutover = "before the cutover"
	HitDraining      = "old slots draining"
	HitAfterEnd      = "after the end"
)

// InFlightHits is how many faults hit a resize in flight.
func (r FaultReport) InFlightHits() int {
	return r.ResizeHits[HitBeforeCutover] + r.ResizeHits[HitDraining]
}

func (r FaultReport) String() string {
	mode := "library"
	if r.Exec {
		mode = "exec"
	}
	per := 0.0
	if r.Faults > 0 {
		per = float64(r.Repeats) / float64(r.Faults)
	}
	s := fmt.Sprintf("%s/%s: %d faults (seed %d): %s; repeats per fault %.1f (in flight at most %d); takeovers %v; slots kept %d times; keys blocked at the faults %d, poison heads skipped %d",
		r.Fault, mode, r.Faults, r.Seed, r.Report, per, r.InFlight, r.Takeovers, r.Kept, r.Blocked, r.Skipped)
	if r.ResizeHits != nil {
		s += fmt.Sprintf("; resizes hit %s %d times, with %s %d, %s %d", HitBeforeCutover, r.ResizeHits[HitBeforeCutover],
			HitDraining, r.ResizeHits[HitDraining], HitAfterEnd, r.ResizeHits[HitAfterEnd])
	}
	if r.KeyWaits > 0 {
		s += fmt.Sprintf("; runs that waited for another run of their key in the same worker %d", r.KeyWaits)
	}
	return s
}

// keyWaitLog is what a worker logs when a run waits for another run of its
// key in the same process (partitionq/internal/runner, KeyGuard).
const keyWaitLog = "waits for another run of the key in this worker"

// lineCounter passes a worker's log on to w and counts its lines holding
// keyWaitLog into n, and its moves into moves (one per worker: a line's
// parts come in order).
type lineCounter struct {
	w       io.Writer
	n       *atomic.Int64
	moves   *moveTally
	partial []byte
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		if bytes.Contains(c.partial[:i], []byte(keyWaitLog)) {
			c.n.Add(1)
		}
		if c.moves != nil {
			c.moves.line(c.partial[:i])
		}
		c.partial = c.partial[i+1:]
	}
	if len(c.partial) > 64<<10 { // no newline for that long: not a log line to look at
		c.partial = c.partial[:0]
	}
	return c.w.Write(p)
}

// OK reports a clean run: nothing lost, no order violation, no overlap,
// and no handler run that waited for another run of its key in the same
// worker (the key guard is a safety net that must never be needed: a wait
// is a path that would have run a key twice at once).
func (r FaultReport) OK() bool { return r.Report.OK() && r.KeyWaits == 0 }

// faultRun is one run's state.
type faultRun struct {
	cfg      FaultConfig
	keyWaits atomic.Int64 // the workers' key-guard waits (lineCounter)
	moves    moveTally    // the slots moved to a worker, by reason (lineCounter)
	cl       *Cluster
	rng      *rand.Rand
	url      string
	pool     *pgxpool.Pool
	client   *partitionq.Client
	rep      *FaultReport

	mu      sync.Mutex
	procs   []*faultProc
	died    map[string]time.Time // worker -> when it died (killed)
	runLogs []string
	poison  map[int64]bool   // the poison events' ids: skipped by the operator
	dead    map[string][]int // the poison events skipped, by key (their seqs)
	seqOf   map[int64]int    // every event's seq
	// sentDuring counts, by key, the events sent as resizes start (keys of
	// their own, ordinary events): they make the tick that is the resize's
	// cutover, so that faults hit its drain too, not only its wait.
	sentDuring map[string]int
}

// faultProc is one worker process (and its proxy, in the partition runs).
type faultProc struct {
	i     int
	cmd   *exec.Cmd
	done  chan struct{}
	proxy *netproxy.Proxy
}

func (p *faultProc) pid() int { return p.cmd.Process.Pid }

func (p *faultProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// RunFault runs one fault of the matrix on a fresh database of cl.
func RunFault(ctx context.Context, cl *Cluster, cfg FaultConfig) (FaultReport, error) {
	cfg = cfg.withDefaults()
	if cfg.Dir == "" || (cfg.Exec && (cfg.ExecBin == "" || cfg.RunWatchBin == "")) || (!cfg.Exec && cfg.WorkerBin == "") {
		return FaultReport{}, errors.New("chaos.FaultConfig needs Dir and the worker binary of its mode")
	}
	// During a resize the old generation's slots and the new one's run at
	// once.
	slots := cfg.Slots
	for i, n := range cfg.Resizes {
		prev := cfg.Slots
		if i > 0 {
			prev = cfg.Resizes[i-1]
		}
		slots = max(slots, prev+n)
	}
	r := &faultRun{cfg: cfg, cl: cl, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x51)), died: map[string]time.Time{},
		poison: map[int64]bool{}, dead: map[string][]int{}, seqOf: map[int64]int{}, sentDuring: map[string]int{},
		rep: &FaultReport{Fault: cfg.Fault, Exec: cfg.Exec, Seed: cfg.Seed, InFlight: slots*cfg.Concurrency + partitionq.DrainConcurrencyDefault}}
	if len(cfg.Resizes) > 0 {
		r.rep.ResizeHits = map[string]int{}
	}
	var err error
	if r.url, err = NewDatabase(ctx, cl, cfg.Engine); err != nil {
		return *r.rep, err
	}
	if r.pool, err = harnessPool(ctx, r.url, 8); err != nil {
		return *r.rep, err
	}
	defer r.pool.Close()
	if r.client, err = partitionq.NewClient(ctx, r.pool, partitionq.Config{Actor: "faults"}); err != nil {
		return *r.rep, err
	}
	if _, err := r.client.Setup(ctx, partitionq.GroupSpec{Queue: queueName, Group: groupName, Slots: cfg.Slots, TickMaxLag: 20 * time.Millisecond}); err != nil {
		return *r.rep, err
	}
	if _, err := r.pool.Exec(ctx, runLogDDL); err != nil {
		return *r.rep, err
	}
	defer r.killAll()
	for i := range cfg.Workers {
		if err := r.start(ctx, i); err != nil {
			return *r.rep, err
		}
	}
	if err := poll(ctx, 30*time.Second, "every slot owned", func(ctx context.Context) (bool, error) {
		_, all, err := r.owners(ctx)
		return all, err
	}); err != nil {
		return *r.rep, err
	}
	sent, err := r.send(ctx)
	if err != nil {
		return *r.rep, err
	}
	total := cfg.Keys * cfg.EventsPerKey
	for round := range cfg.Rounds {
		// Let handlers get going (and hold events) before each fault.
		if err := sleepCtx(ctx, time.Duration(300+r.rng.IntN(700))*time.Millisecond); err != nil {
			return *r.rep, err
		}
		// The fault hits while keys are blocked (when the run has any left
		// to block), and an operator skips the poison heads as it does.
		if err := poll(ctx, 5*time.Second, "a key blocked", func(ctx context.Context) (bool, error) {
			bks, err := r.client.BlockedKeys(ctx, queueName, groupName)
			return len(bks) > 0, err
		}); err != nil && ctx.Err() != nil {
			return *r.rep, err
		}
		if len(cfg.Resizes) > 0 {
			if round > 0 {
				if err := r.resizeEnded(ctx, cfg.Resizes[round-1]); err != nil {
					return *r.rep, err
				}
			}
			if err := r.resize(ctx, cfg.Resizes[round]); err != nil {
				return *r.rep, err
			}
		}
		skipped := make(chan error, 1)
		go func() { skipped <- r.skipPoison(ctx, true) }()
		if err := r.fault(ctx); err != nil {
			return *r.rep, fmt.Errorf("fault %s: %w", cfg.Fault, err)
		}
		if err := <-skipped; err != nil {
			return *r.rep, err
		}
		r.rep.Faults++
	}
	for k, n := range r.sentDuring {
		sent[k] = n
		total += n
	}
	if err := poll(ctx, 2*time.Minute, fmt.Sprintf("all %d events handled or skipped", total), func(ctx context.Context) (bool, error) {
		if err := r.skipPoison(ctx, false); err != nil {
			return false, err
		}
		n, err := r.handled(ctx)
		r.mu.Lock()
		skipped := r.rep.Skipped
		r.mu.Unlock()
		return n+skipped >= total, err
	}); err != nil {
		return *r.rep, fmt.Errorf("%w\nthe database:%s", err, diagnose(ctx, r.pool, r.client.EngineSchema()))
	}
	if len(cfg.Resizes) > 0 {
		if err := r.resizeEnded(ctx, cfg.Resizes[len(cfg.Resizes)-1]); err != nil {
			return *r.rep, err
		}
	}
	r.stopAll()
	handlings, err := r.handlings(ctx)
	if err != nil {
		return *r.rep, err
	}
	runs, err := ordercheck.ReadRunLogs(r.runLogs, r.diedTimes())
	if err != nil {
		return *r.rep, err
	}
	r.rep.Report = ordercheck.Check(sent, handlings, r.dead).WithRuns(runs)
	r.rep.KeyWaits = r.keyWaits.Load()
	return *r.rep, nil
}

// resize starts a resize to n slots and lets it run 0-500ms; then it
// notes the state the fault will hit.
func (r *faultRun) resize(ctx context.Context, n int) error {
	if _, err := r.client.Resize(ctx, partitionq.ResizeRequest{Queue: queueName, Group: groupName, Slots: n, Reason: "faults during a resize", Actor: "faults"}); err != nil {
		return fmt.Errorf("resize to %d slots: %w", n, err)
	}
	if r.cfg.SendDuringResize {
		if err := r.sendDuringResize(ctx); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, time.Duration(r.rng.IntN(500))*time.Millisecond); err != nil {
		return err
	}
	g, err := r.client.Group(ctx, queueName, groupName)
	if err != nil {
		return err
	}
	hit := HitAfterEnd
	switch {
	case g.Resize != nil && g.Resize.Cutover == 0:
		hit = HitBeforeCutover
	case g.Resize != nil:
		hit = HitDraining
	}
	r.rep.ResizeHits[hit]++
	r.cfg.Logf("faults: resizing to %d slots; the fault hits %s", n, hit)
	return nil
}

// sendDuringResize sends one event for each of 8 keys of their own
// (FaultConfig.SendDuringResize).
func (r *faultRun) sendDuringResize(ctx context.Context) error {
	var ms []partitionq.Message
	var keys []string
	for k := range 8 {
		key := fmt.Sprintf("r-%d", k)
		b, _ := json.Marshal(map[string]any{"k": key, "s": r.sentDuring[key]})
		ms, keys = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: b}), append(keys, key)
	}
	res, err := r.client.SendBatch(ctx, queueName, ms)
	if err != nil {
		return fmt.Errorf("send as a resize starts: %w", err)
	}
	r.mu.Lock()
	for i, x := range res {
		r.seqOf[x.ID] = r.sentDuring[keys[i]]
		r.sentDuring[keys[i]]++
	}
	r.mu.Unlock()
	return nil
}

// resizeEnded waits for the resize to n slots to end (before the next
// one, and at the end of the run).
func (r *faultRun) resizeEnded(ctx context.Context, n int) error {
	return poll(ctx, 2*time.Minute, fmt.Sprintf("the resize to %d slots ended", n), func(ctx context.Context) (bool, error) {
		g, err := r.client.Group(ctx, queueName, groupName)
		if err != nil || g.Resize != nil {
			return false, err
		}
		if g.Slots != n {
			return false, endPoll{fmt.Errorf("the group has %d slots after its resizes, want %d", g.Slots, n)}
		}
		return true, nil
	})
}

// skipPoison skips, as an operator would, every key blocked on a poison
// head (naming the head, so that a head resolved meanwhile is left alone);
// a head a drain holds (busy) is left for the next look. With count, it
// also counts the keys blocked now (Blocked).
func (r *faultRun) skipPoison(ctx context.Context, count bool) error {
	bks, err := r.client.BlockedKeys(ctx, queueName, groupName)
	if err != nil {
		if ctx.Err() == nil && r.cfg.Fault != FaultTerminateAll && r.cfg.Fault != FaultRestart {
			return fmt.Errorf("blocked keys: %w", err)
		}
		return nil // the fault ends the harness's sessions too
	}
	if count {
		r.mu.Lock()
		r.rep.Blocked += len(bks)
		r.mu.Unlock()
	}
	for _, bk := range bks {
		r.mu.Lock()
		poison, seq := r.poison[bk.Head.ID], r.seqOf[bk.Head.ID]
		r.mu.Unlock()
		if !poison {
			continue
		}
		res, err := r.client.Act(ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: queueName, Group: groupName, Key: bk.Key, HeadID: bk.Head.ID,
			Reason: "poison event", Actor: "faults"})
		if err != nil {
			continue // busy, or the fault cut the session: the next look tries again
		}
		if res.Outcome == partitionq.OutcomeSkipped {
			r.mu.Lock()
			r.rep.Skipped++
			r.dead[bk.Key] = append(r.dead[bk.Key], seq)
			r.mu.Unlock()
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// The exec handler is test/cmd/runwatch's handle mode (its package comment
// says what it does and logs). exec: the shell that --exec starts gives its
// place to it, so the handler's parent is the worker.
const execHandler = `exec '{runwatch}' handle '{log}' {hold}`

// start starts worker i (again), and waits until it registered its lease.
func (r *faultRun) start(ctx context.Context, i int) error {
	url := r.url
	var px *netproxy.Proxy
	if r.cfg.Fault == FaultPartition {
		var err error
		if px, err = netproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(r.cl.Port))); err != nil {
			return err
		}
		cfg, err := pgxpool.ParseConfig(r.url)
		if err != nil {
			return err
		}
		url = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", px.Addr(), cfg.ConnConfig.Database)
	}
	var cmd *exec.Cmd
	if r.cfg.Exec {
		log := filepath.Join(r.cfg.Dir, "exec-runs.log")
		h := strings.NewReplacer("{log}", log, "{hold}", fmt.Sprintf("%.3f", r.cfg.Hold.Seconds()), "{runwatch}", r.cfg.RunWatchBin).Replace(execHandler)
		cmd = exec.Command(r.cfg.ExecBin, "work", "--queue", queueName, "--group", groupName, "--exec", h,
			"--concurrency", strconv.Itoa(r.cfg.Concurrency), "--lease-duration", r.cfg.Lease.String(),
			"--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms", "--handler-timeout", "0",
			"--backoff-min", "5ms", "--backoff-max", "100ms", "--shutdown-timeout", "5s")
		cmd.Args = append(cmd.Args, r.cfg.execArgs...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		r.addRunLog(log)
	} else {
		log := filepath.Join(r.cfg.Dir, fmt.Sprintf("runs-%d-%d.log", i, time.Now().UnixNano()))
		cmd = exec.Command(r.cfg.WorkerBin, "-db", url, "-queue", queueName, "-group", groupName, "-slots", "all",
			"-concurrency", strconv.Itoa(r.cfg.Concurrency), "-lease", r.cfg.Lease.String(), "-hold", r.cfg.Hold.String(),
			"-runlog", log, "-backoff-max", "100ms")
		cmd.Args = append(cmd.Args, r.cfg.workerArgs...)
		r.addRunLog(log)
	}
	cmd.Stdout = io.Discard
	cmd.Stderr = &lineCounter{w: r.cfg.WorkerLog, n: &r.keyWaits, moves: &r.moves}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &faultProc{i: i, cmd: cmd, done: make(chan struct{}), proxy: px}
	go func() {
		cmd.Wait() // killed on purpose
		r.mu.Lock()
		if _, ok := r.died[strconv.Itoa(p.pid())]; !ok {
			r.died[strconv.Itoa(p.pid())] = time.Now()
		}
		r.mu.Unlock()
		close(p.done)
	}()
	r.mu.Lock()
	if i < len(r.procs) {
		r.procs[i] = p
	} else {
		r.procs = append(r.procs, p)
	}
	r.mu.Unlock()
	return poll(ctx, 30*time.Second, fmt.Sprintf("worker %d registered", p.pid()), func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, endPoll{fmt.Errorf("worker %d exited: %v", p.pid(), cmd.ProcessState)}
		}
		var n int
		err := r.pool.QueryRow(ctx, `select count(*) from partitionq.worker where os_pid = $1`, p.pid()).Scan(&n)
		return n > 0, err
	})
}

func (r *faultRun) addRunLog(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.runLogs {
		if q == p {
			return
		}
	}
	r.runLogs = append(r.runLogs, p)
}

func (r *faultRun) diedTimes() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Time, len(r.died))
	for k, v := range r.died {
		out[k] = v
	}
	return out
}

// poisonFailures is the "f" of a poison event: it fails until skipped.
const poisonFailures = 1000000

// send sends every event, in four batches, the first right away. Every
// FailEvery-th event of a key fails twice; event 2 of every fourth key is
// a poison event.
func (r *faultRun) send(ctx context.Context) (map[string]int, error) {
	sent := map[string]int{}
	var all []partitionq.Message
	var seqs []int
	var poison []bool
	for s := range r.cfg.EventsPerKey {
		for k := range r.cfg.Keys {
			key := fmt.Sprintf("k-%d", k)
			p := map[string]any{"k": key, "s": s}
			isPoison := r.cfg.FailEvery > 0 && k%4 == 0 && s == 2
			switch {
			case isPoison:
				p["f"] = poisonFailures
			case r.cfg.FailEvery > 0 && s%r.cfg.FailEvery == r.cfg.FailEvery-1:
				p["f"] = 2
			}
			b, _ := json.Marshal(p)
			all = append(all, partitionq.Message{Key: key, Type: "FileCreated", Payload: b})
			seqs, poison = append(seqs, s), append(poison, isPoison)
			sent[key] = r.cfg.EventsPerKey
		}
	}
	step := (len(all) + 3) / 4
	for i := 0; i < len(all); i += step {
		if i > 0 {
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				return nil, err
			}
		}
		res, err := r.client.SendBatch(ctx, queueName, all[i:min(i+step, len(all))])
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		for j, x := range res {
			r.seqOf[x.ID] = seqs[i+j]
			if poison[i+j] {
				r.poison[x.ID] = true
			}
		}
		r.mu.Unlock()
	}
	return sent, nil
}

// slotID names a slot: slot Slot of the generation with N slots (during a
// resize, two generations have slots).
type slotID struct{ N, Slot int }

// owners maps each owned slot to its owner, and reports whether every slot
// that runs is owned (during a resize, a new slot runs from its resize's
// cutover on, an old one until it hands off).
func (r *faultRun) owners(ctx context.Context) (map[slotID]partitionq.Owner, bool, error) {
	st, err := r.client.Status(ctx, queueName, groupName)
	if err != nil {
		return nil, false, err
	}
	out := map[slotID]partitionq.Owner{}
	all := true
	for _, s := range st.SlotStatus {
		switch {
		case s.Owner != nil:
			out[slotID{s.Slots, s.Slot}] = *s.Owner
		case s.Consumer != "":
			all = false
		}
	}
	return out, all, nil
}

// victim picks the owner of a random owned slot.
func (r *faultRun) victim(ctx context.Context) (*faultProc, map[slotID]partitionq.Owner, error) {
	var o map[slotID]partitionq.Owner
	if err := poll(ctx, 30*time.Second, "every slot owned", func(ctx context.Context) (bool, error) {
		var all bool
		var err error
		o, all, err = r.owners(ctx)
		return all && len(o) > 0, err
	}); err != nil {
		return nil, nil, err
	}
	slots := make([]slotID, 0, len(o))
	for s := range o {
		slots = append(slots, s)
	}
	sort.Slice(slots, func(i, j int) bool {
		return slots[i].N < slots[j].N || (slots[i].N == slots[j].N && slots[i].Slot < slots[j].Slot)
	})
	pid := int(o[slots[r.rng.IntN(len(slots))]].PID)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p.pid() == pid {
			mine := map[slotID]partitionq.Owner{}
			for s, ow := range o {
				if int(ow.PID) == pid {
					mine[s] = ow
				}
			}
			return p, mine, nil
		}
	}
	return nil, nil, fmt.Errorf("the owner, process %d, is none of the workers", pid)
}

// fault does the run's fault once and waits until the slots have owners
// again.
func (r *faultRun) fault(ctx context.Context) error {
	p, mine, err := r.victim(ctx)
	if err != nil {
		return err
	}
	at := time.Now()
	switch r.cfg.Fault {
	case FaultKill:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	case FaultTerminateOwner:
		if err := r.terminate(ctx, fmt.Sprintf("application_name like '%%:%d'", p.pid())); err != nil {
			return err
		}
	case FaultTerminateAll:
		if err := r.terminate(ctx, "application_name <> '"+harnessApp+"'"); err != nil {
			return err
		}
	case FaultRestart:
		if err := r.cl.Restart(ctx, "immediate"); err != nil {
			return err
		}
	case FaultPartition:
		p.proxy.Freeze()
		// The victim can no longer renew: its lease lapses (it stops its
		// handlers first); then the server notices its sessions are dead.
		if err := sleepCtx(ctx, 2*r.cfg.Lease); err != nil {
			return err
		}
		if err := r.terminate(ctx, fmt.Sprintf("application_name like '%%:%d'", p.pid())); err != nil {
			return err
		}
	case FaultStop:
		p.cmd.Process.Signal(syscall.SIGSTOP)
		if err := sleepCtx(ctx, 2*r.cfg.Lease+r.cfg.Lease/2); err != nil {
			return err
		}
		// Were its slots taken while it could not act? (Its lease has
		// expired, so Status shows no owner: read the rows.)
		var taken int
		if err := r.pool.QueryRow(ctx, `select count(*) from partitionq.slot s left join partitionq.worker w on w.id = s.worker_id
			where s.slot = any($1) and w.os_pid is distinct from $2`, slotsOf(mine), p.pid()).Scan(&taken); err != nil {
			return err
		}
		p.cmd.Process.Signal(syscall.SIGCONT)
		if taken > 0 {
			r.rep.Takeovers = append(r.rep.Takeovers, time.Since(at).Round(10*time.Millisecond))
		} else {
			r.rep.Kept++
		}
		// Once awake it stops what it ran (its lease lapsed) and takes its
		// slots again, unless a standby is first: either is safe.
		return poll(ctx, 60*time.Second, "every slot owned after the pause", func(ctx context.Context) (bool, error) {
			_, all, err := r.owners(ctx)
			return all, err
		})
	}
	// Wait until every slot has a live owner again (a killed or cut-off
	// victim's slots: another worker), and note whether the victim's slots
	// changed hands.
	gone := r.cfg.Fault == FaultKill || r.cfg.Fault == FaultPartition
	var after map[slotID]partitionq.Owner
	if err := poll(ctx, 60*time.Second, "every slot owned after the fault", func(ctx context.Context) (bool, error) {
		var all bool
		var err error
		if after, all, err = r.owners(ctx); err != nil || !all {
			return false, err
		}
		for _, o := range after {
			if gone && int(o.PID) == p.pid() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	moved := false // to another worker (the victim itself may take them again at a new epoch)
	for s, before := range mine {
		if now, ok := after[s]; ok && now.PID != before.PID { // an old slot handed off meanwhile is gone
			moved = true
		}
	}
	if moved {
		r.rep.Takeovers = append(r.rep.Takeovers, time.Since(at).Round(10*time.Millisecond))
	} else {
		r.rep.Kept++
	}
	r.cfg.Logf("faults: %s of worker %d done; slots moved: %v", r.cfg.Fault, p.pid(), moved)
	if r.cfg.Fault == FaultPartition {
		p.proxy.Resume() // the network heals: the victim finds its slots gone
	}
	if p.exited() {
		return r.start(ctx, p.i)
	}
	return nil
}

func slotsOf(m map[slotID]partitionq.Owner) []int32 {
	out := make([]int32, 0, len(m))
	for s := range m {
		out = append(out, int32(s.Slot))
	}
	return out
}

// terminate ends the sessions of the run's database that match cond.
func (r *faultRun) terminate(ctx context.Context, cond string) error {
	var n int
	return r.pool.QueryRow(ctx, `select count(pg_terminate_backend(pid)) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid() and `+cond).Scan(&n)
}

// handled counts the distinct events handled successfully (the skipped
// poison events are counted apart: Skipped).
func (r *faultRun) handled(ctx context.Context) (int, error) {
	if !r.cfg.Exec {
		var n int
		err := r.pool.QueryRow(ctx, `select count(*) from (select distinct key, seq from pq_run_log where ok) h`).Scan(&n)
		return n, err
	}
	hs, err := r.execHandlings()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, h := range hs {
		seen[h.Key+"/"+strconv.Itoa(h.Seq)] = true
	}
	return len(seen), nil
}

// handlings is every successful handling, in the order they happened.
func (r *faultRun) handlings(ctx context.Context) ([]ordercheck.Handling, error) {
	if r.cfg.Exec {
		return r.execHandlings()
	}
	return runLogHandlings(ctx, r.pool)
}

// execHandlings reads the exec handlers' successes (O lines), in time
// order.
func (r *faultRun) execHandlings() ([]ordercheck.Handling, error) {
	type ok struct {
		h  ordercheck.Handling
		at int64
	}
	var oks []ok
	for _, p := range r.runLogs {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "O ") {
				continue
			}
			q, err := strconv.QuotedPrefix(line[2:])
			if err != nil {
				continue // a line cut short
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
			oks = append(oks, ok{ordercheck.Handling{Key: key, Seq: seq, OK: true}, at})
		}
	}
	sort.SliceStable(oks, func(i, j int) bool { return oks[i].at < oks[j].at })
	out := make([]ordercheck.Handling, len(oks))
	for i, o := range oks {
		out[i] = o.h
	}
	return out, nil
}

// stopAll stops every worker gracefully (a SIGCONT first, for a stopped one).
func (r *faultRun) stopAll() {
	r.mu.Lock()
	procs := append([]*faultProc(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		if p.exited() {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if p.proxy != nil {
			p.proxy.Close()
		}
	}
}

func (r *faultRun) killAll() {
	r.mu.Lock()
	procs := append([]*faultProc(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if p.proxy != nil {
			p.proxy.Close()
		}
	}
}

// BuildCLI builds cmd/partitionq and test/cmd/runwatch into dir and returns
// their paths.
func BuildCLI(ctx context.Context, dir string) (cli, runwatch string, err error) {
	goBin := "go" // found on PATH, where go test and make put the go that runs them
	for _, b := range []struct {
		pkg string
		bin *string
	}{{"cmd/partitionq", &cli}, {"test/cmd/runwatch", &runwatch}} {
		*b.bin = filepath.Join(dir, filepath.Base(b.pkg))
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", *b.bin, "github.com/partitionq/partitionq/"+b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return cli, runwatch, nil
}
