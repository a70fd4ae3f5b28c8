// Package freshdb makes a fresh database with a queue engine installed in
// it, and drops it. It is the one way the demo, the test rigs and the
// benchmark make their databases.
//
// The engines: PgQ is the extension `pgq` (create extension pgq); PgQue is
// one SQL file, run in the new database (the file named by
// PARTITIONQ_PGQUE_SQL, or a path the caller gives). The first install of
// either in a cluster creates the engine's cluster-wide roles with a
// check-then-create that races between databases, so installs take turns
// on an advisory lock in the maintenance database they connect through.
//
// Functions are safe for concurrent use.
package freshdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq/pglock"
)

// Environment variables that choose the engine (see FromEnv).
const (
	// EnvEngine selects the engine: "pgq" (the default) or "pgque".
	EnvEngine = "PARTITIONQ_ENGINE"
	// EnvPgQueSQL names PgQue's install file (PgQue's sql/pgque.sql).
	EnvPgQueSQL = "PARTITIONQ_PGQUE_SQL"
)

// Engine names.
const (
	PgQ   = "pgq"
	PgQue = "pgque"
)

// Engine is the queue engine to install. The zero value installs none.
type Engine struct {
	// Name is PgQ ("pgq"), PgQue ("pgque"), or "" for no engine.
	Name string
	// SQLFile is PgQue's install file; unused for PgQ.
	SQLFile string
}

// Schema returns the engine's schema ("pgq" or "pgque"), or "" for none.
func (e Engine) Schema() string { return e.Name }

// String names the engine for messages.
func (e Engine) String() string {
	switch e.Name {
	case PgQ:
		return "PgQ"
	case PgQue:
		return "PgQue (" + e.SQLFile + ")"
	}
	return "no engine"
}

// FromEnv returns the engine that getenv (os.Getenv when nil) selects:
// PARTITIONQ_ENGINE ("pgq" when unset) and, for PgQue, the install file
// PARTITIONQ_PGQUE_SQL, which must exist.
func FromEnv(getenv func(string) string) (Engine, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch name := getenv(EnvEngine); name {
	case "", PgQ:
		return Engine{Name: PgQ}, nil
	case PgQue:
		return New(PgQue, getenv(EnvPgQueSQL))
	default:
		return Engine{}, fmt.Errorf("invalid %s=%q: use %q or %q", EnvEngine, name, PgQ, PgQue)
	}
}

// New returns the engine name ("pgq" or "pgque"); sqlFile is PgQue's
// install file (ignored for PgQ), which must exist.
func New(name, sqlFile string) (Engine, error) {
	switch name {
	case PgQ:
		return Engine{Name: PgQ}, nil
	case PgQue:
		if sqlFile == "" {
			return Engine{}, fmt.Errorf("PgQue is installed from its SQL file (PgQue's sql/pgque.sql), and none is named: set %s to its path", EnvPgQueSQL)
		}
		if st, err := os.Stat(sqlFile); err != nil || st.IsDir() {
			return Engine{}, fmt.Errorf("PgQue's install file %q (%s) cannot be read: point %s at PgQue's sql/pgque.sql", sqlFile, errText(err, "a directory"), EnvPgQueSQL)
		}
		return Engine{Name: PgQue, SQLFile: sqlFile}, nil
	}
	return Engine{}, fmt.Errorf("unknown engine %q: use %q or %q", name, PgQ, PgQue)
}

