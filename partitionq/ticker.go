package partitionq

import (
	"context"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/ticker"
)

// maintIntervalDefault is TickerConfig.MaintInterval's default, and the
// interval of a worker's ticker's maintenance.
const maintIntervalDefault = 30 * time.Second

// TickerConfig configures a ticker: Client.RunTicker's, or a worker's
// (WorkerConfig.Ticker). Zero values mean the defaults.
type TickerConfig struct {
	// Interval is how often the engine's ticker() runs. Whether a queue
	// gets a tick then is the engine's decision, from the queue's
	// ticker_max_count, ticker_max_lag and ticker_idle_period (see
	// GroupSpec.TickMaxLag). Defaults to 100ms.
	Interval time.Duration
	// MaintInterval is how often retry events are moved back into their
	// queues and the engine's maintenance (table rotation) runs. Defaults to 30s.
	MaintInterval time.Duration
}

func (cfg TickerConfig) withDefaults() TickerConfig {
	if cfg.Interval == 0 {
		cfg.Interval = TickIntervalDefault
	}
	if cfg.MaintInterval == 0 {
		cfg.MaintInterval = maintIntervalDefault
	}
	return cfg
}

// validate checks cfg (with its defaults), naming its fields after prefix
// ("TickerConfig." or "WorkerConfig.Ticker.").
func (cfg TickerConfig) validate(prefix string) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", cfg.Interval}, {"MaintInterval", cfg.MaintInterval}} {
		if f.d < 0 {
			return &ValidationError{Field: prefix + f.name, Value: f.d.String(), Problem: "it is negative", Fix: "use 0 for the default"}
		}
	}
	return nil
}

// RunTicker makes ticks and runs the engine's maintenance until ctx is
// cancelled, in place of the pgqd daemon. Several tickers (in several
// processes) may run at once: each round is done by one of them. It fails
// at once with an error saying so when the client's role may not tick (the
// engine's ticker is its admin's: run it as the owner); rights lost while
// it runs stop it, with one error logged.
func (c *Client) RunTicker(ctx context.Context, cfg TickerConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate("TickerConfig."); err != nil {
		return err
	}
	if err := ticker.CheckRights(ctx, c.eng, c.pool); err != nil {
		return err
	}
	ticker.Run(ctx, ticker.Config{Eng: c.eng, Pool: c.pool, Log: c.log, Interval: cfg.Interval, MaintInterval: cfg.MaintInterval})
	return nil
}

// CheckTickerRights fails, saying what is missing and what to do, when the
// client's role may not run the ticker (RunTicker, TickOnce, a worker's
// Ticker): the engine's ticker and maintenance functions are its
// admin's, and the ticker's turns partitionq's owner's. ctx governs the query.
func (c *Client) CheckTickerRights(ctx context.Context) error {
	return ticker.CheckRights(ctx, c.eng, c.pool)
}

// TickOnce runs one ticker round and one maintenance round. ctx governs both.
func (c *Client) TickOnce(ctx context.Context) error {
	if err := ticker.CheckRights(ctx, c.eng, c.pool); err != nil {
		return err
	}
	if err := ticker.Tick(ctx, c.eng, c.pool); err != nil {
		return err
	}
	if _, err := ticker.Census(ctx, c.eng, c.pool); err != nil {
		return err
	}
	return ticker.Maintain(ctx, c.eng, c.pool)
}
