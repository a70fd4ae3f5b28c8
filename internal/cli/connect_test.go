package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// rewrite is url with settings changed (key, value, key, value...).
func rewrite(t *testing.T, url string, kv ...string) string {
	t.Helper()
	c, err := connstr.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Set(kv[i], kv[i+1])
	}
	return c.String()
}

// frozen is a harness whose database is behind a proxy that passes
// nothing on: a network partition. Its URL sets no connect_timeout
// (unless the suite's does).
func frozen(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	px, url := netproxy.Front(t, h.url)
	px.Freeze()
	h.url = url
	h.env["DATABASE_URL"] = h.url
	return h
}

// timed runs a command line, failing the test if it runs past limit.
func (h *harness) timed(limit time.Duration, args ...string) (result, time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), limit)
	defer cancel()
	start := time.Now()
	r := h.runCtx(ctx, "", args...)
	took := time.Since(start)
	if ctx.Err() != nil {
		h.t.Fatalf("partitionq %s still ran after %s: %s", strings.Join(args, " "), limit, r)
	}
	return r, took
}

// A failed connection is reported once, by its real cause: under
// sslmode=prefer pgx tries with TLS, then without, and lists both
// attempts (a refusal twice; "server refused TLS connection" before the
// server's answer, as for a wrong password).
func TestConnectErrorSaysTheCauseOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, c := range []struct {
		name, url, cause, hint string
	}{
		{"refused", "postgres://nobody@127.0.0.1:1/none?sslmode=prefer",
			"connection refused", "check --db or DATABASE_URL and that the server runs"},
		{"no such database", rewrite(t, h.url, "sslmode", "prefer", "dbname", "pqtest_no_such_database"),
			`database "pqtest_no_such_database" does not exist`, "check the database name in --db or DATABASE_URL"},
		{"no such role", rewrite(t, h.url, "sslmode", "prefer", "user", "pqtest_no_such_role"),
			`role "pqtest_no_such_role" does not exist`, "check the user in --db or DATABASE_URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := (&harness{t: t, env: map[string]string{"DATABASE_URL": c.url}}).run("status", "--queue", "files", "--group", "indexer")
			if r.code != cli.ExitFailed {
				t.Fatalf("want exit 1: %s", r)
			}
			msg := strings.TrimSpace(r.stderr)
			if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "partitionq: cannot connect to the database ") {
				t.Errorf("want one line saying it cannot connect: %s", r)
			}
			if strings.Count(msg, c.cause) != 1 || strings.Contains(msg, "TLS") || !strings.Contains(msg, c.hint) {
				t.Errorf("want %q once, no TLS, and the hint %q: %s", c.cause, c.hint, msg)
			}
		})
	}
}

// status bounds its wait for the database by --timeout (2s by default),
// connecting included.
func TestStatusTimeout(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := frozen(t)
	for _, c := range []struct {
		args  []string
		bound time.Duration
	}{
		{[]string{"--timeout", "300ms"}, 300 * time.Millisecond},
		{nil, 2 * time.Second},
	} {
		r, took := h.timed(30*time.Second, append([]string{"status", "--queue", "files", "--group", "indexer"}, c.args...)...)
		if r.code != cli.ExitFailed || !strings.Contains(r.stderr, "no answer in time (status waits at most "+c.bound.String()+": --timeout)") {
			t.Errorf("status %v on a frozen server: %s", c.args, r)
		}
		if took > c.bound+time.Second {
			t.Errorf("status %v took %s on a frozen server; its bound is %s", c.args, took, c.bound)
		}
	}
	if r := h.run("status", "--queue", "files", "--group", "indexer", "--timeout", "0s"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "invalid --timeout 0s") {
		t.Errorf("status --timeout 0s: %s", r)
	}
}

// Every command's connection attempt times out after connect_timeout
// (5s by default) when the connection string sets none.
func TestConnectTimeoutByDefault(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := frozen(t)
	if c, _ := connstr.Parse(h.url); c != nil {
		if _, ok := c.Get("connect_timeout"); ok {
			t.Skip("the suite's connection string sets connect_timeout")
		}
	}
	r, took := h.timed(30*time.Second, "blocked", "--queue", "files", "--group", "indexer")
	if r.code != cli.ExitFailed || !strings.Contains(r.stderr, "no answer within connect_timeout (5s per address)") {
		t.Errorf("blocked on a frozen server: %s", r)
	}
	if took < connstr.ConnectTimeoutDefault-time.Second || took > 2*connstr.ConnectTimeoutDefault {
		t.Errorf("blocked gave up after %s; connect_timeout is %s", took, connstr.ConnectTimeoutDefault)
	}
}

func TestRefreshTimeoutFlag(t *testing.T) {
	t.Parallel()
	r := offline(t).run("console", "--queue", "files", "--group", "indexer", "--refresh-timeout", "10ms")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "invalid --refresh-timeout 10ms: give at least 100ms") {
		t.Errorf("console --refresh-timeout 10ms: %s", r)
	}
}
