// Package partitionq consumes a PgQ or PgQue queue in order per partition
// key and in parallel across keys.
//
// Producers attach a partition key to each event (stored in ev_extra1). A
// consumer group has N slots (changed online by Client.Resize); the slot
// of a key is hashtextextended(key, 0) mod N (slot 0 for an event another
// producer sent without a key), as upstream PgQue routes partition keys,
// and each slot is its own engine consumer that reads its hash class of the
// stream, owned by one worker at a time: identical workers share the
// slots. Events sharing a key are handled one at a time in engine order;
// events of different keys run in parallel, across slots and inside a
// slot. On failure a key is paused by default: its later events wait while
// every other key keeps flowing.
//
// See docs/architecture.md and docs/guarantees.md for the full contract.
package partitionq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Config configures a Client. The zero value is valid.
type Config struct {
	// EngineSchema is the schema of the queue engine: "pgq" for the PgQ
	// extension, "pgque" for PgQue. Defaults to auto-detection: the one of
	// the two that is installed in the database.
	EngineSchema string

	// Logger receives the library's logs. Defaults to a logger that
	// discards everything.
	Logger *slog.Logger

	// Actor names who is acting in operator actions (skip, retry, replay,
	// purge, quarantine) when a call does not say; it is stored in the
	// audit trail beside the database role. Defaults to "".
	Actor string

	// Registerer receives the client's metrics: the counter
	// partitionq_send_duplicates_total{queue} of messages refused as
	// duplicates (Message.DedupID; docs/operations.md). Clients sharing a
	// Registerer share the counter. Worker metrics have their own
	// (WorkerConfig.Registerer). Defaults to nil: no metrics.
	Registerer prometheus.Registerer
}

// Client is the entry point: setup, sending, workers, inspection and
// operator actions. It is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	eng  *engine.Engine
	log  *slog.Logger
	cfg  Config

	schemaOK atomic.Bool // partitionq's schema was found (or brought) at SchemaVersion

	duplicates *prometheus.CounterVec // nil without Config.Registerer
}

// NewClient returns a Client that uses pool, which the caller owns (the
// client never closes it). ctx governs the query that detects the engine,
// or checks that the one of Config.EngineSchema is installed.
func NewClient(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("partitionq.NewClient: pool is nil: pass a *pgxpool.Pool")
	}
	if err := validateText("Config.Actor", cfg.Actor, maxText); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	schema := cfg.EngineSchema
	if schema == "" {
		var err error
		if schema, err = engine.Detect(ctx, pool); err != nil {
			return nil, err
		}
	}
	eng, err := engine.New(schema)
	if err != nil {
		return nil, &ValidationError{Field: "Config.EngineSchema", Value: shorten(schema), Problem: err.Error(), Fix: `use "pgq" or "pgque", or leave it empty to detect`}
	}
	if cfg.EngineSchema != "" {
		if err := eng.CheckInstalled(ctx, pool); err != nil {
			return nil, err
		}
	}
	c := &Client{pool: pool, eng: eng, log: cfg.Logger, cfg: cfg}
	if cfg.Registerer != nil {
		if c.duplicates, err = registerClientMetrics(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// migrate brings partitionq's schema to SchemaVersion once per client
// (store.Migrate: one read when it is current, so roles without CREATE may
// call it; the upgrade runs under the migration lock).
func (c *Client) migrate(ctx context.Context) error {
	if c.schemaOK.Load() {
		return nil
	}
	if err := store.Migrate(ctx, c.pool); err != nil {
		return err
	}
	c.schemaOK.Store(true)
	return nil
}

// EngineSchema returns the engine schema the client uses.
func (c *Client) EngineSchema() string { return c.eng.Schema() }
