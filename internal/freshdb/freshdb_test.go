package freshdb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/test/pgtest"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "pgque.sql")
	if err := os.WriteFile(file, []byte("select 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		env     func(string) string
		want    freshdb.Engine
		wantErr string
	}{
		{env(), freshdb.Engine{Name: freshdb.PgQ}, ""},
		{env(freshdb.EnvEngine, "pgq", freshdb.EnvPgQueSQL, file), freshdb.Engine{Name: freshdb.PgQ}, ""},
		{env(freshdb.EnvEngine, "pgque", freshdb.EnvPgQueSQL, file), freshdb.Engine{Name: freshdb.PgQue, SQLFile: file}, ""},
		{env(freshdb.EnvEngine, "pgque"), freshdb.Engine{}, "set PARTITIONQ_PGQUE_SQL to its path"},
		{env(freshdb.EnvEngine, "pgque", freshdb.EnvPgQueSQL, file+".missing"), freshdb.Engine{}, "cannot be read: point PARTITIONQ_PGQUE_SQL at PgQue's sql/pgque.sql"},
		{env(freshdb.EnvEngine, "pgque", freshdb.EnvPgQueSQL, t.TempDir()), freshdb.Engine{}, "(a directory)"},
		{env(freshdb.EnvEngine, "PgQ"), freshdb.Engine{}, `invalid PARTITIONQ_ENGINE="PgQ": use "pgq" or "pgque"`},
	} {
		got, err := freshdb.FromEnv(c.env)
		switch {
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("FromEnv: %+v, %v; want %+v", got, err, c.want)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("FromEnv: %+v, %v; want an error saying %q", got, err, c.wantErr)
		}
	}
}

// Create makes databases with the tests' engine, several at once (the
// engines' first install in a cluster creates roles with a
// check-then-create: installs take turns), with a comment and an
// extension; a name in use is an *Error of the create step with the
// server's SQLSTATE; Drop removes the database and ignores a missing one.
func TestCreateAndDrop(t *testing.T) {
	t.Parallel()
	pgtest.New(t) // skips or fails as the other tests do when no server answers
	eng := pgtest.Engine(t)
	admin, err := pgx.ParseConfig(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "pqtest_freshdb_" + hex.EncodeToString(b)
	names := []string{prefix + "_a", prefix + "_b", prefix + "_c"}
	t.Cleanup(func() {
		for _, n := range names {
			if err := freshdb.Drop(context.Background(), admin, n); err != nil {
				t.Error(err)
			}
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	cfgs := make([]*pgx.ConnConfig, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfgs[i], errs[i] = freshdb.Create(ctx, admin, freshdb.Spec{Name: n, Engine: eng, Comment: "made by 'a' test", Extensions: []string{"pg_trgm"}})
		}()
	}
	wg.Wait()
	for i, n := range names {
		if errs[i] != nil {
			t.Fatalf("Create %s: %v", n, errs[i])
		}
		conn, err := pgx.ConnectConfig(ctx, cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		var engine, trgm bool
		var comment string
		err = conn.QueryRow(ctx, `select to_regprocedure($1 || '.next_batch(text,text)') is not null,
			exists (select 1 from pg_extension where extname = 'pg_trgm'),
			shobj_description((select oid from pg_database where datname = current_database()), 'pg_database')`,
			eng.Schema()).Scan(&engine, &trgm, &comment)
		conn.Close(ctx)
		if err != nil || !engine || !trgm || comment != "made by 'a' test" {
			t.Fatalf("%s: engine %s installed %v, pg_trgm %v, comment %q, %v", n, eng, engine, trgm, comment, err)
		}
	}

	_, err = freshdb.Create(ctx, admin, freshdb.Spec{Name: names[0], Engine: eng})
	var fe *freshdb.Error
	if !errors.As(err, &fe) || fe.Step != freshdb.StepCreate || fe.SQLState() != "42P04" || !strings.Contains(err.Error(), names[0]) {
		t.Fatalf("Create of a name in use: %v, want the create step failing with 42P04 (duplicate_database)", err)
	}

	if err := freshdb.Drop(ctx, admin, names[0]); err != nil {
		t.Fatal(err)
	}
	if err := freshdb.Drop(ctx, admin, names[0]); err != nil {
		t.Fatalf("Drop of a database that is gone: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `select count(*) from pg_database where datname = $1`, names[0]).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after Drop: %d databases named %s, %v", left, names[0], err)
	}
}

// A PgQue file that fails is the install step's error, with the server's
// refusal inside.
func TestInstallFailure(t *testing.T) {
	t.Parallel()
	pgtest.New(t)
	admin, err := pgx.ParseConfig(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pgque.sql")
	if err := os.WriteFile(file, []byte("create schema pgque; select no_such_function();"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := freshdb.New(freshdb.PgQue, file)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "pqtest_freshdb_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if err := freshdb.Drop(context.Background(), admin, name); err != nil {
			t.Error(err)
		}
	})
	_, err = freshdb.Create(context.Background(), admin, freshdb.Spec{Name: name, Engine: eng})
	var fe *freshdb.Error
	if !errors.As(err, &fe) || fe.Step != freshdb.StepInstall || fe.SQLState() != "42883" || !strings.Contains(err.Error(), "install PgQue ("+file+")") {
		t.Fatalf("a failing install file: %v, want the install step failing with 42883 (undefined_function)", err)
	}
}
