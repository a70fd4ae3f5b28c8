package partitionq

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/partitionq/partitionq/test/pgtest"
)

func TestTCPTimeoutsSplitTheBound(t *testing.T) {
	for _, c := range []struct {
		d                             time.Duration
		idle, interval, count, userMs int
	}{
		{15 * time.Second, 7, 1, 8, 15000},
		{2 * time.Second, 1, 1, 1, 2000},
		{2500 * time.Millisecond, 1, 1, 2, 2500},
		{time.Minute, 30, 1, 30, 60000},
	} {
		idle, interval, count, userMs := tcpTimeouts(c.d)
		if idle != c.idle || interval != c.interval || count != c.count || userMs != c.userMs {
			t.Errorf("tcpTimeouts(%s) = %d, %d, %d, %d; want %d, %d, %d, %d", c.d, idle, interval, count, userMs, c.idle, c.interval, c.count, c.userMs)
		}
		if total := time.Duration(idle+interval*count) * time.Second; total < c.d || total > c.d+time.Second {
			t.Errorf("tcpTimeouts(%s): probes end after %s, want within a second of it", c.d, total)
		}
	}
}

// A worker's sessions carry the TCP timeouts of its DeadHostTimeout: the
// server ends a vanished host's sessions within it (test/chaos drops a real
// worker's packets: TestDeadHostMovesItsSlots).
func TestDeadHostTimeoutsSetOnTheSession(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = deadHostTimeouts(15*time.Second, nil)
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var unix bool
	if err := pool.QueryRow(ctx, `select inet_client_addr() is null`).Scan(&unix); err != nil {
		t.Fatal(err)
	}
	if unix {
		t.Skip("the test database is reached over a Unix socket: the server keeps no TCP settings for it")
	}
	got := map[string]string{}
	var version int
	if err := pool.QueryRow(ctx, `select current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	names := []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"}
	want := map[string]string{"tcp_keepalives_idle": "7", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "8", "tcp_user_timeout": "15000"}
	if version >= 140000 { // the setting is PostgreSQL 14's
		names = append(names, "client_connection_check_interval")
		want["client_connection_check_interval"] = "1s"
	}
	for _, name := range names {
		var v string
		if err := pool.QueryRow(ctx, `select current_setting($1)`, name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		got[name] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
