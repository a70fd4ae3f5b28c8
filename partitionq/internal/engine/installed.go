package engine

import (
	"context"
	"fmt"
)

// CheckInstalled reports, when the engine's schema holds no engine (no
// next_batch function), that it is not installed and how to install it, as
// Detect does when it finds none: a schema given by the caller (--engine
// pgque on a database with PgQ only) would otherwise fail later with a raw
// "relation does not exist".
func (e *Engine) CheckInstalled(ctx context.Context, db DB) error {
	var here, pgq, pgque bool
	err := db.QueryRow(ctx, `select to_regprocedure($1) is not null,
	                                to_regprocedure('pgq.next_batch(text,text)') is not null,
	                                to_regprocedure('pgque.next_batch(text,text)') is not null`,
		e.schema+".next_batch(text,text)").Scan(&here, &pgq, &pgque)
	if err != nil {
		return fmt.Errorf("check that the engine %s is installed: %w", e.schema, err)
	}
	if here {
		return nil
	}
	var install string
	switch e.schema {
	case SchemaPgQ:
		install = "install it with `create extension pgq` (Debian package postgresql-<major>-pgq3; docs/engines.md, PgQ)"
	case SchemaPgQue:
		install = "load PgQue: one SQL file, run by the role that will own the schema pgque (docs/engines.md, PgQue)"
	default:
		install = "check the engine schema's name"
	}
	var other string
	switch {
	case pgq && e.schema != SchemaPgQ:
		other = "; or use pgq, which is installed here (leave the engine out to detect it)"
	case pgque && e.schema != SchemaPgQue:
		other = "; or use pgque, which is installed here (leave the engine out to detect it)"
	}
	return fmt.Errorf("the engine %s is not installed in this database (no %s.next_batch): %s%s",
		e.schema, e.schema, install, other)
}
