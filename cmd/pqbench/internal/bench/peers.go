package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
)

// The peers run in Node.js (bench/peers/run.mjs), each in a fresh database
// of the same server, configured as its documentation recommends:
//
//   - pg-boss 12, queue policy key_strict_fifo (one active job per key; a
//     job in retry blocks its key), singletonKey = tenant. Its workers wait
//     pollingIntervalSeconds between fetches unless a fetch comes back full
//     and burstWhenBatchFull is on, so concurrency c is one worker fetching
//     batches of c, handled at once, settled per job (perJobResults).
//   - graphile-worker, one job queue (queueName) per tenant: serial per
//     tenant, but a failed job lets the later jobs of its queue run before
//     its retry. concurrency c, maxPoolSize max(10, c+2).
type peerRun struct {
	system   string // "pgboss" or "graphile"
	wl       *Workload
	wlFile   string
	mode     string // "drain" or "latency"
	produce  string // "one" (one call per job) or "bulk"
	workers  int
	retryS   int
	notify   bool
	producer bool // also report the enqueue phase as a producer row
}

// peerMsg is one line the Node side prints.
type peerMsg struct {
	Msg       string  `json:"msg"`
	MS        float64 `json:"ms"`
	CPUUS     float64 `json:"cpu_us"`
	Handled   int     `json:"handled"`
	Overlaps  int64   `json:"overlaps"`
	SleepMean float64 `json:"sleep_mean_ms"`
	Error     string  `json:"error"`
}

func (b *bench) peers(ctx context.Context, w1, w2, w3, lat *Workload) error {
	if !b.cfg.Peers {
		b.rep.note("peers: skipped (-no-peers)")
		return nil
	}
	if err := b.installPeers(ctx); err != nil {
		b.rep.note("peers: skipped: " + err.Error())
		b.rep.PeersSkipped = err.Error()
		b.logf("peers skipped: %v", err)
		return nil
	}
	w1p := w1.prefix("W1", b.cfg.PeerW1Events)
	files := map[*Workload]string{}
	for _, wl := range []*Workload{w1p, w2, w3, lat} {
		f := b.tmpFile(strings.ToLower(wl.Name) + ".jsonl")
		if err := wl.writeJSONL(f); err != nil {
			return err
		}
		files[wl] = f
	}
	var runs []peerRun
	c0 := b.cfg.PeerWorkers[0]
	systems := []string{"pgboss", "graphile"}
	for _, kind := range b.cfg.PeerRuns {
		for _, sys := range systems {
			switch kind {
			case "W1":
				runs = append(runs, peerRun{system: sys, wl: w1p, mode: "drain", produce: "one", workers: c0})
			case "W2":
				for _, c := range b.cfg.PeerWorkers {
					runs = append(runs, peerRun{system: sys, wl: w2, mode: "drain", produce: "one", workers: c, producer: c == c0})
				}
			case "W2bulk":
				runs = append(runs, peerRun{system: sys, wl: w2, mode: "drain", produce: "bulk", workers: c0, producer: true})
			case "W3":
				for _, c := range b.cfg.PeerWorkers {
					runs = append(runs, peerRun{system: sys, wl: w3, mode: "drain", produce: "one", workers: c,
						retryS: int(b.cfg.W3Backoff.Round(time.Second) / time.Second)})
				}
			case "latency":
				runs = append(runs, peerRun{system: sys, wl: lat, mode: "latency", workers: b.cfg.LatC, notify: true})
			default:
				return fmt.Errorf("unknown peer run %q", kind)
			}
		}
	}
	for _, r := range runs {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.wlFile = files[r.wl]
		for _, res := range b.runPeer(ctx, r) {
			b.add(res)
		}
	}
	return nil
}

// installPeers runs npm ci in the peers directory unless its node_modules
// is up to date with package-lock.json.
func (b *bench) installPeers(ctx context.Context) error {
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node is not installed")
	}
	dir := b.cfg.PeersDir
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return fmt.Errorf("no package-lock.json in %s: %w", dir, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !st.ModTime().Before(lock.ModTime()) {
		return nil
	}
	b.logf("peers: npm ci in %s", dir)
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci failed in %s: %v: %s", dir, err, lastLines(string(out), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (r peerRun) name() string {
	if r.system == "pgboss" {
		return SysPgBoss
	}
	return SysGraphile
}

