package partitionq_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"

	"github.com/partitionq/partitionq/partitionq"
)

// A worker that handles a multi-tenant file service's events in order per
// tenant, eight tenants at a time in each of four slots.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")+"?pool_max_conns=24")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Idempotent: creates the queue and the group's 4 slot consumers once.
	if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: "files", Group: "indexer", Slots: 4}); err != nil {
		log.Fatal(err)
	}
	// Producers attach the tenant as the partition key.
	if _, err := client.Send(ctx, "files", partitionq.Message{
		Key: "tenant-42", Type: "FileCreated", Payload: []byte(`{"path":"/a.txt"}`),
	}); err != nil {
		log.Fatal(err)
	}
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: "files", Group: "indexer", Ticker: &partitionq.TickerConfig{},
		Handler: partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
			fmt.Printf("tenant %s: %s %s (attempt %d)\n", ev.Key, ev.Type, ev.Payload, ev.Attempt)
			return nil // an error pauses the tenant until the event succeeds or an operator skips it
		}),
		Limits: partitionq.LimitsConfig{Concurrency: 8},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until Ctrl-C; then a graceful stop
		log.Fatal(err)
	}
}

// Sending atomically with the application's own writes.
func ExampleClient_SendTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `insert into files (tenant, path) values ($1, $2)`, "tenant-42", "/a.txt"); err != nil {
		log.Fatal(err)
	}
	if _, err := client.SendTx(ctx, tx, "files", partitionq.Message{Key: "tenant-42", Type: "FileCreated", Payload: []byte(`{"path":"/a.txt"}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // the event exists only if the row does
		log.Fatal(err)
	}
}

// An operator unblocks a tenant whose head event keeps failing.
func ExampleClient_Act() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{Actor: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	bk, err := client.BlockedKey(ctx, "files", "indexer", "tenant-42")
	if err != nil {
		log.Fatal(err) // partitionq.ErrNotBlocked when it is not blocked
	}
	res, err := client.Act(ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "files", Group: "indexer", Key: "tenant-42",
		HeadID: bk.Head.ID, Reason: "corrupt upload, ticket 1234"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome) // skipped, or already_resolved if a retry won meanwhile
}

// A worker exporting Prometheus metrics at /metrics and a span per handler
// call to whatever OpenTelemetry provider the program set up.
func ExampleWorkerConfig_monitoring() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	go func() {
		log.Fatal(http.ListenAndServe("127.0.0.1:9464", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	}()
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{
		Queue: "files", Group: "indexer",
		Registerer:     reg,                      // partitionq_* series, labelled queue, group and slot
		TracerProvider: otel.GetTracerProvider(), // the global provider; a no-op one until the program sets it
		Handler: partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
			return nil // ctx carries the span: spans started from it are its children
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// After an outage, an operator replays every dead letter it caused, in
// one transaction, each tenant's in their original order: first a dry run
// to see what would be sent, then the replay, recorded in the audit trail
// as one action with its count.
func ExampleClient_ReplayMatching() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{Actor: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	match := partitionq.DeadLetterQuery{Queue: "files", Group: "indexer", Pending: true,
		Error: "billing.internal", DeadAfter: time.Now().Add(-2 * time.Hour)}
	dry, err := client.ReplayMatching(ctx, partitionq.BulkRequest{Match: match, DryRun: true})
	if err != nil {
		log.Fatal(err) // partitionq.ErrTooMany when more than BulkMaxDefault match
	}
	fmt.Printf("would replay %d dead letters\n", dry.Count)
	res, err := client.ReplayMatching(ctx, partitionq.BulkRequest{Match: match, Reason: "billing back, INC-1234"})
	if err != nil {
		log.Fatal(err) // nothing was sent
	}
	fmt.Printf("replayed %d (audit entry %d)\n", res.Count, res.AuditID)
}

// Everything about one tenant, for a support ticket.
func ExampleClient_Key() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ki, err := client.Key(ctx, "files", "indexer", "tenant-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("slot %d, %s, %d events set aside, %d dead letters not replayed\n", ki.Slot, ki.State, len(ki.SetAside), ki.PendingDeadLetters)
	if ki.State == partitionq.KeyBlocked {
		fmt.Println("blocked on:", ki.Blocked.Head.LastError)
	}
}
