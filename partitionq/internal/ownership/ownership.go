// Package ownership makes one live worker the owner of a slot, with a
// session-level PostgreSQL advisory lock keyed by the slot consumer's
// subscription id. The lock lives as long as the connection that took it: a
// worker that dies (even by kill -9) closes its connection, the server
// releases the lock, and a standby's next try takes it.
//
// It needs session state, so it does not work behind a pooler in
// transaction mode (PgBouncer pool_mode=transaction): connect workers
// directly or through a session-mode pool.
package ownership

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LockClass is the first key of partitionq's advisory locks ("pQ").
const LockClass = 28753

// DB is what the package needs from a connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// TryLock tries to take the slot lock of subID on conn; it does not wait.
func TryLock(ctx context.Context, conn DB, subID int32) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1, $2)`, int32(LockClass), subID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("try slot lock: %w", err)
	}
	return ok, nil
}

// Unlock releases the slot lock of subID held by conn.
func Unlock(ctx context.Context, conn DB, subID int32) error {
	_, err := conn.Exec(ctx, `select pg_advisory_unlock($1, $2)`, int32(LockClass), subID)
	return err
}

// Owner describes the session holding a slot lock.
type Owner struct {
	SubID           int32
	PID             int32
	ApplicationName string
	ClientAddr      string     // "" when the reading role may not see it
	BackendStart    *time.Time // nil when the reading role may not see it
}

// Owners returns the holder of each of the given slot locks that is held.
func Owners(ctx context.Context, db DB, subIDs []int32) (map[int32]Owner, error) {
	rows, err := db.Query(ctx, `
		select l.objid::int4, a.pid, coalesce(a.application_name, ''),
		       -- another role's address and start time are NULL without pg_read_all_stats
		       case when a.backend_start is null then '' else coalesce(host(a.client_addr), 'local') end,
		       a.backend_start
		  from pg_locks l join pg_stat_activity a on a.pid = l.pid
		 where l.locktype = 'advisory' and l.granted and l.classid = $1 and l.objsubid = 2
		   and l.database = (select oid from pg_database where datname = current_database())
		   and l.objid::int4 = any($2::int4[])`, int32(LockClass), subIDs)
	if err != nil {
		return nil, fmt.Errorf("read slot owners: %w", err)
	}
	defer rows.Close()
	out := map[int32]Owner{}
	for rows.Next() {
		var o Owner
		if err := rows.Scan(&o.SubID, &o.PID, &o.ApplicationName, &o.ClientAddr, &o.BackendStart); err != nil {
			return nil, err
		}
		out[o.SubID] = o
	}
	return out, rows.Err()
}
