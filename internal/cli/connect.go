package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/termsafe"
	"github.com/partitionq/partitionq/partitionq"
)

// session is an open pool and the client built on it. close closes the pool.
type session struct {
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
	connStr := a.db
	if connStr == "" {
		connStr = a.env.Getenv("DATABASE_URL")
	}
	if connStr == "" {
		return nil, usagef("no database: pass --db URL or set DATABASE_URL (for example postgres://user@localhost:5432/app)")
	}
	switch a.engine {
	case "", "pgq", "pgque":
	default:
		return nil, usagef(`invalid --engine %s: use "pgq" or "pgque", or leave it out to detect the engine`, termsafe.Quote(a.engine))
	}
	level, err := parseLogLevel(a.logLevel)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(connStr)
	if err != nil {
		return nil, usagef("invalid --db or DATABASE_URL: %w", err)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "partitionq"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot connect to the database %s: %w: check --db or DATABASE_URL and that the server runs",
			describeDB(cfg), err)
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
	return &session{pool: pool, client: client}, nil
}

// describeDB names the server and database without the password.
func describeDB(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

var poolMaxKeyword = regexp.MustCompile(`(^|\s)pool_max_conns\s*=`)

// setsPoolMaxConns reports whether a URL or keyword/value connection string
// sets pool_max_conns.
func setsPoolMaxConns(connStr string) bool {
	if strings.HasPrefix(connStr, "postgres://") || strings.HasPrefix(connStr, "postgresql://") {
		u, err := url.Parse(connStr)
		return err == nil && u.Query().Has("pool_max_conns")
	}
	return poolMaxKeyword.MatchString(connStr)
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("invalid --log-level %s: use debug, info, warn or error", termsafe.Quote(s))
	}
	return l, nil
}
