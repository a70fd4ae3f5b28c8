package netproxy

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq/connstr"
)

// Front starts a proxy in front of the PostgreSQL server that the
// connection string url names, closed when t ends, and returns it with url
// rewritten to connect through it (and with the further key/value pairs of
// set). A server on a Unix socket skips t: a TCP proxy cannot stand in
// front of it.
func Front(t testing.TB, url string, set ...string) (*Proxy, string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test server is on a Unix socket (%s): a TCP proxy cannot stand in front of it", cfg.Host)
	}
	px, err := New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cs, err := connstr.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(px.Addr())
	cs.Set("host", host)
	cs.Set("port", port)
	for i := 0; i+1 < len(set); i += 2 {
		cs.Set(set[i], set[i+1])
	}
	return px, cs.String()
}
