package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// newQueue makes queue, which gets a tick at every ticker call, with
// consumers registered on it.
func newQueue(t *testing.T, pool *pgxpool.Pool, eng *engine.Engine, queue string, consumers ...string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		for _, c := range consumers {
			if _, err := eng.RegisterConsumer(ctx, tx, queue, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openBatch makes a tick and opens consumer's next batch in a transaction
// that ends with the test.
func openBatch(t *testing.T, pool *pgxpool.Pool, eng *engine.Engine, queue, consumer string) (pgx.Tx, engine.BatchInfo) {
	t.Helper()
	ctx := context.Background()
	if _, err := eng.Ticker(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	infos, err := eng.NextBatches(ctx, tx, queue, []string{consumer}, 0)
	if err != nil || len(infos) != 1 || infos[0].ID == 0 {
		t.Fatalf("no batch after a tick: %+v, %v", infos, err)
	}
	return tx, infos[0]
}

// slotConsumers names the consumers of a group "g" of n slots.
func slotConsumers(n int) []string {
	cs := make([]string, n)
	for s := range n {
		cs[s] = fmt.Sprintf("g#%d/%d", s, n)
	}
	return cs
}
