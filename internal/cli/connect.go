package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// session is an open pool and the client built on it. close closes the pool.
type session struct {
	log    *slog.Logger // the library's logger (standard error, --log-level)
	pool   *pgxpool.Pool
	client *partitionq.Client
}

func (s *session) close() { s.pool.Close() }

// openFor checks that the command names its queue and group, then opens a
// session with the default pool size.
func (a *app) openFor(ctx context.Context, t target) (*session, error) {
	if err := t.need(); err != nil {
		return nil, err
	}
	return a.open(ctx)
}

// open connects to the database of --db or DATABASE_URL and builds a
// client. ctx governs the connection and the engine detection.
func (a *app) open(ctx context.Context) (*session, error) {
	connStr, err := a.connString()
	if err != nil {
		return nil, err
	}
	switch a.engine {
	case "", "pgq", "pgque":
	default:
		return nil, usagef(`invalid --engine %s: use "pgq" or "pgque", or leave it out to detect the engine`, termsafe.Echo(a.engine))
	}
	level, err := parseLogLevel(a.logLevel)
	if err != nil {
		return nil, err
	}
	cfg, err := poolConfig(connStr, "partitionq")
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectFailed(ctx, cfg.ConnConfig, err)
	}
	var logOut io.Writer = a.env.Stderr
	if a.logsOff {
		logOut = io.Discard
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: a.engine, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &session{pool: pool, client: client, log: logger}, nil
}

// connString is --db, else DATABASE_URL.
func (a *app) connString() (string, error) {
	if a.db != "" {
		return a.db, nil
	}
	if s := a.env.Getenv("DATABASE_URL"); s != "" {
		return s, nil
	}
	return "", usagef("no database: pass --db URL or set DATABASE_URL (for example postgres://user@localhost:5432/app)")
}

// poolConfig parses a connection string for a pool of partitionq's own: a
// connection attempt times out after connstr.ConnectTimeoutDefault unless
// the string (or PGCONNECT_TIMEOUT) sets connect_timeout, and the sessions
// show as appName unless it sets application_name.
func poolConfig(connStr, appName string) (*pgxpool.Config, error) {
	withTimeout, err := connstr.WithConnectTimeout(connStr)
	if err != nil {
		return nil, usagef("invalid --db or DATABASE_URL: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(withTimeout)
	if err != nil {
		return nil, usagef("invalid --db or DATABASE_URL: %w", err)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	return cfg, nil
}

// connectFailed says why a connection to cfg failed, once (pgx lists every
// attempt: see connstr.ConnectCause), and what to check.
func connectFailed(ctx context.Context, cfg *pgx.ConnConfig, err error) error {
	err = connstr.ConnectCause(err)
	hint := "check --db or DATABASE_URL and that the server runs"
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "28P01": // invalid_password
		hint = "check the user and password in --db or DATABASE_URL (or PGPASSWORD, ~/.pgpass)"
	case errors.As(err, &pe) && pe.Code == "3D000": // invalid_catalog_name
		hint = "check the database name in --db or DATABASE_URL, or create the database"
	case errors.As(err, &pe) && pe.Code == "28000": // invalid_authorization_specification
		hint = "check the user in --db or DATABASE_URL, and that the server's pg_hba.conf lets it in"
	case errors.As(err, &pe):
		hint = "check --db or DATABASE_URL"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("cannot connect to the database %s: no answer in time (%w): check that the server runs and that the network reaches it",
			describeConn(cfg), context.Cause(ctx))
	case pgconn.Timeout(err):
		hint = fmt.Sprintf("no answer within connect_timeout (%s per address): check that the server runs and that the network reaches it, or set connect_timeout in --db or DATABASE_URL", cfg.ConnectTimeout)
	}
	return fmt.Errorf("cannot connect to the database %s: %w: %s", describeConn(cfg), err, hint)
}

// deadlinePassed says so when err came after ctx's deadline, unless err
// already does.
func deadlinePassed(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("no answer in time (%w): %w", cause, err)
}

// describeDB names the server and database without the password.
func describeDB(cfg *pgxpool.Config) string { return describeConn(cfg.ConnConfig) }

func describeConn(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("invalid --log-level %s: use debug, info, warn or error", termsafe.Echo(s))
	}
	return l, nil
}
