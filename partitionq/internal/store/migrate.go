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
	"github.com/partitionq/partitionq/partitionq/internal/pglock"
)

// The schema is the numbered SQL files of migration/, each upgrading the
// version before it: NNNN_what.sql takes a schema at version NNNN-1 to
// version NNNN. A file, once released, is never edited: a change to a
// table or a function is a new file (a function's current text is in the
// newest file that creates or replaces it).
//
//go:embed migration/*.sql
var migrationFS embed.FS

// Migration is one step of the schema.
type Migration struct {
	Version int
	Name    string // the file name, e.g. "0004_record_functions.sql"
	SQL     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// Migrations returns every step of the schema, in version order, numbered
// 1, 2, 3, ... without a gap. The caller must not change the slice.
func Migrations() []Migration { return migrations() }

var migrations = sync.OnceValue(func() []Migration {
	entries, err := fs.ReadDir(migrationFS, "migration")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			panic("store: migration file " + e.Name() + " is not named NNNN_what.sql")
		}
		v, _ := strconv.Atoi(m[1])
		b, err := migrationFS.ReadFile("migration/" + e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("store: migration %s is number %d, expected %d", m.Name, m.Version, i+1))
		}
	}
	return out
})

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
// above the database's version, in order, in one transaction under the
// migration lock (concurrent callers wait; the second finds the work done).
// A schema already at Latest costs one read and needs no right beyond
// reading schema_version, so roles without CREATE can call it; a newer one
// fails with a *SchemaVersionError.
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
		if from > Latest() {
			return &SchemaVersionError{Have: from, Want: Latest()}
		}
		return apply(ctx, tx, from, Latest())
	})
}

// apply runs the migrations above from, up to to, in tx and records to.
func apply(ctx context.Context, tx pgx.Tx, from, to int) error {
	if from >= to {
		return nil
	}
	for _, m := range Migrations() {
		if m.Version <= from || m.Version > to {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate partitionq's schema to version %d (%s): %w", m.Version, m.Name, err)
		}
	}
	if _, err := tx.Exec(ctx, `delete from partitionq.schema_version`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `insert into partitionq.schema_version values ($1)`, to)
	return err
}

// MigrateTo brings a schema at a version below to up to version to (at
// most Latest()), as Migrate does: for tests that rebuild an earlier
// version.
func MigrateTo(ctx context.Context, pool db.TxStarter, to int) error {
	if to > Latest() {
		return fmt.Errorf("no schema version %d: the newest is %d", to, Latest())
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := pglock.Xact(ctx, tx, pglock.Migrate); err != nil {
			return err
		}
		from, err := Current(ctx, tx)
		if err != nil {
			return err
		}
		return apply(ctx, tx, from, to)
	})
}
