package partitionq_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// A worker's own connections time out on a server they cannot reach
// although the client's pool sets no connect_timeout: the worker gives up
// the attempt, logs it and tries again, instead of waiting forever.
func TestWorkerConnectAttemptsTimeOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	server := b.pool.Config().ConnConfig
	if strings.HasPrefix(server.Host, "/") {
		t.Skipf("the test server is on a Unix socket (%s): a TCP proxy cannot stand in front of it", server.Host)
	}
	px, err := netproxy.New(net.JoinHostPort(server.Host, strconv.Itoa(int(server.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cs, err := connstr.Parse(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(px.Addr())
	cs.Set("host", host)
	cs.Set("port", port)
	cfg, err := pgxpool.ParseConfig(cs.String())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != 0 {
		t.Skipf("the test server's connection string sets connect_timeout (%s)", cfg.ConnConfig.ConnectTimeout)
	}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs pgtest.SyncBuffer
	c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g",
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}

	px.Freeze() // the worker's pool has no connection yet: every attempt hangs
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	pgtest.WaitFor(t, 4*connstr.ConnectTimeoutDefault, "the slot to give up a connection attempt", func() (bool, error) {
		l := logs.String()
		return strings.Contains(l, "registering the worker failed; retrying") && strings.Contains(l, "timeout"), nil
	})
}
