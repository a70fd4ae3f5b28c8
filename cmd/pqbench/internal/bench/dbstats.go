package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/connstr"
)

// Server is the PostgreSQL server under test.
type Server struct {
	AdminURL string
	Version  string // server_version
	PgQ      string // pgq extension version
	Settings map[string]string

	// Statements is true when pg_stat_statements is loaded: statement time
	// and WAL per database come from it. Otherwise WAL is the whole
	// cluster's (pg_current_wal_lsn) and statement time is not measured.
	Statements bool
	statsDB    string // database holding the pg_stat_statements view

	// TLS is true when the connection to AdminURL uses TLS (sslmode=prefer
	// falls back to none on a server without it).
	TLS bool

	// postmaster is the server's main process when it runs on this machine
	// and /proc shows it: server CPU is then the CPU time of it and all its
	// children (the whole cluster).
	postmaster int
	clkTck     float64
}

var reportedSettings = []string{"shared_buffers", "max_connections", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_preload_libraries"}

func connectServer(ctx context.Context, adminURL string) (*Server, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w (start a server with scripts/devdb.sh, or pass -db)", redactConn(adminURL), err)
	}
	defer conn.Close(ctx)
	s := &Server{AdminURL: adminURL, Settings: map[string]string{}, clkTck: 100}
	_, s.TLS = conn.PgConn().Conn().(*tls.Conn)
	if err := conn.QueryRow(ctx, `select current_setting('server_version'),
		coalesce((select default_version from pg_available_extensions where name = 'pgq'), '')`).Scan(&s.Version, &s.PgQ); err != nil {
		return nil, err
	}
	if s.PgQ == "" {
		return nil, errors.New("the server does not offer the pgq extension: install postgresql-<major>-pgq3 (scripts/devdb.sh does)")
	}
	for _, name := range reportedSettings {
		var v string
		if err := conn.QueryRow(ctx, `select current_setting($1)`, name).Scan(&v); err == nil {
			s.Settings[name] = v
		}
	}
	s.Statements = strings.Contains(s.Settings["shared_preload_libraries"], "pg_stat_statements")
	var pid int
	if err := conn.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err == nil {
		if pp, ok := procParent(pid); ok {
			if _, _, ok := procCPU(pp); ok {
				s.postmaster = pp
			}
		}
	}
	return s, nil
}

// ServerCPUMeasured reports whether server CPU time is measured.
func (s *Server) ServerCPUMeasured() bool { return s.postmaster != 0 }

// Snapshot is the database's counters at one moment.
type Snapshot struct {
	At        time.Time
	Calls     int64   // statements (pg_stat_statements, this database)
	ExecMS    float64 // their execution time
	WALBytes  int64   // this database's statements' WAL, or the cluster's WAL position
	RowsRead  int64   // heap rows read by scans of this database's tables
	RowsOwn   int64   // of which partitionq's own tables (schema partitionq)
	ServerCPU time.Duration
	ClientCPU time.Duration // this process's CPU time
}

// Cost is what one run cost, per event.
type Cost struct {
	RowsRead  float64 // heap rows read per event
	RowsOwn   float64 // of which from partitionq's own tables (leases, progress, slots)
	ExecUS    float64 // statement time per event (µs), 0 when not measured
	WALBytes  float64 // WAL bytes per event
	ServerCPU float64 // server CPU per event (µs), 0 when not measured
	ClientCPU float64 // client CPU per event (µs)
	Calls     float64 // statements per event
}

