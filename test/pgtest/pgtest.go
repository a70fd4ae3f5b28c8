// Package pgtest gives tests a fresh database on the real PostgreSQL with
// the real engine, and drops it afterwards. The engine is PgQ, or PgQue
// with PARTITIONQ_ENGINE=pgque and PARTITIONQ_PGQUE_SQL naming its install
// file (make test runs the suite once on each).
//
// The server comes from PARTITIONQ_TEST_DATABASE_URL, else DATABASE_URL,
// else postgres://postgres@127.0.0.1:5432/postgres (make test sets them;
// scripts/devdb.sh brings a server up). Tests are skipped, not failed, when
// no server answers and PARTITIONQ_REQUIRE_DB is not set; CI sets it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq/connstr"
)

// AdminURL returns the URL of the server's maintenance database.
func AdminURL() string {
	for _, k := range []string{"PARTITIONQ_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// DB is one fresh database.
type DB struct {
	Name   string
	URL    string // connection string of the fresh database
	Schema string // the engine's schema: "pgq" or "pgque"
}

// SQL returns sql with every "pgq." replaced by the engine's schema, for
// tests that read the engine's tables or call its functions by hand.
func (db DB) SQL(sql string) string {
	if db.Schema == freshdb.PgQ {
		return sql
	}
	return strings.ReplaceAll(sql, "pgq.", db.Schema+".")
}

// Engine returns the engine the tests run on, from PARTITIONQ_ENGINE and
// PARTITIONQ_PGQUE_SQL (see internal/freshdb); it fails the test when they
// are wrong.
func Engine(t testing.TB) freshdb.Engine {
	t.Helper()
	eng, err := freshdb.FromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// EngineNeutral marks a test whose subject does not depend on the queue
// engine (a command's flags and errors, health endpoints, timeouts and
// shutdowns, the handler protocols, metrics and tracing): the PgQ half of
// make test runs it, the PgQue half skips it, saying so, as it leaves out
// the packages of that kind (scripts/gotest.sh). PQ_ALL_PACKAGES=1 runs it
// on PgQue too.
func EngineNeutral(t testing.TB) {
	t.Helper()
	if os.Getenv(freshdb.EnvEngine) == freshdb.PgQue && os.Getenv("PQ_ALL_PACKAGES") != "1" {
		t.Skip("engine-neutral: the PgQ half of make test runs it (PQ_ALL_PACKAGES=1 runs it on PgQue too)")
	}
}

// New creates a fresh database with the engine of PARTITIONQ_ENGINE (PgQ
// by default) and registers its drop with t.Cleanup.
func New(t testing.TB) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, skip, err := prepare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(func() {
		if t.Failed() && keepFailed() { // debug aid: keep a failed test's database
			t.Logf("kept the failed test's database %s (PQ_TEST_KEEP_FAILED)", f.name)
			return
		}
		if err := f.drop(); err != nil {
			t.Errorf("drop database %s: %v", f.name, err)
		}
	})
	db, err := f.create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Shared is one test database for a whole package, for tests that would
// spend more on making a database and installing the engine than on what
// they check. The zero value is ready: the first test that calls DB makes
// the database, and TestMain drops it with Close:
//
//	var shared pgtest.Shared
//
//	func TestMain(m *testing.M) { os.Exit(shared.Close(m.Run())) }
//
// The tests must keep out of each other's way (a queue each, or work in a
// transaction rolled back, as with InTx). DB is safe for concurrent use by
// the package's tests; Close comes after them.
type Shared struct {
	once sync.Once
	f    fresh // f.name is set once the database is named: Close drops it, made or half made
	db   DB
	skip string // why tests are skipped: no server answers
	err  error  // why tests fail
}

// DB returns the package's database, made on the first call with the
// engine of PARTITIONQ_ENGINE as New installs it. As with New, t is
// skipped when no server answers and PARTITIONQ_REQUIRE_DB is not set, and
// fails when the database cannot be made; so is every later test.
func (s *Shared) DB(t testing.TB) DB {
	t.Helper()
	s.once.Do(s.make)
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.db
}

func (s *Shared) make() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, skip, err := prepare(ctx)
	if err != nil || skip != "" {
		s.skip, s.err = skip, err
		return
	}
	s.f = f // named before it is made: a database half made is dropped too
	s.db, s.err = f.create(ctx)
}

// Close drops the database, if one was made, for TestMain once the tests
// have run with exit code code; as with New, a failed run's database
// (code != 0) is kept when PQ_TEST_KEEP_FAILED is set. It returns the exit
// code: code, or 1 when the drop failed. Close the package's pools on the
// database first.
func (s *Shared) Close(code int) int {
	if s.f.name == "" {
		return code
	}
	if code != 0 && keepFailed() {
		fmt.Fprintf(os.Stderr, "kept the failed tests' database %s (PQ_TEST_KEEP_FAILED)\n", s.f.name)
		return code
	}
	if err := s.f.drop(); err != nil {
		fmt.Fprintf(os.Stderr, "drop database %s: %v\n", s.f.name, err)
		return 1
	}
	s.f.name = "" // dropped
	return code
}

// fresh is a database to make: its name, the engine to install and the
// server, as New and Shared make them.
type fresh struct {
	name  string
	eng   freshdb.Engine
	admin *pgx.ConnConfig
}

// prepare reads the engine (PARTITIONQ_ENGINE) and the server, checks that
// the server answers and names a new database. When no server answers it
// returns why in skip, or, with PARTITIONQ_REQUIRE_DB set, in err.
func prepare(ctx context.Context) (f fresh, skip string, err error) {
	if f.eng, err = freshdb.FromEnv(nil); err != nil {
		return fresh{}, "", err
	}
	if f.admin, err = pgx.ParseConfig(AdminURL()); err != nil {
		return fresh{}, "", fmt.Errorf("PARTITIONQ_TEST_DATABASE_URL or DATABASE_URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, f.admin)
	if err != nil {
		if os.Getenv("PARTITIONQ_REQUIRE_DB") != "" {
			return fresh{}, "", fmt.Errorf("no test database server at %s: %w (run scripts/devdb.sh)", AdminURL(), err)
		}
		return fresh{}, fmt.Sprintf("no test database server at %s: %v (run `make test`, which brings one up)", AdminURL(), err), nil
	}
	conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	f.name = "pqtest_" + hex.EncodeToString(b)
	return f, "", nil
}

// create makes the database with the engine installed. On an error it may
// exist, half made: drop it.
func (f fresh) create(ctx context.Context) (DB, error) {
	if _, err := freshdb.Create(ctx, f.admin, freshdb.Spec{Name: f.name, Engine: f.eng}); err != nil {
		if f.eng.Name == freshdb.PgQ {
			return DB{}, fmt.Errorf("%w (install postgresql-<major>-pgq3; scripts/devdb.sh does)", err)
		}
		return DB{}, err
	}
	return DB{Name: f.name, URL: ReplaceDB(AdminURL(), f.admin.Database, f.name), Schema: f.eng.Schema()}, nil
}

// drop drops the database, made or half made.
func (f fresh) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return freshdb.Drop(ctx, f.admin, f.name)
}

// keepFailed reports whether a failed test's database is to be kept
// (PQ_TEST_KEEP_FAILED, a debug aid).
func keepFailed() bool { return os.Getenv("PQ_TEST_KEEP_FAILED") != "" }

// ReplaceDB points a URL or keyword/value connection string at the
// database to, wherever the string names its database (partitionq/connstr);
// from is not needed.
func ReplaceDB(connStr, from, to string) string {
	s, err := connstr.WithDatabase(connStr, to)
	if err != nil {
		panic(fmt.Sprintf("pgtest: cannot point the test server's connection string at database %s: %v", to, err))
	}
	return s
}

// Pool opens a pool on db with at least maxConns connections, closed at cleanup.
func Pool(t testing.TB, db DB, maxConns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// WaitFor polls cond every 20ms until it is true or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// InTx runs fn in a transaction on pool and rolls it back afterwards, so
// that a test leaves nothing behind (DDL included: PostgreSQL's DDL is
// transactional) and the next test of the package can use the same
// database. Code under test that begins transactions of its own on tx gets
// savepoints.
func InTx(t testing.TB, pool *pgxpool.Pool, fn func(tx pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // the point: nothing is kept
	fn(tx)
}

// RowsRead is how many rows of tables (names as regclass takes them) the
// transaction tx has read so far: sequential scans' rows and index scans'
// fetches (pg_stat_xact_user_tables), for tests that bound a statement's
// reads.
func RowsRead(t testing.TB, tx pgx.Tx, tables ...string) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRow(context.Background(), `select coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::int8
		from pg_stat_xact_user_tables where relid = any($1::regclass[])`, tables).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