func errText(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// Step names the part of making a database that failed.
type Step string

// The steps of Create.
const (
	StepConnect   Step = "connect"
	StepCreate    Step = "create database"
	StepComment   Step = "comment on database"
	StepInstall   Step = "install the engine"
	StepExtension Step = "create an extension"
)

// Error is a failure of Create or Install: the step, the database, and the
// cause (a *pgconn.PgError when the server refused; errors.As finds it).
type Error struct {
	Step     Step
	Database string
	Engine   Engine
	Err      error
}

func (e *Error) Error() string {
	switch e.Step {
	case StepInstall:
		return fmt.Sprintf("install %s in the database %q: %v", e.Engine, e.Database, e.Err)
	case StepExtension:
		return fmt.Sprintf("in the database %q: %v", e.Database, e.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.Step, e.Database, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// SQLState is the SQLSTATE of the server's refusal, or "".
func (e *Error) SQLState() string {
	var pe *pgconn.PgError
	if errors.As(e.Err, &pe) {
		return pe.Code
	}
	return ""
}

// Spec is one database to make.
type Spec struct {
	// Name is the database's name (quoted as an identifier).
	Name string
	// Engine is installed in it; the zero Engine installs none.
	Engine Engine
	// Comment, when not empty, is set on the database right after it is
	// made, before the engine is installed.
	Comment string
	// Extensions are created after the engine (for example
	// pg_stat_statements).
	Extensions []string
}

// Create makes the database s.Name on the server of admin (a connection
// to an existing database there, such as postgres) and installs s.Engine
// in it. It returns the connection configuration of the new database.
// A database of that name must not exist (see Drop). ctx governs the whole
// call. On an error the database may exist, half made: Drop it.
func Create(ctx context.Context, admin *pgx.ConnConfig, s Spec) (*pgx.ConnConfig, error) {
	conn, err := pgx.ConnectConfig(ctx, admin.Copy())
	if err != nil {
		return nil, &Error{Step: StepConnect, Database: admin.Database, Err: err}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{s.Name}.Sanitize()
	if _, err := conn.Exec(ctx, "create database "+ident); err != nil {
		return nil, &Error{Step: StepCreate, Database: s.Name, Err: err}
	}
	if s.Comment != "" {
		if _, err := conn.Exec(ctx, "comment on database "+ident+" is "+quoteLiteral(s.Comment)); err != nil {
			return nil, &Error{Step: StepComment, Database: s.Name, Err: err}
		}
	}
	cfg := admin.Copy()
	cfg.Database = s.Name
	if s.Engine.Name == "" && len(s.Extensions) == 0 {
		return cfg, nil
	}
	db, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, &Error{Step: StepConnect, Database: s.Name, Err: err}
	}
	defer db.Close(context.WithoutCancel(ctx))
	if err := install(ctx, conn, db, s.Engine); err != nil {
		return nil, &Error{Step: StepInstall, Database: s.Name, Engine: s.Engine, Err: err}
	}
	for _, ext := range s.Extensions {
		if _, err := db.Exec(ctx, "create extension if not exists "+pgx.Identifier{ext}.Sanitize()); err != nil {
			return nil, &Error{Step: StepExtension, Database: s.Name, Err: fmt.Errorf("create extension %s: %w", ext, err)}
		}
	}
	return cfg, nil
}

// install installs eng through db, holding the lock pglock.CreateExtension
// meanwhile in locker's session. Advisory locks are per database: locker is
// connected to the maintenance database, which every install on the server
// shares.
func install(ctx context.Context, locker, db *pgx.Conn, eng Engine) error {
	var script string
	switch eng.Name {
	case "":
		return nil
	case PgQ:
		script = "create extension if not exists pgq"
	case PgQue:
		b, err := os.ReadFile(eng.SQLFile)
		if err != nil {
			return fmt.Errorf("read PgQue's install file: %w", err)
		}
		script = string(b)
	default:
		return fmt.Errorf("unknown engine %q", eng.Name)
	}
	unlock, err := pglock.Session(ctx, locker, pglock.CreateExtension)
	if err != nil {
		return err
	}
	defer unlock(context.WithoutCancel(ctx)) // released with the session anyway
	// Without arguments Exec uses the simple protocol: the whole file runs
	// as one multi-statement query, in one implicit transaction.
	_, err = db.Exec(ctx, script)
	return err
}

// Drop drops the database name on the server of admin, ending its
// sessions first; a database that does not exist is no error.
func Drop(ctx context.Context, admin *pgx.ConnConfig, name string) error {
	conn, err := pgx.ConnectConfig(ctx, admin.Copy())
	if err != nil {
		return &Error{Step: StepConnect, Database: admin.Database, Err: err}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
		return fmt.Errorf("drop database %q: %w", name, err)
	}
	return nil
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
