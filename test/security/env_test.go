package security_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/pgtest"
)

// roleNames are the group roles of sql/roles.sql.
var roleNames = []string{"producer", "worker", "operator", "viewer"}

// env is a fresh database with queue q and group g (2 slots), the roles of
// sql/roles.sql under a prefix of this test's own, a login role in each,
// and a ticker running as the owner (the ticker is the owner's job).
type env struct {
	t      *testing.T
	db     pgtest.DB
	admin  *pgxpool.Pool
	ac     *partitionq.Client // the owner's client
	prefix string
	ctx    context.Context
	// extraRoles are roles a test made beyond the group and login roles;
	// dropped at cleanup too.
	extraRoles []string
}

// rolesSQL is sql/roles.sql with the role names under prefix.
func rolesSQL(t *testing.T, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range roleNames {
		s = strings.ReplaceAll(s, "partitionq_"+r, prefix+"_"+r)
	}
	return s
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := newBareEnv(t)
	if _, err := e.ac.Setup(e.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2, TickMaxLag: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	sql := rolesSQL(t, e.prefix)
	for range 2 { // idempotent
		if _, err := e.admin.Exec(e.ctx, sql); err != nil {
			t.Fatalf("sql/roles.sql: %v", err)
		}
	}
	e.logins()
	tctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.ac.RunTicker(tctx, partitionq.TickerConfig{Interval: 10 * time.Millisecond, MaintInterval: time.Second})
	}()
	t.Cleanup(func() { stop(); <-done })
	return e
}

// newBareEnv is a fresh database with an engine and nothing else: no
// partitionq schema, no roles yet (their names are reserved: they are
// dropped at cleanup).
func newBareEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	admin := pgtest.Pool(t, db, 10)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ac, err := partitionq.NewClient(ctx, admin, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &env{t: t, db: db, admin: admin, ac: ac, prefix: "pqsec_" + hex.EncodeToString(b), ctx: ctx}
	// Runs before the database is dropped (cleanups run last first).
	t.Cleanup(e.dropRoles)
	return e
}

// logins creates a login role in each group role.
func (e *env) logins() {
	e.t.Helper()
	for _, r := range roleNames {
		if _, err := e.admin.Exec(e.ctx, fmt.Sprintf("create role %s login in role %s", e.login(r), e.group(r))); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) group(role string) string { return e.prefix + "_" + role }
func (e *env) login(role string) string { return e.prefix + "_" + role + "_login" }

func (e *env) dropRoles() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.db.URL)
	if err != nil {
		e.t.Errorf("drop roles: %v", err)
		return
	}
	defer conn.Close(ctx)
	var names []string
	for _, r := range roleNames {
		names = append(names, e.login(r), e.group(r))
	}
	for _, name := range append(names, e.extraRoles...) {
		var exists bool
		if err := conn.QueryRow(ctx, `select exists (select 1 from pg_roles where rolname = $1)`, name).Scan(&exists); err != nil || !exists {
			continue
		}
		// Drop the grants in this database, end the role's sessions, drop it.
		for _, stmt := range []string{
			"drop owned by " + name,
			fmt.Sprintf("select pg_terminate_backend(pid) from pg_stat_activity where usename = '%s'", name),
			"drop role " + name,
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				e.t.Errorf("drop role %s: %s: %v", name, stmt, err)
			}
		}
	}
}

// url is the test database's URL as the login role of role.
func (e *env) url(role string) string {
	c, err := connstr.Parse(e.db.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	c.Set("user", e.login(role))
	return c.String()
}

// pool opens a pool that logs in as role.
func (e *env) pool(role string, maxConns int) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.db.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.ConnConfig.User = e.login(role)
	cfg.MaxConns = int32(maxConns)
	p, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	var who string
	if err := p.QueryRow(e.ctx, `select current_user`).Scan(&who); err != nil || who != e.login(role) {
		e.t.Fatalf("pool as %s connects as %q: %v", role, who, err)
	}
	return p
}

// client is a library client that acts as role, logging to log if given.
func (e *env) client(role string, maxConns int, log *pgtest.SyncBuffer) *partitionq.Client {
	e.t.Helper()
	cfg := partitionq.Config{Actor: role + "-person"}
	if log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := partitionq.NewClient(e.ctx, e.pool(role, maxConns), cfg)
	if err != nil {
		e.t.Fatalf("client as %s: %v", role, err)
	}
	return c
}

// cli runs one partitionq command line as role ("": the owner).
func (e *env) cli(role, stdin string, args ...string) (int, string, string) {
	return e.cliCtx(e.ctx, role, stdin, args...)
}

// cliCtx is cli until ctx ends.
func (e *env) cliCtx(ctx context.Context, role, stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	url := e.db.URL
	if role != "" {
		url = e.url(role)
	}
	code := cli.Main(ctx, args, cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string {
			switch k {
			case "DATABASE_URL":
				return url
			case "USER":
				return role + "-person"
			}
			return ""
		}})
	return code, out.String(), errb.String()
}

