// Package pglock names every PostgreSQL advisory lock partitionq takes, in
// one place. Advisory locks are taken only for short administrative steps
// (setting a group up, migrating partitionq's schema, installing the engine
// in test and demo databases): any role that may connect can take
// an advisory lock, so nothing that decides who runs a slot or whose turn
// the ticker is depends on one (those are row locks and lease rows in
// partitionq's own tables, which only the roles granted them can write; see
// docs/security.md).
//
// It is public because the module's own tools outside the library (the
// databases the demo, the tests and the benchmark make, internal/freshdb)
// take their lock with it too; a program beside partitionq may read Class
// to keep its own advisory locks out of partitionq's.
package pglock

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is the first key of every partitionq advisory lock ("pQ").
const Class int32 = 28753

// Key is the second key of an advisory lock of Class.
type Key int32

// The fixed keys. Keys derived from names (SetupKey) are hashtext values,
// which can collide with these only by chance; a collision serialises two
// short steps, nothing worse.
const (
	// Migrate serialises migrations of the partitionq schema.
	Migrate Key = -1
	// CreateExtension serialises the engine's installs (`create extension
	// pgq`, PgQue's install file) across the databases of one cluster, in
	// the maintenance database they connect through: the first install
	// creates cluster-wide roles with a check-then-create that races.
	CreateExtension Key = -100
)

// Execer is what the lock functions need: a connection, pool or transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Xact takes key for the rest of the transaction db runs in, waiting for it.
func Xact(ctx context.Context, db Execer, key Key) error {
	_, err := db.Exec(ctx, `select pg_advisory_xact_lock($1, $2)`, Class, int32(key))
	return err
}

// XactName takes the lock keyed by hashtext(name) for the rest of the
// transaction, waiting for it (setup of one group: SetupName).
func XactName(ctx context.Context, db Execer, name string) error {
	_, err := db.Exec(ctx, `select pg_advisory_xact_lock($1, hashtext($2))`, Class, name)
	return err
}

// SetupName is the name whose lock serialises setups of one group.
func SetupName(queue, group string) string { return "setup:" + queue + "/" + group }

// Session takes key for the session of conn, waiting for it; unlock
// releases it (it is released with the session anyway).
func Session(ctx context.Context, conn Execer, key Key) (unlock func(context.Context) error, err error) {
	if _, err := conn.Exec(ctx, `select pg_advisory_lock($1, $2)`, Class, int32(key)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := conn.Exec(ctx, `select pg_advisory_unlock($1, $2)`, Class, int32(key))
		return err
	}, nil
}
