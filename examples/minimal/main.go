// Command minimal is the smallest complete partitionq program: it sets up a
// queue with a consumer group of 4 slots, sends a few file events for three
// tenants, and handles them, in order per tenant and in parallel across
// tenants. Run it against any PostgreSQL with PgQ:
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/minimal
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, databaseURL string) error {
	// The caller owns the pool: sends, status reads and the handlers' own
	// queries use it. A worker opens connections of its own for its slots
	// (see partitionq.WorkerConns), so a handler never waits on them.
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		return err
	}
	// Idempotent: creates the queue and registers the group's 4 slots once.
	// A queue Setup creates ticks whenever the ticker runs and events wait
	// (GroupSpec.TickMaxLag): events are handled within about a tenth of a
	// second (TickerConfig.Interval, 100ms).
	spec := partitionq.GroupSpec{Queue: "files", Group: "indexer", Slots: 4}
	if _, err := client.Setup(ctx, spec); err != nil {
		return err
	}

	// Producer: the tenant is the partition key.
	var msgs []partitionq.Message
	for _, tenant := range []string{"acme", "globex", "initech"} {
		for _, typ := range []string{"FileCreated", "FileOverwritten", "FileDeleted"} {
			msgs = append(msgs, partitionq.Message{Key: tenant, Type: typ, Payload: []byte(`{"path":"/report.pdf"}`)})
		}
	}
	sent, err := client.SendBatch(ctx, "files", msgs)
	if err != nil {
		return err
	}
	// A key's events are handled in order, so once its last event is
	// handled, all of them are.
	var mu sync.Mutex
	last := map[string]int64{}
	for i, m := range msgs {
		last[m.Key] = sent[i].ID
	}
	done := make(chan struct{})

	// Consumer: events of one tenant one at a time, in order; tenants in
	// parallel. Returning an error would pause the tenant and retry.
	worker, err := client.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: "files", Group: "indexer",
		Handler: partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
			fmt.Printf("slot %d: %-8s %-16s %s\n", ev.Slot, ev.Key, ev.Type, ev.Payload)
			mu.Lock()
			defer mu.Unlock()
			if id, ok := last[ev.Key]; ok && ev.ID == id {
				delete(last, ev.Key)
				if len(last) == 0 {
					close(done)
				}
			}
			return nil
		}),
		Ticker: &partitionq.TickerConfig{}, // make the engine's ticks in this process (no pgqd needed)
	})
	if err != nil {
		return err
	}
	if err := worker.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
		fmt.Println("every tenant's events handled, in order")
	case <-ctx.Done():
	}
	return worker.Stop(context.Background())
}
