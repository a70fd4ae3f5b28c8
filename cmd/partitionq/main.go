// Command partitionq drives the partitionq library from a shell: setup,
// send, work, status, blocked, skip, retry, quarantine, preview, dlq,
// audit, tick, console, demo and version. See docs/cli.md, or run
// partitionq --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/partitionq/partitionq/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM stops the command gracefully; once it
	// has arrived the default action is restored, so a second one kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Main(ctx, os.Args[1:], cli.Env{})
	stop()
	os.Exit(code)
}