func (r peerRun) config() string {
	var s string
	switch r.system {
	case "pgboss":
		s = fmt.Sprintf("key_strict_fifo, batches of %d", r.workers)
	default:
		s = fmt.Sprintf("queue per tenant, concurrency %d", r.workers)
	}
	switch {
	case r.mode == "latency":
		s += ", LISTEN/NOTIFY"
	case r.produce == "bulk":
		s += ", bulk-inserted"
	default:
		s += ", sent one by one"
	}
	return s
}

// runPeer runs one peer configuration in a fresh database and returns its
// result rows (the drain, and the enqueue phase when asked).
func (b *bench) runPeer(ctx context.Context, r peerRun) []*Result {
	res := &Result{Workload: r.wl.Name, System: r.name(), Config: r.config(), Conc: r.workers, Events: len(r.wl.Events), Checked: true}
	if r.mode == "latency" {
		res.Workload = "latency"
	}
	prod := &Result{Workload: "producer", System: r.name(), Events: len(r.wl.Events)}
	out := []*Result{res}
	db := b.bossDB
	if r.system == "graphile" {
		db = b.gwDB
	}
	if err := b.createDB(ctx, db, freshdb.Engine{}); err != nil {
		res.Err = err.Error()
		return out
	}
	logFile := b.tmpFile(fmt.Sprintf("%s-%s-%d.log", r.system, r.wl.Name, time.Now().UnixNano()))
	timeoutS := int((b.cfg.RunTimeout + time.Duration(len(r.wl.Events))*10*time.Millisecond).Seconds())
	pc := map[string]any{
		"system": r.system, "mode": r.mode, "db": peerURL(b.cfg.AdminURL, db, b.srv.TLS), "workload": r.wlFile, "log": logFile,
		"queue": strings.ToLower(r.wl.Name), "handlerMs": float64(r.wl.Handler) / float64(time.Millisecond),
		"produce": r.produce, "sendConcurrency": 16, "timeoutS": timeoutS, "retryDelayS": r.retryS,
		"rate": b.cfg.LatRate, "notify": r.notify,
	}
	switch {
	case r.system == "pgboss":
		// One worker fetching batches of c (see the comment on peerRun).
		pc["workers"], pc["batchSize"], pc["poolSize"] = 1, r.workers, 10
	default:
		pc["workers"] = r.workers
	}
	cfgFile := logFile + ".json"
	if data, err := json.Marshal(pc); err != nil {
		res.Err = err.Error()
		return out
	} else if err := os.WriteFile(cfgFile, data, 0o644); err != nil {
		res.Err = err.Error()
		return out
	}

	pctx, cancel := context.WithTimeout(ctx, time.Duration(timeoutS+120)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(pctx, "node", "run.mjs", cfgFile)
	cmd.Dir = b.cfg.PeersDir
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderrFile := logFile + ".stderr"
	ef, err := os.Create(stderrFile)
	if err != nil {
		res.Err = err.Error()
		return out
	}
	defer ef.Close()
	cmd.Stderr = ef
	if err := cmd.Start(); err != nil {
		res.Err = err.Error()
		return out
	}
	msgs := make(chan peerMsg)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m peerMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				msgs <- m
			}
		}
	}()
	next := func(want string) (peerMsg, error) {
		m, ok := <-msgs
		switch {
		case !ok:
			return m, fmt.Errorf("the Node side exited before %q (stderr: %s)", want, tailFile(stderrFile))
		case m.Msg == "error":
			return m, fmt.Errorf("the Node side failed: %s", lastLines(m.Error, 4))
		case m.Msg != want:
			return m, fmt.Errorf("the Node side said %q, expected %q", m.Msg, want)
		}
		return m, nil
	}
	fail := func(err error) []*Result {
		res.Err = err.Error()
		cancel()
		cmd.Wait()
		return out
	}
	if _, err := next("ready"); err != nil {
		return fail(err)
	}
	s0, err := b.srv.snapshot(ctx, db)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintln(stdin, "go")
	s1 := s0
	if r.mode == "drain" {
		enq, err := next("enqueued")
		if err != nil {
			return fail(err)
		}
		if s1, err = b.srv.snapshot(ctx, db); err != nil {
			return fail(err)
		}
		prod.Seconds = enq.MS / 1000
		prod.Rate = rate(len(r.wl.Events), time.Duration(enq.MS*float64(time.Millisecond)))
		prod.Cost = costOf(s0, s1, len(r.wl.Events))
		prod.Cost.ClientCPU = enq.CPUUS / float64(len(r.wl.Events))
		prod.Config = fmt.Sprintf("%s (%s)", map[string]string{"one": "one job a call, 16 calls in flight", "bulk": "bulk insert, 1000 a call"}[r.produce], r.wl.Name)
		if r.system == "pgboss" && r.produce == "bulk" {
			prod.Config = fmt.Sprintf("insert(), 1000 jobs a call (%s)", r.wl.Name)
		} else if r.system == "graphile" && r.produce == "bulk" {
			prod.Config = fmt.Sprintf("addJobs(), 1000 jobs a call (%s)", r.wl.Name)
		}
		fmt.Fprintln(stdin, "go")
	}
	dr, err := next("drained")
	if err != nil {
		return fail(err)
	}
	if _, err := next("done"); err != nil {
		return fail(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		res.Err = fmt.Sprintf("node: %v (stderr: %s)", err, tailFile(stderrFile))
	}
	b.srv.waitIdle(ctx, db)
	s2, err := b.srv.snapshot(ctx, db)
	if err != nil {
		res.Err = err.Error()
		return out
	}
	res.Seconds = dr.MS / 1000
	res.Rate = rate(dr.Handled, time.Duration(dr.MS*float64(time.Millisecond)))
	res.Cost = costOf(s1, s2, max(1, dr.Handled))
	res.Cost.ClientCPU = dr.CPUUS / float64(max(1, dr.Handled))
	res.Overlaps = dr.Overlaps
	res.SleepMean = time.Duration(dr.SleepMean * float64(time.Millisecond))
	if dr.Handled < len(r.wl.Events) && res.Err == "" {
		res.Err = fmt.Sprintf("timed out with %d of %d events handled", dr.Handled, len(r.wl.Events))
	}
	check, lats, err := readPeerLog(logFile, r.wl)
	if err != nil {
		res.Err = err.Error()
		return out
	}
	res.Check = check
	if r.mode == "latency" {
		res.Lat = latencyOf(lats)
	} else {
		res.Limit = r.wl.orderedBound(r.workers, b.cfg.W3Backoff)
	}
	if r.producer {
		out = append(out, prod)
	}
	return out
}