func (s *Server) snapshot(ctx context.Context, db string) (Snapshot, error) {
	snap := Snapshot{At: time.Now(), ClientCPU: selfCPU()}
	if s.postmaster != 0 {
		snap.ServerCPU = s.clusterCPU()
	}
	conn, err := pgx.Connect(ctx, replaceDB(s.AdminURL, db))
	if err != nil {
		return snap, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `select pg_stat_clear_snapshot()`); err != nil {
		return snap, err
	}
	if err := conn.QueryRow(ctx, `select coalesce(sum(seq_tup_read), 0)::int8 + coalesce(sum(idx_tup_fetch), 0)::int8,
		coalesce(sum(seq_tup_read) filter (where schemaname = 'partitionq'), 0)::int8 + coalesce(sum(idx_tup_fetch) filter (where schemaname = 'partitionq'), 0)::int8
		from pg_stat_all_tables`).Scan(&snap.RowsRead, &snap.RowsOwn); err != nil {
		return snap, err
	}
	if s.Statements {
		sconn := conn
		if db != s.statsDB {
			if sconn, err = pgx.Connect(ctx, replaceDB(s.AdminURL, s.statsDB)); err != nil {
				return snap, err
			}
			defer sconn.Close(ctx)
		}
		err = sconn.QueryRow(ctx, `select coalesce(sum(calls), 0)::int8, coalesce(sum(total_exec_time), 0)::float8, coalesce(sum(wal_bytes), 0)::int8
			from pg_stat_statements where dbid = (select oid from pg_database where datname = $1)`, db).Scan(&snap.Calls, &snap.ExecMS, &snap.WALBytes)
		return snap, err
	}
	err = conn.QueryRow(ctx, `select pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&snap.WALBytes)
	return snap, err
}

func costOf(a, b Snapshot, events int) Cost {
	if events <= 0 {
		return Cost{}
	}
	n := float64(events)
	c := Cost{
		RowsRead:  float64(b.RowsRead-a.RowsRead) / n,
		RowsOwn:   float64(b.RowsOwn-a.RowsOwn) / n,
		ExecUS:    (b.ExecMS - a.ExecMS) * 1000 / n,
		WALBytes:  float64(b.WALBytes-a.WALBytes) / n,
		ServerCPU: float64((b.ServerCPU - a.ServerCPU).Microseconds()) / n,
		ClientCPU: float64((b.ClientCPU - a.ClientCPU).Microseconds()) / n,
		Calls:     float64(b.Calls-a.Calls) / n,
	}
	if b.WALBytes < a.WALBytes || b.ExecMS < a.ExecMS || b.Calls < a.Calls {
		// pg_stat_statements evicted entries during the run (its sums went
		// down): its numbers for this run are unknown.
		c.WALBytes, c.ExecUS, c.Calls = -1, -1, -1
	}
	return c
}

// waitIdle waits (up to 5s) until no session but this one is connected to
// db, so that the sessions of the run just ended have flushed their
// statistics (a session flushes them when it exits).
func (s *Server) waitIdle(ctx context.Context, db string) {
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := conn.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`, db).Scan(&n); err != nil || n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Exited sessions flush as they go; give the last ones a moment.
	time.Sleep(50 * time.Millisecond)
}

// ---------------------------------------------------------------- /proc

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat returns the fields of /proc/PID/stat after the command name.
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

