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

// New creates a fresh database with the engine of PARTITIONQ_ENGINE (PgQ
// by default) and registers its drop with t.Cleanup.
func New(t testing.TB) DB {
	t.Helper()
	eng := Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatalf("PARTITIONQ_TEST_DATABASE_URL or DATABASE_URL: %v", err)
	}
	if conn, err := pgx.ConnectConfig(ctx, admin); err != nil {
		if os.Getenv("PARTITIONQ_REQUIRE_DB") != "" {
			t.Fatalf("no test database server at %s: %v (run scripts/devdb.sh)", AdminURL(), err)
		}
		t.Skipf("no test database server at %s: %v (run `make test`, which brings one up)", AdminURL(), err)
	} else {
		conn.Close(ctx)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "pqtest_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("PQ_TEST_KEEP_FAILED") != "" { // debug aid: keep a failed test's database
			t.Logf("kept the failed test's database %s (PQ_TEST_KEEP_FAILED)", name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := freshdb.Drop(ctx, admin, name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	if _, err := freshdb.Create(ctx, admin, freshdb.Spec{Name: name, Engine: eng}); err != nil {
		if eng.Name == freshdb.PgQ {
			t.Fatalf("%v (install postgresql-<major>-pgq3; scripts/devdb.sh does)", err)
		}
		t.Fatal(err)
	}
	return DB{Name: name, URL: ReplaceDB(AdminURL(), admin.Database, name), Schema: eng.Schema()}
}

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