// denied checks that err is PostgreSQL's permission denied (42501).
func denied(t *testing.T, what string, err error) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("%s: got %v, want PostgreSQL's permission denied (SQLSTATE 42501)", what, err)
	}
}

// handler is the worker's handler in the scene: an event whose payload
// starts with "fail" fails every time, "once" fails on its first attempt,
// "poison" asks for a dead letter; anything else succeeds. Successes are
// recorded by key, in order.
type handler struct {
	mu      sync.Mutex
	handled map[string][]string
	calls   int
}

func (h *handler) Handle(_ context.Context, ev *partitionq.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	p := string(ev.Payload)
	switch {
	case strings.HasPrefix(p, "fail"):
		return errors.New("scripted failure")
	case strings.HasPrefix(p, "once") && ev.Attempt == 1:
		return errors.New("scripted first failure")
	case strings.HasPrefix(p, "poison"):
		return partitionq.DeadLetterNow(errors.New("scripted poison"))
	}
	if h.handled == nil {
		h.handled = map[string][]string{}
	}
	h.handled[ev.Key] = append(h.handled[ev.Key], p)
	return nil
}

func (h *handler) got(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.handled[key]...)
}

// scene is the state the operator and viewer tests act on, made by a
// producer and a worker logging in with their roles:
//   - key k blocked on "fail-k" with 2 events waiting,
//   - key k2 blocked on "fail-k2" with 1 waiting,
//   - key t: its first event fails once, then both of its events succeed,
//   - key p: one dead letter,
//   - key ok: 2 events handled.
type scene struct {
	h      *handler
	w      *partitionq.Worker
	headK  int64
	headK2 int64
	deadP  int64
}

func (e *env) scene() *scene {
	e.t.Helper()
	sc := &scene{h: &handler{}}
	wc := e.client("worker", partitionq.WorkerConns(), nil)
	w, err := wc.NewWorker(e.ctx, partitionq.WorkerConfig{
		Queue: "q", Group: "g", Handler: sc.h,
		Retry:     partitionq.RetryConfig{BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, HeadScanInterval: 50 * time.Millisecond},
		Limits:    partitionq.LimitsConfig{Concurrency: 4, PollInterval: 10 * time.Millisecond},
		Ownership: partitionq.OwnershipConfig{StandbyPoll: 100 * time.Millisecond},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	sc.w = w
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			e.t.Errorf("stop worker: %v", err)
		}
	})
	pc := e.client("producer", 2, nil)
	var ms []partitionq.Message
	for _, kv := range [][2]string{{"k", "fail-k"}, {"k", "k-1"}, {"k", "k-2"}, {"k2", "fail-k2"}, {"k2", "k2-1"},
		{"t", "once-t"}, {"t", "t-1"}, {"p", "poison-p"}, {"ok", "ok-1"}, {"ok", "ok-2"}} {
		ms = append(ms, partitionq.Message{Key: kv[0], Type: "Scene", Payload: []byte(kv[1])})
	}
	if _, err := pc.SendBatch(e.ctx, "q", ms); err != nil {
		e.t.Fatalf("send as producer: %v", err)
	}
	pgtest.WaitFor(e.t, 30*time.Second, "the scene (2 blocked keys, 1 dead letter, t and ok handled)", func() (bool, error) {
		bk, err := e.ac.BlockedKeys(e.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		dls, err := e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
		if err != nil {
			return false, err
		}
		waiting := map[string]int64{}
		for _, b := range bk {
			waiting[b.Key] = b.Waiting
			switch b.Key {
			case "k":
				sc.headK = b.Head.ID
			case "k2":
				sc.headK2 = b.Head.ID
			}
		}
		if len(dls) == 1 {
			sc.deadP = dls[0].ID
		}
		return len(bk) == 2 && waiting["k"] == 2 && waiting["k2"] == 1 && len(dls) == 1 &&
			len(sc.h.got("t")) == 2 && len(sc.h.got("ok")) == 2, nil
	})
	return sc
}

// state is what a refused action must leave as it was.
type state struct {
	headK, headK2   int64
	waitK, waitK2   int64
	dead, replayed  int
	audit, events   int
	retryRows, fail int
}

func (e *env) state() state {
	e.t.Helper()
	var s state
	for _, k := range []string{"k", "k2"} {
		bk, err := e.ac.BlockedKey(e.ctx, "q", "g", k)
		if err != nil && !errors.Is(err, partitionq.ErrNotBlocked) {
			e.t.Fatal(err)
		}
		if k == "k" {
			s.headK, s.waitK = bk.Head.ID, bk.Waiting
		} else {
			s.headK2, s.waitK2 = bk.Head.ID, bk.Waiting
		}
	}
	err := e.admin.QueryRow(e.ctx, e.db.SQL(`select (select count(*) from partitionq.dead_letter),
		(select count(*) from partitionq.dead_letter where replayed_at is not null),
		(select count(*) from partitionq.audit), (select count(*) from pgq.event_1),
		(select count(*) from pgq.retry_queue), (select count(*) from partitionq.failure)`)).
		Scan(&s.dead, &s.replayed, &s.audit, &s.events, &s.retryRows, &s.fail)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}
