// Package db is what every layer of partitionq needs from PostgreSQL: the
// one interface a pool, a connection or a transaction satisfies, and the
// tests of SQLSTATE codes that the layers classify errors by (never by the
// text of a message).
package db

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxStarter is a DB that can also begin a transaction (a pool or a connection).
type TxStarter interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SQLSTATE codes partitionq tests for.
const (
	CodeLockNotAvailable   = "55P03"
	CodeUniqueViolation    = "23505"
	CodeUndefinedTable     = "42P01"
	CodeUndefinedColumn    = "42703"
	CodeUndefinedFunction  = "42883"
	CodeInsufficientPriv   = "42501"
	CodeQueryCanceled      = "57014"
	CodeAdminShutdown      = "57P01"
	CodeRaiseException     = "P0001"
	CodeObjectInUse        = "55006"
	CodeSerialization      = "40001"
	CodeDeadlock           = "40P01"
	CodeFeatureUnsupported = "0A000"
)

// Code returns the SQLSTATE of err, or "" when err is not a server error.
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsLockNotAvailable reports SQLSTATE 55P03: a lock wait failed (NOWAIT, or
// lock_timeout passed).
func IsLockNotAvailable(err error) bool { return Code(err) == CodeLockNotAvailable }

// IsInsufficientPrivilege reports SQLSTATE 42501.
func IsInsufficientPrivilege(err error) bool { return Code(err) == CodeInsufficientPriv }

// Permanent reports a server error that retrying cannot fix: no right
// (class 42, 28), a missing object (42), no such database (3D) or schema
// (3F). Connection failures, a server starting up or shutting down, too
// many clients and the like may pass.
func Permanent(err error) bool {
	c := Code(err)
	if len(c) != 5 {
		return false
	}
	switch c[:2] {
	case "42", "28", "3D", "3F":
		return true
	}
	return false
}

// StatementPooling reports the error a connection pooler in statement mode
// (PgBouncer pool_mode=statement) gives a transaction of several
// statements. PgBouncer gives no SQLSTATE of its own for it (08P01, a
// protocol violation), so the message is the only sign.
func StatementPooling(err error) bool {
	return err != nil && Code(err) == "08P01" && strings.Contains(err.Error(), "statement pooling")
}

// Message returns the server's message of a PostgreSQL error (without the
// "ERROR:" prefix and SQLSTATE pgx adds), or err's text.
func Message(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}
