package security_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"

	"github.com/partitionq/partitionq/test/pgtest"
)

// A role of sql/roles.sql asked to tick (the ticker is the owner's: the
// engine's ticker and maintenance are its admin's) is refused at once,
// with one error naming the fix, never a warning per tick: a worker with
// a Ticker does not start, work --ticker and tick exit 1. And a command's
// error from the library is told with one "partitionq:", not two.
func TestTickerNeedsTheOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.ac.Setup(e.ctx, partitionq.GroupSpec{Queue: "tq", Group: "g", Slots: 1}); err != nil {
		t.Fatal(err)
	}
	const fix = "run the ticker as the owner (partitionq tick, or pgqd), and the workers without WorkerConfig.Ticker (--ticker)"
	log := &pgtest.SyncBuffer{}
	wc := e.client("worker", 8, log)
	w, err := wc.NewWorker(e.ctx, partitionq.WorkerConfig{Queue: "tq", Group: "g", Ticker: &partitionq.TickerConfig{}, Handler: partitionq.HandlerFunc(
		func(context.Context, *partitionq.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "this role may not run the engine's ticker (it lacks execute on "+e.db.Schema+".ticker()") ||
		!strings.Contains(err.Error(), fix) {
		t.Fatalf("a worker of the worker role with a Ticker started, or said: %v", err)
	}
	_ = w.Stop(e.ctx)
	if wc.RunTicker(e.ctx, partitionq.TickerConfig{}) == nil {
		t.Fatal("RunTicker under the worker role: no error")
	}
	for _, args := range [][]string{
		{"work", "--queue", "tq", "--group", "g", "--ticker", "--exec", "true"},
		{"tick"},
		{"tick", "--once"},
	} {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		code, _, stderr := e.cliCtx(ctx, "worker", "", args...)
		cancel()
		if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "partitionq: this role may not run the engine's ticker") ||
			!strings.Contains(stderr, fix) {
			t.Errorf("partitionq %s as the worker role: exit %d, stderr:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	// A role without the worker's rights: its error once prefixed.
	code, _, stderr := e.cli("producer", "", "work", "--queue", "tq", "--group", "g", "--exec", "true")
	if code != 1 || !strings.HasPrefix(stderr, "partitionq: the worker cannot register its lease: ") || strings.Contains(stderr, "partitionq: partitionq:") {
		t.Errorf("work as the producer role: exit %d, stderr:\n%s", code, stderr)
	}
}
