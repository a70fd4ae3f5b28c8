// Command pqbench measures partitionq side by side with a plain single PgQ
// consumer, the physical limits of the server, and two peer job queues
// (pg-boss and graphile-worker), in one run on one PostgreSQL server, and
// checks per-key order for every system with one shared checker. See
// docs/benchmarks.md, or run pqbench -help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/partitionq/partitionq/cmd/pqbench/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