func procParent(pid int) (int, bool) {
	f, ok := procStat(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// procCPU returns a process's own CPU ticks and those of its reaped children.
func procCPU(pid int) (own, children int64, ok bool) {
	f, ok := procStat(pid)
	if !ok || len(f) < 15 {
		return 0, 0, false
	}
	v := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	// Fields from state (index 0): utime 11, stime 12, cutime 13, cstime 14.
	return v(11) + v(12), v(13) + v(14), true
}

// clusterCPU is the CPU time of the postmaster, its live children and the
// children it has reaped: every server process of the cluster.
func (s *Server) clusterCPU() time.Duration {
	own, reaped, ok := procCPU(s.postmaster)
	if !ok {
		return 0
	}
	ticks := own + reaped
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == s.postmaster {
			continue
		}
		if pp, ok := procParent(pid); ok && pp == s.postmaster {
			if c, _, ok := procCPU(pid); ok {
				ticks += c
			}
		}
	}
	return time.Duration(float64(ticks) / s.clkTck * float64(time.Second))
}

// ---------------------------------------------------------------- URLs

// replaceDB points the connection string connStr at the database db
// (partitionq/connstr). Run has checked that connStr parses.
func replaceDB(connStr, db string) string {
	s, err := connstr.WithDatabase(connStr, db)
	if err != nil {
		panic(fmt.Sprintf("pqbench: the admin connection string does not parse: %v", err))
	}
	return s
}

// peerURL is replaceDB as a URL, for the peers (Node.js), which read only
// that form, and which know no fallback from TLS: when the Go side's
// connection does not use TLS (useTLS false), neither do theirs.
func peerURL(connStr, db string, useTLS bool) string {
	c, err := connstr.Parse(replaceDB(connStr, db))
	if err != nil {
		panic(fmt.Sprintf("pqbench: the admin connection string does not parse: %v", err))
	}
	if !useTLS {
		c.Set("sslmode", "disable")
	}
	return c.URL()
}

// redactConn hides the password of a connection string.
func redactConn(connStr string) string {
	c, err := connstr.Parse(connStr)
	if err != nil {
		return "(a connection string that does not parse)"
	}
	return c.Redacted()
}

// redact hides a password in a URL written in a command line.
func redact(u string) string {
	i := strings.Index(u, "://")
	at := strings.LastIndexByte(u, '@')
	if i < 0 || at < i {
		return u
	}
	cred := u[i+3 : at]
	if c := strings.IndexByte(cred, ':'); c >= 0 {
		return u[:i+3] + cred[:c] + ":***" + u[at:]
	}
	return u
}

// ---------------------------------------------------------------- sessions

// connSampler counts the client sessions connected to a database while a
// run goes on.
type connSampler struct {
	peak atomic.Int64
	quit chan struct{}
	done chan struct{}
	take func() // one sample now
	last func() int
}

// sampleConns starts counting db's client sessions every 50ms from an
// admin session (on the admin database, so it is not counted itself); stop
// returns the most seen; sample takes one at once.
func (s *Server) sampleConns(ctx context.Context, db string) *connSampler {
	cs := &connSampler{quit: make(chan struct{}), done: make(chan struct{})}
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		close(cs.done)
		cs.take, cs.last = func() {}, func() int { return 0 }
		return cs
	}
	sample := func() {
		if n, err := s.conns(ctx, conn, db); err == nil && int64(n) > cs.peak.Load() {
			cs.peak.Store(int64(n))
		}
	}
	var mu sync.Mutex // one query at a time on conn
	cs.take = func() { mu.Lock(); defer mu.Unlock(); sample() }
	cs.last = func() int { conn.Close(context.Background()); return int(cs.peak.Load()) }
	go func() {
		defer close(cs.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-cs.quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				cs.take()
			}
		}
	}()
	return cs
}

// sample takes one sample now (the goroutine samples every 50ms).
func (cs *connSampler) sample() { cs.take() }

// stop ends the sampling and returns the most sessions seen.
func (cs *connSampler) stop() int {
	close(cs.quit)
	<-cs.done
	return cs.last()
}

// conns counts the client sessions connected to db, but the caller's.
func (s *Server) conns(ctx context.Context, conn *pgx.Conn, db string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `select count(*)::int from pg_stat_activity
		where datname = $1 and backend_type = 'client backend' and pid <> pg_backend_pid()`, db).Scan(&n)
	return n, err
}

// xacts is db's count of transactions (commits and rollbacks) so far, as
// the statistics collector has them (sessions report every second or so).
func (s *Server) xacts(ctx context.Context, conn *pgx.Conn, db string) (int64, error) {
	if _, err := conn.Exec(ctx, `select pg_stat_clear_snapshot()`); err != nil {
		return 0, err
	}
	var n int64
	err := conn.QueryRow(ctx, `select coalesce(xact_commit + xact_rollback, 0)::int8 from pg_stat_database where datname = $1`, db).Scan(&n)
	return n, err
}
