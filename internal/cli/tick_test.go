package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
)

func TestTick(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	if out := h.ok("tick", "--once"); !strings.Contains(out, "one ticker round") {
		t.Errorf("tick --once printed %q", out)
	}

	// The loop ticks until stopped: sent events become pending for the
	// slot. (The engine counts pending events by its event sequence, whose
	// first value is taken before any event: the first event ever sent is
	// not counted, hence two events and a wait for one.)
	h.ok("send", "--queue", "q", "--key", "k")
	h.ok("send", "--queue", "q", "--key", "k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "", "tick", "--interval", "10ms") }()
	waitFor(t, 30*time.Second, "a tick that makes the event pending", func() bool {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		return st.Slots[0].QueuePending >= 1
	})
	cancel()
	r := <-done
	if r.code != cli.ExitOK || !strings.Contains(r.stderr, "ticker stopped") {
		t.Fatalf("tick: %s", r)
	}
}
