package connstr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/pgtest"
)

func connectErr(t *testing.T, s string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s)
	if err == nil {
		conn.Close(ctx)
		t.Fatalf("%s connects", s)
	}
	return fmt.Errorf("open the pool: %w", err)
}

func TestConnectCauseSaysARefusalOnce(t *testing.T) {
	// sslmode=prefer: pgx tries with TLS, then without; both are refused.
	err := connectErr(t, "postgres://nobody@127.0.0.1:1/none?sslmode=prefer")
	if n := strings.Count(err.Error(), "connection refused"); n != 2 {
		t.Fatalf("pgx's error says connection refused %d times (want 2: one per attempt): %v", n, err)
	}
	got := connstr.ConnectCause(err)
	if n := strings.Count(got.Error(), "connection refused"); n != 1 {
		t.Errorf("ConnectCause says connection refused %d times: %v", n, got)
	}
	if !strings.HasPrefix(got.Error(), "open the pool: failed to connect to `user=nobody database=none`: 127.0.0.1:1") {
		t.Errorf("ConnectCause lost the text around the connection error: %v", got)
	}
	var ce *pgconn.ConnectError
	if !errors.As(got, &ce) {
		t.Errorf("errors.As does not see the connection error in %v", got)
	}
}

func TestConnectCauseGivesTheServersAnswer(t *testing.T) {
	// A server that refuses TLS (a throwaway cluster) and has no such
	// database: under sslmode=prefer pgx's error lists "server refused TLS
	// connection" first, and the real cause second, as for a wrong password.
	db := pgtest.New(t)
	c, err := connstr.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.Set("sslmode", "prefer")
	c.Set("dbname", "pqtest_no_such_database")
	got := connstr.ConnectCause(connectErr(t, c.String()))
	var pe *pgconn.PgError
	if !errors.As(got, &pe) || pe.Code != "3D000" {
		t.Fatalf("want the server's 3D000 error, got %v", got)
	}
	if strings.Contains(got.Error(), "TLS") || strings.Count(got.Error(), "does not exist") != 1 {
		t.Errorf("ConnectCause: %v; want the server's error alone, once", got)
	}
}

func TestConnectCauseLeavesOtherErrors(t *testing.T) {
	for _, err := range []error{errors.New("boom"), fmt.Errorf("status: %w", context.DeadlineExceeded), nil} {
		if got := connstr.ConnectCause(err); got != err {
			t.Errorf("ConnectCause(%v) = %v", err, got)
		}
	}
}
