package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/pglock"
)

// partitionq's schema is two kinds of SQL file, embedded:
//
//   - migration/NNNN_what.sql, the tables: each takes a schema at version
//     NNNN-1 to version NNNN (tables, indexes, triggers, rows and rights
//     moved, functions dropped whose signature changed), and opens with a
//     "-- Version NNNN:" comment saying what changed and why.
//   - function/NAME.sql, one function each as it is now: `create or
//     replace function partitionq.NAME`, with its rights. Every one is
//     applied, in name order, after the migrations, whenever a database's
//     version moves up (a new schema or an upgrade); `create or replace`
//     keeps the rights roles were granted (sql/roles.sql). A function in
//     SQL (not PL/pgSQL) is checked when it is created: it may call only
//     the functions of files before its own. A migration that needs a
//     function while it runs (a trigger, a grant) says so on a line
//     "-- Needs function/NAME.sql", and the function is created from its
//     file before the migration runs (as it is now: in SQL, it may read
//     only tables that the versions before have).
//
// A change to a function needs a new version too, or databases already at
// the newest one never get it: a migration that may hold only its comment,
// naming the function and why it changed (TestLatestVersionIsFrozen fails
// until there is one). A released migration is rewritten only as far as
// every earlier version still upgrades to the schema a new database gets,
// with its rows (TestMigrationUpgradesEveryEarlierVersion). The schema that
// results, tables and functions, is sql/schema.sql, generated from a new
// database (TestSchemaFile).
//
//go:embed migration/*.sql function/*.sql
var schemaFS embed.FS

// Migration is one step of the schema's tables.
type Migration struct {
	Version int
	Name    string // the file name, e.g. "0004_record_functions.sql"
	SQL     string
	// Needs are the functions (names of Function) created before the
	// migration runs: its "-- Needs function/NAME.sql" lines.
	Needs []string
}

// Function is one function of the schema, as it is now.
type Function struct {
	Name string // the function's name and its file's: give_up is function/give_up.sql
	SQL  string
}

var (
	migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)
	functionName  = regexp.MustCompile(`^([a-z0-9_]+)\.sql$`)
	needsLine     = regexp.MustCompile(`(?m)^-- Needs function/([a-z0-9_]+)\.sql\b`)
)

// Migrations returns every step of the schema's tables, in version order,
// numbered 1, 2, 3, ... without a gap. The caller must not change the slice.
func Migrations() []Migration { return migrations() }

var migrations = sync.OnceValue(func() []Migration {
	fns := map[string]bool{}
	for _, f := range Functions() {
		fns[f.Name] = true
	}
	var out []Migration
	for _, e := range readDir("migration") {
		m := migrationName.FindStringSubmatch(e)
		if m == nil {
			panic("store: migration file " + e + " is not named NNNN_what.sql")
		}
		v, _ := strconv.Atoi(m[1])
		sql := readFile("migration/" + e)
		var needs []string
		for _, n := range needsLine.FindAllStringSubmatch(sql, -1) {
			if !fns[n[1]] {
				panic(fmt.Sprintf("store: migration %s needs function/%s.sql, which does not exist", e, n[1]))
			}
			needs = append(needs, n[1])
		}
		out = append(out, Migration{Version: v, Name: e, SQL: sql, Needs: needs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("store: migration %s is number %d, expected %d", m.Name, m.Version, i+1))
		}
	}
	return out
})

// Functions returns every function of the schema, in name order (the
// order they are applied in). The caller must not change the slice.
func Functions() []Function { return functions() }

var functions = sync.OnceValue(func() []Function {
	var out []Function
	for _, e := range readDir("function") {
		m := functionName.FindStringSubmatch(e)
		if m == nil {
			panic("store: function file " + e + " is not named after its function (NAME.sql)")
		}
		out = append(out, Function{Name: m[1], SQL: readFile("function/" + e)})
	}
	return out // fs.ReadDir sorts by name
})

