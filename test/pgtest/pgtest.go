// Package pgtest gives tests a fresh database on the real PostgreSQL with
// the real engine, and drops it afterwards.
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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/connstr"
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
	Name string
	URL  string // connection string of the fresh database
}

// New creates a fresh database with the pgq extension and registers its
// drop with t.Cleanup.
func New(t testing.TB) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		if os.Getenv("PARTITIONQ_REQUIRE_DB") != "" {
			t.Fatalf("no test database server at %s: %v (run scripts/devdb.sh)", AdminURL(), err)
		}
		t.Skipf("no test database server at %s: %v (run `make test`, which brings one up)", AdminURL(), err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "pqtest_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "create database "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	url := ReplaceDB(AdminURL(), cfg.Database, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "drop database if exists "+name+" with (force)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	// The first create extension pgq of a cluster creates cluster-wide roles
	// (pgq_reader, ...) with a check-then-create that races between
	// databases: serialize it with a lock taken in the shared admin database.
	if _, err := admin.Exec(ctx, "select pg_advisory_lock(28753, -100)"); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "select pg_advisory_unlock(28753, -100)") //nolint:errcheck
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create extension if not exists pgq"); err != nil {
		t.Fatalf("create extension pgq in %s: %v (install postgresql-<major>-pgq3; scripts/devdb.sh does)", name, err)
	}
	return DB{Name: name, URL: url}
}

// ReplaceDB points a URL or keyword/value connection string at the
// database to, wherever the string names its database (internal/connstr);
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