// readPeerLog reads the Node side's handling log into the shared checker.
func readPeerLog(path string, wl *Workload) (ordercheck.Report, []time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return ordercheck.Report{}, nil, err
	}
	defer f.Close()
	var hs []ordercheck.Handling
	var lats []time.Duration
	seen := make([]bool, len(wl.Events))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 4 {
			return ordercheck.Report{}, nil, fmt.Errorf("bad line in %s: %q", path, sc.Text())
		}
		seq, err1 := strconv.Atoi(fields[1])
		lat, err2 := strconv.ParseInt(fields[3], 10, 64)
		if err1 != nil || err2 != nil {
			return ordercheck.Report{}, nil, fmt.Errorf("bad line in %s: %q", path, sc.Text())
		}
		idx := wl.index(fields[0], seq)
		if idx < 0 {
			return ordercheck.Report{}, nil, fmt.Errorf("the Node side handled an event the bench did not send: %q", sc.Text())
		}
		ok := fields[2] == "1"
		hs = append(hs, ordercheck.Handling{Key: fields[0], Seq: seq, OK: ok})
		if lat > 0 && !seen[idx] {
			seen[idx] = true
			lats = append(lats, time.Duration(lat)*time.Microsecond)
		}
	}
	if err := sc.Err(); err != nil {
		return ordercheck.Report{}, nil, err
	}
	return ordercheck.Check(wl.PerKey, hs, nil), lats, nil
}

func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), 5)
}