// readDir and readFile read the embedded files, which cannot fail.
func readDir(dir string) []string {
	entries, err := fs.ReadDir(schemaFS, dir)
	if err != nil {
		panic(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

func readFile(name string) string {
	b, err := schemaFS.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Latest is the schema version this package writes and reads: the number
// of its newest migration.
func Latest() int { return len(Migrations()) }

// ErrSchemaMissing reports a database without partitionq's schema.
var ErrSchemaMissing = errors.New("partitionq's schema is not installed in this database: run partitionq setup (Client.Setup) once as its owner")

// SchemaVersionError reports a schema at another version than this
// package's: an older one (Have < Want) needs partitionq setup (or a
// worker) run once by its owner; a newer one (Have > Want) was made by a
// newer partitionq, which this one must not guess at.
type SchemaVersionError struct {
	Have, Want int
}

func (e *SchemaVersionError) Error() string {
	if e.Have > e.Want {
		return fmt.Sprintf("partitionq's schema in this database is version %d, newer than this partitionq knows (%d): upgrade this program to a partitionq that knows schema version %d (docs/operations.md, \"Upgrading partitionq's schema\")",
			e.Have, e.Want, e.Have)
	}
	return fmt.Sprintf("partitionq's schema in this database is version %d, older than this partitionq needs (%d): run partitionq setup once as the schema's owner to upgrade it (docs/operations.md, \"Upgrading partitionq's schema\")",
		e.Have, e.Want)
}

// Current reads the schema's version: 0 when it is not installed.
func Current(ctx context.Context, q db.DB) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `select to_regclass('partitionq.schema_version') is not null`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read partitionq schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, `select coalesce(max(version), 0) from partitionq.schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read partitionq schema version: %w", err)
	}
	return v, nil
}

// Check reports whether the schema is at this package's Latest version: nil, or
// ErrSchemaMissing, or a *SchemaVersionError.
func Check(ctx context.Context, q db.DB) error {
	v, err := Current(ctx, q)
	switch {
	case err != nil:
		return err
	case v == 0:
		return ErrSchemaMissing
	case v != Latest():
		return &SchemaVersionError{Have: v, Want: Latest()}
	}
	return nil
}

// Migrate brings partitionq's schema to the Latest version: it applies every migration
// above the database's version, in order, then every function, in one
// transaction under the migration lock (concurrent callers wait; the
// second finds the work done). A schema already at Latest costs one read
// and needs no right beyond reading schema_version, so roles without
// CREATE can call it; a newer one fails with a *SchemaVersionError.
func Migrate(ctx context.Context, pool db.TxStarter) error {
	v, err := Current(ctx, pool)
	if err != nil {
		return err
	}
	if v == Latest() {
		return nil
	}
	if v > Latest() {
		return &SchemaVersionError{Have: v, Want: Latest()}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := pglock.Xact(ctx, tx, pglock.Migrate); err != nil {
			return err
		}
		from, err := Current(ctx, tx) // another caller may have migrated meanwhile
		if err != nil {
			return err
		}
		switch {
		case from > Latest():
			return &SchemaVersionError{Have: from, Want: Latest()}
		case from == Latest():
			return nil
		}
		return apply(ctx, tx, from)
	})
}

// apply runs the migrations above from in tx, each after the functions
// it needs, then creates every function and records the Latest version.
// Only the newest schema can be built: the functions are as they are now.
func apply(ctx context.Context, tx pgx.Tx, from int) error {
	fns := map[string]Function{}
	for _, f := range Functions() {
		fns[f.Name] = f
	}
	for _, m := range Migrations() {
		if m.Version <= from {
			continue
		}
		for _, name := range m.Needs {
			if _, err := tx.Exec(ctx, fns[name].SQL); err != nil {
				return fmt.Errorf("create partitionq.%s (function/%s.sql), which migration %s needs: %w", name, name, m.Name, err)
			}
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate partitionq's schema to version %d (%s): %w", m.Version, m.Name, err)
		}
	}
	for _, f := range Functions() {
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return fmt.Errorf("create partitionq.%s (function/%s.sql): %w", f.Name, f.Name, err)
		}
	}
	if _, err := tx.Exec(ctx, `delete from partitionq.schema_version`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `insert into partitionq.schema_version values ($1)`, Latest())
	return err
}
