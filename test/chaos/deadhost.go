package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// A vanished host: a worker whose packets stop, its process alive, its
// sessions on the server open (power loss, or a partition the server does
// not see). The worker runs in a network namespace of its own, joined to
// the host by a veth pair; the run takes the namespace's end of the pair
// down, so that nothing the worker or the server sends arrives, and
// measures how long the server keeps the worker's sessions and how long its
// slots take to move to a standby outside the namespace.

// ErrNoNetns reports that the run cannot make a network namespace (it needs
// root and iproute2's ip).
var ErrNoNetns = errors.New("a network namespace cannot be made here (it needs root and the ip command of iproute2)")

// DeadHostConfig configures RunDeadHost.
type DeadHostConfig struct {
	// WorkerBin is test/cmd/testworker.
	WorkerBin string
	Engine    freshdb.Engine
	// Lease is the workers' LeaseDuration (default 1s) and DeadHost their
	// DeadHostTimeout (default 4s); a negative DeadHost leaves the
	// server's TCP settings (the control run: the sessions stay).
	Lease, DeadHost time.Duration
	// Watch is how long the run waits for the vanished worker's sessions
	// to end (default DeadHost + 20s; the control run waits this long and
	// expects them to stay).
	Watch     time.Duration
	Dir       string // run logs; required
	WorkerLog io.Writer
	Logf      func(format string, args ...any)
}

// DeadHostReport is what RunDeadHost measured.
type DeadHostReport struct {
	ordercheck.Report
	// Dropped is the time from the drop to the kernel having ended the
	// vanished worker's connections to the server (what the worker's TCP
	// settings decide), Gone to the server's processes having ended its
	// sessions (a moment later, more on a loaded machine; 0: they stayed
	// for Watch), Moved to the standby owning every slot (0: not waited
	// for).
	Dropped, Gone, Moved time.Duration
	// Sessions is how many sessions of the vanished worker's own pool
	// the server had when its packets stopped.
	Sessions int
}

