package partitionq

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// A worker whose host vanishes (power loss, a network partition the server
// does not see) sends nothing more, and its sessions stay on the server
// until TCP gives up on them: with the server's default keepalives, hours.
// Its slots wait as long: a takeover needs the owner's lease expired and,
// on a direct connection, its lease session gone (the session could still
// commit). So the worker bounds this itself: every session of its pool sets
// the server's side of its TCP connection (tcp_keepalives_idle, _interval,
// _count and tcp_user_timeout, which any role may set for its own session)
// so that the server ends it within the worker's DeadHostTimeout of its
// last traffic: keepalive probes start after half of it without traffic,
// one a second, and the connection is dropped when they or data sent go
// unanswered for the rest (tcp_user_timeout bounds the whole). A session
// busy in a statement when the host vanished (waiting for a lock, say)
// does not read its socket until the statement ends: from PostgreSQL 14
// on, client_connection_check_interval (a second here) makes it look at
// the connection while it runs, and end with it. Behind a pooler the
// settings would apply to the pooler's server connections, not to the
// worker's host: nothing is set there.

// deadHostTimeouts returns an AfterConnect that sets a session's TCP
// timeouts for d (see above), after next (the pool's own, if any).
func deadHostTimeouts(d time.Duration, next func(context.Context, *pgx.Conn) error) func(context.Context, *pgx.Conn) error {
	idle, interval, count, user := tcpTimeouts(d)
	return func(ctx context.Context, conn *pgx.Conn) error {
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		var pid uint32
		if err := conn.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		if pid != conn.PgConn().PID() { // a pooler answered the startup: its timeouts apply
			return nil
		}
		_, err := conn.Exec(ctx, `select set_config('tcp_keepalives_idle', $1, false), set_config('tcp_keepalives_interval', $2, false),
			set_config('tcp_keepalives_count', $3, false), set_config('tcp_user_timeout', $4, false),
			case when current_setting('server_version_num')::int >= 140000
			     then set_config('client_connection_check_interval', $5, false) end`,
			strconv.Itoa(idle), strconv.Itoa(interval), strconv.Itoa(count), strconv.Itoa(user), strconv.Itoa(connectionCheckMs))
		return err
	}
}

// connectionCheckMs is the client_connection_check_interval a worker's
// sessions set (see above): a second.
const connectionCheckMs = 1000

// tcpTimeouts splits d into the server's keepalive settings (seconds) and
// its tcp_user_timeout (milliseconds): probes start after half of d without
// traffic, one a second, for the rest of d.
func tcpTimeouts(d time.Duration) (idle, interval, count, userMs int) {
	secs := max(2, int((d+time.Second-1)/time.Second))
	idle = secs / 2
	interval = 1
	count = secs - idle
	return idle, interval, count, int(d / time.Millisecond)
}
