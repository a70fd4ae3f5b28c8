// Command dedupsend is a producer for the send-once tests: it sends one
// event with a dedup id inside a transaction (Client.SendTx), prints
// "sent <event id> duplicate=<bool>" and then waits without committing,
// until it is killed (the test sends SIGKILL) or -timeout passes (exit
// status 3, so a failed test leaves no process behind). With -commit it
// commits and exits instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
)

func main() {
	url := flag.String("url", "", "connection string of the database")
	queue := flag.String("queue", "q", "queue")
	key := flag.String("key", "k", "partition key")
	dedupID := flag.String("dedup-id", "", "dedup id of the event")
	payload := flag.String("payload", "", "payload of the event")
	commit := flag.Bool("commit", false, "commit the transaction and exit")
	timeout := flag.Duration("timeout", 2*time.Minute, "exit (status 3) after this long without being killed")
	flag.Parse()
	if err := run(*url, *queue, *key, *dedupID, *payload, *commit, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "dedupsend:", err)
		os.Exit(1)
	}
}

func run(url, queue, key, dedupID, payload string, commit bool, timeout time.Duration) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	res, err := c.SendTx(ctx, tx, queue, partitionq.Message{Key: key, Payload: []byte(payload), DedupID: dedupID})
	if err != nil {
		return err
	}
	fmt.Printf("sent %d duplicate=%t\n", res.ID, res.Duplicate)
	if commit {
		return tx.Commit(ctx)
	}
	time.Sleep(timeout) // killed before: the transaction never commits
	os.Exit(3)
	return nil
}