func (r DeadHostReport) String() string {
	gone := "stayed"
	if r.Gone > 0 {
		gone = fmt.Sprintf("ended after %s (their connections after %s)", r.Gone.Round(10*time.Millisecond), r.Dropped.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("the vanished worker's %d sessions %s, its slots moved after %s; %s", r.Sessions, gone, r.Moved.Round(10*time.Millisecond), r.Report)
}

// netns is a network namespace joined to the host by a veth pair.
type netns struct {
	name, hostDev, nsDev string
	hostIP, nsIP, cidr   string
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}

// newNetns makes a namespace with a veth pair in a random /30 of
// 10.213.0.0/16; close removes both.
func newNetns(ctx context.Context) (*netns, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNoNetns
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, ErrNoNetns
	}
	k := 1 + rand.IntN(250)
	n := &netns{name: fmt.Sprintf("pqdh%d", k), hostDev: fmt.Sprintf("pqdh%dh", k), nsDev: fmt.Sprintf("pqdh%dn", k),
		hostIP: fmt.Sprintf("10.213.%d.1", k), nsIP: fmt.Sprintf("10.213.%d.2", k), cidr: fmt.Sprintf("10.213.%d.0/30", k)}
	if err := ipCmd(ctx, "netns", "add", n.name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	for _, args := range [][]string{
		{"link", "add", n.hostDev, "type", "veth", "peer", "name", n.nsDev},
		{"link", "set", n.nsDev, "netns", n.name},
		{"addr", "add", n.hostIP + "/30", "dev", n.hostDev},
		{"link", "set", n.hostDev, "up"},
		{"netns", "exec", n.name, "ip", "addr", "add", n.nsIP + "/30", "dev", n.nsDev},
		{"netns", "exec", n.name, "ip", "link", "set", n.nsDev, "up"},
		{"netns", "exec", n.name, "ip", "link", "set", "lo", "up"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// drop takes the namespace's end of the pair down: nothing crosses any more.
func (n *netns) drop(ctx context.Context) error {
	return ipCmd(ctx, "netns", "exec", n.name, "ip", "link", "set", n.nsDev, "down")
}

func (n *netns) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = ipCmd(ctx, "netns", "del", n.name) // takes its end of the pair, and so the pair
	_ = ipCmd(ctx, "link", "del", n.hostDev)
}

// RunDeadHost runs worker A in a network namespace and standby B outside
// it, lets A own every slot and handle events (some failing, so keys are
// blocked), drops A's packets, and measures how long the server keeps A's
// sessions and the slots take to reach B; then every event must be handled
// with no overlap, order violation or loss.
func RunDeadHost(ctx context.Context, cfg DeadHostConfig) (rep DeadHostReport, err error) {
	if cfg.Lease == 0 {
		cfg.Lease = time.Second
	}
	if cfg.DeadHost == 0 {
		cfg.DeadHost = 4 * time.Second
	}
	if cfg.Watch == 0 {
		cfg.Watch = max(cfg.DeadHost, cfg.Lease) + 20*time.Second
	}
	if cfg.WorkerLog == nil {
		cfg.WorkerLog = io.Discard
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Dir == "" || cfg.WorkerBin == "" {
		return rep, errors.New("chaos.DeadHostConfig needs Dir and WorkerBin")
	}
	ns, err := newNetns(ctx)
	if err != nil {
		return rep, err
	}
	defer ns.close()
	cl, err := NewCluster(ctx, ClusterOptions{Listen: []string{ns.hostIP}, Trust: []string{ns.cidr}, Logf: cfg.Logf})
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	dbURL, err := NewDatabase(ctx, cl, cfg.Engine)
	if err != nil {
		return rep, err
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return rep, err
	}
	u.Host = fmt.Sprintf("%s:%d", ns.hostIP, cl.Port)
	nsURL := u.String()
	pool, err := harnessPool(ctx, dbURL, 8)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{Actor: "deadhost"})
	if err != nil {
		return rep, err
	}
	if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: queueName, Group: groupName, Slots: 4, TickMaxLag: 20 * time.Millisecond}); err != nil {
		return rep, err
	}
	if _, err := pool.Exec(ctx, runLogDDL); err != nil {
		return rep, err
	}

	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGKILL) // the run is over
			p.Wait()
		}
	}()
	var logs []string
	start := func(prefix []string, db, name string) (*exec.Cmd, error) {
		log := filepath.Join(cfg.Dir, "runs-"+name+".log")
		logs = append(logs, log)
		args := append(prefix, cfg.WorkerBin, "-db", db, "-queue", queueName, "-group", groupName, "-slots", "all",
			"-concurrency", "4", "-lease", cfg.Lease.String(), "-dead-host-timeout", cfg.DeadHost.String(),
			"-hold", "300ms", "-runlog", log, "-backoff-max", "100ms")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = io.Discard, cfg.WorkerLog
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, cmd)
		return cmd, nil
	}
	owners := func(ctx context.Context) (map[int]int32, error) { return slotOwners(ctx, client, queueName, groupName) }
	ownsAll := func(pid int) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			o, err := owners(ctx)
			if err != nil || len(o) != 4 {
				return false, err
			}
			for _, p := range o {
				if int(p) != pid {
					return false, nil
				}
			}
			return true, nil
		}
	}
	a, err := start([]string{"ip", "netns", "exec", ns.name}, nsURL, "a")
	if err != nil {
		return rep, err
	}
	if err := poll(ctx, 30*time.Second, "the worker in the namespace owning every slot", ownsAll(a.Process.Pid)); err != nil {
		return rep, err
	}
	b, err := start(nil, dbURL, "b")
	if err != nil {
		return rep, err
	}
	if err := poll(ctx, 30*time.Second, "the standby registered", func(ctx context.Context) (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `select count(*) from partitionq.worker where os_pid = $1`, b.Process.Pid).Scan(&n)
		return n > 0, err
	}); err != nil {
		return rep, err
	}

	// 16 keys x 12 events, every fifth failing twice: keys blocked and
	// draining when the packets stop.
	const keys, perKey = 16, 12
	sent := map[string]int{}
	var all []partitionq.Message
	for s := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k-%d", k)
			p := map[string]any{"k": key, "s": s}
			if s%5 == 4 {
				p["f"] = 2
			}
			body, _ := json.Marshal(p)
			all = append(all, partitionq.Message{Key: key, Type: "FileCreated", Payload: body})
			sent[key] = perKey
		}
	}
	if _, err := client.SendBatch(ctx, queueName, all); err != nil {
		return rep, err
	}
	if err := poll(ctx, 60*time.Second, "events handled by the worker in the namespace", func(ctx context.Context) (bool, error) {
		n, err := resolved(ctx, pool)
		return n >= 40, err
	}); err != nil {
		return rep, err
	}
	// The worker's own sessions (its application_name is its identity),
	// by their client ports, which find their connections in the kernel's
	// view; the sessions of the pool the program gave its client, which
	// the library does not configure, are the program's to bound.
	sessionPorts := func(ctx context.Context) ([]int, error) {
		rows, err := pool.Query(ctx, `select client_port from pg_stat_activity where client_addr = $1::inet and application_name = $2`,
			ns.nsIP, fmt.Sprintf("testworker:%d", a.Process.Pid))
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int])
	}
	ports, err := sessionPorts(ctx)
	if err != nil {
		return rep, err
	}
	rep.Sessions = len(ports)
	if err := ns.drop(ctx); err != nil {
		return rep, err
	}
	at := time.Now()
	cfg.Logf("deadhost: the worker in the namespace (%d sessions) lost its network", rep.Sessions)
	dropped := make(chan time.Duration, 1)
	var droppedErr error // read after dropped
	kctx, stopKernel := context.WithCancel(ctx)
	defer stopKernel()
	go func() {
		droppedErr = poll(kctx, cfg.Watch, "the kernel ending the vanished worker's connections", func(context.Context) (bool, error) {
			conns, err := serverConns(ns.nsIP, cl.Port, ports)
			return len(conns) == 0, err
		})
		if droppedErr != nil {
			dropped <- 0
			return
		}
		dropped <- time.Since(at)
	}()
	gone := make(chan time.Duration, 1)
	go func() {
		told := false
		err := poll(ctx, cfg.Watch, "the vanished worker's sessions ended", func(ctx context.Context) (bool, error) {
			left, err := sessionPorts(ctx)
			n := len(left)
			if err == nil && n > 0 && !told && cfg.DeadHost > 0 && time.Since(at) > cfg.DeadHost+time.Second {
				told = true // what keeps a session past its bound, for the log
				cfg.Logf("deadhost: %d sessions left %s after the drop:%s%s", n, time.Since(at).Round(10*time.Millisecond),
					leftSessions(ctx, pool, ns.nsIP, a.Process.Pid), leftConns(ns.nsIP, cl.Port, ports))
			}
			return n == 0, err
		})
		if err != nil {
			gone <- 0
			return
		}
		gone <- time.Since(at)
	}()
	if cfg.DeadHost < 0 { // the control: the server's settings keep them
		rep.Gone = <-gone
		return rep, nil
	}
	if err := poll(ctx, cfg.Watch, "the standby owning every slot", ownsAll(b.Process.Pid)); err != nil {
		return rep, err
	}
	rep.Moved = time.Since(at)
	if rep.Gone = <-gone; rep.Gone == 0 {
		return rep, fmt.Errorf("the vanished worker's sessions were still there %s after its packets stopped", cfg.Watch)
	}
	if rep.Dropped = <-dropped; rep.Dropped == 0 {
		return rep, droppedErr
	}
	if err := poll(ctx, 2*time.Minute, "every event handled", func(ctx context.Context) (bool, error) {
		n, err := resolved(ctx, pool)
		return n >= keys*perKey, err
	}); err != nil {
		return rep, err
	}
	b.Process.Signal(syscall.SIGTERM)
	b.Wait()
	a.Process.Signal(syscall.SIGKILL)
	a.Wait()
	procs = nil
	hs, err := runLogHandlings(ctx, pool)
	if err != nil {
		return rep, err
	}
	runs, err := ordercheck.ReadRunLogs(logs, map[string]time.Time{strconv.Itoa(a.Process.Pid): time.Now()})
	if err != nil {
		return rep, err
	}
	rep.Report = ordercheck.Check(sent, hs, nil).WithRuns(runs)
	return rep, nil
}

// leftConns describes the connections from ip's ports to the server's port
// the kernel still has: unacknowledged bytes, timer, retransmits.
func leftConns(ip string, port int, from []int) string {
	conns, err := serverConns(ip, port, from)
	if err != nil {
		return " " + err.Error()
	}
	var b strings.Builder
	for _, c := range conns {
		fmt.Fprintf(&b, "\n  connection %s", c)
	}
	return b.String()
}

// leftSessions describes the vanished worker's sessions still on the
// server: state, wait, statement.
func leftSessions(ctx context.Context, pool *pgxpool.Pool, ip string, pid int) string {
	rows, err := pool.Query(ctx, `select pid, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''), left(query, 80)
		from pg_stat_activity where client_addr = $1::inet and application_name = $2`, ip, fmt.Sprintf("testworker:%d", pid))
	if err != nil {
		return " " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var p int
		var state, wait, query string
		if err := rows.Scan(&p, &state, &wait, &query); err != nil {
			return " " + err.Error()
		}
		fmt.Fprintf(&b, "\n  backend %d: %s, waiting %q, %q", p, state, wait, query)
	}
	return b.String()
}
