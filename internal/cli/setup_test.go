package cli_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/internal/cli"
)

func TestSetup(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	out := h.ok(with(qg, "setup", "--slots", "4", "--tick-max-lag", "20ms")...)
	for _, w := range []string{`created queue "q"`, "with 4 slots (4 slot consumers registered)", "ticker_max_lag set to 20ms"} {
		if !strings.Contains(out, w) {
			t.Errorf("setup output lacks %q:\n%s", w, out)
		}
	}
	if out := h.ok(with(qg, "setup", "--slots", "4")...); !strings.Contains(out, "already set up with 4 slots: nothing to do") {
		t.Errorf("second setup said:\n%s", out)
	}

	// Another N fails and names both values.
	h.fails(cli.ExitFailed, []string{"has 4 slots, not 8"}, with(qg, "setup", "--slots", "8")...)
	// N out of range is a bad value.
	h.fails(cli.ExitUsage, []string{"invalid --slots 0"}, with(qg, "setup", "--slots", "0")...)

	raw := h.raw(with(qg, "setup", "--slots", "4")...)
	pinKeys(t, "setup", raw, "queue", "group", "slots", "consumers", "queue_created", "registered", "dedup_window_seconds")
	var s setupOut
	h.json(&s, with(qg, "setup", "--slots", "4")...)
	if s.Queue != "q" || s.Group != "g" || s.Slots != 4 || s.QueueCreated || s.Registered != 0 ||
		!slices.Equal(s.Consumers, []string{"g#0/4", "g#1/4", "g#2/4", "g#3/4"}) {
		t.Errorf("setup --json = %+v", s)
	}

	// A second group on the same queue.
	var s2 setupOut
	h.json(&s2, "setup", "--queue", "q", "--group", "other", "--slots", "2")
	if s2.QueueCreated || s2.Registered != 2 {
		t.Errorf("setup of a second group = %+v", s2)
	}
}

// Every command on a queue or group that does not exist fails (1) and
// says which setup command makes it; none names a Go field or method.
func TestUnknownQueueAndGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, args := range [][]string{
		{"status"}, {"blocked"}, {"audit"}, {"dlq", "list"}, {"dlq", "show", "1"}, {"dlq", "replay", "1"},
		{"dlq", "purge", "--all"}, {"skip", "--key", "k", "--reason", "r"}, {"retry", "--key", "k"}, {"quarantine", "--key", "k", "--reason", "r"},
		{"preview", "--key", "k"}, {"work", "--exec", "true"},
	} {
		r := h.fails(cli.ExitFailed, []string{`no such queue "q": create it and the group with partitionq setup --queue q --group g --slots N`}, append(args, qg...)...)
		if strings.Contains(r.stderr, "Client.") {
			t.Errorf("partitionq %s names a Go method: %s", args, r.stderr)
		}
	}
	r := h.fails(cli.ExitFailed, []string{`no such queue "q"`, "run partitionq setup"}, "send", "--queue", "q", "--key", "k")
	if strings.Contains(r.stderr, "Client.") {
		t.Errorf("send names a Go method: %s", r.stderr)
	}
	r = h.runStdin(`{"key":"k"}`+"\n", "send", "--queue", "q")
	h.expect(r, cli.ExitFailed, []string{`no such queue "q"`}, []string{"send"})

	h.setup(2)
	h.fails(cli.ExitFailed, []string{`no such consumer group "nope" on queue "q": the groups of queue "q" are g (partitionq groups lists every group); to create "nope", run partitionq setup --queue q --group nope --slots N`}, "status", "--queue", "q", "--group", "nope")
	h.fails(cli.ExitFailed, []string{`no such consumer group "nope"`}, "work", "--queue", "q", "--group", "nope", "--exec", "true")
	// A typo: the nearest group's name first.
	h.ok("setup", "--queue", "q", "--group", "indexer", "--slots", "1")
	h.fails(cli.ExitFailed, []string{`no such consumer group "indexr" on queue "q": did you mean "indexer"? the groups of queue "q" are g, indexer (partitionq groups lists every group); to create "indexr", run partitionq setup --queue q --group indexr --slots N`},
		"status", "--queue", "q", "--group", "indexr")
	// A queue without groups says so.
	h.ok("setup", "--queue", "q2", "--group", "x", "--slots", "1")
	h.ok("drop-group", "--queue", "q2", "--group", "x")
	h.fails(cli.ExitFailed, []string{`no such consumer group "x" on queue "q2", which has no groups yet: create it with partitionq setup --queue q2 --group x --slots N`},
		"status", "--queue", "q2", "--group", "x")
}

// The console's flags are checked in the command line's words, and without
// a terminal it says it needs one (finding: "error creating cancelreader").
func TestConsoleCommandLine(t *testing.T) {
	t.Parallel()
	h := offline(t)
	r := h.fails(cli.ExitUsage, []string{"invalid --refresh 1ms: give at least 100ms"}, with(qg, "console", "--refresh", "1ms")...)
	h.fails(cli.ExitUsage, []string{"invalid --refresh 0s"}, with(qg, "console", "--refresh", "0")...)
	if strings.Contains(r.stderr, "Options.") {
		t.Errorf("console names a Go field: %s", r.stderr)
	}
	// Standard input and output here are buffers: no terminal. The check
	// comes before connecting (the offline server does not answer), and a
	// group that does not exist is not the console's error.
	h.fails(cli.ExitFailed, []string{"the console needs a terminal", "partitionq status"}, "console", "--queue", "q", "--group", "nosuch")
	// Neither --queue nor --group: the list of every group (still a terminal needed).
	h.fails(cli.ExitFailed, []string{"the console needs a terminal"}, "console")
	h.fails(cli.ExitUsage, []string{"give both --queue and --group (one group), or neither"}, "console", "--queue", "q")
}

// setup --dedup-window sets the queue's window (shown, and in --json);
// a later setup without it keeps the window; out of range, or 0, is a
// usage error naming the flag.
func TestSetupDedupWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var s setupOut
	h.json(&s, "setup", "--queue", "q", "--group", "g", "--slots", "2")
	if s.DedupWindowSeconds != 3600 {
		t.Errorf("the default window: %vs", s.DedupWindowSeconds)
	}
	if out := h.ok("setup", "--queue", "q", "--group", "g", "--slots", "2", "--dedup-window", "2h"); !strings.Contains(out, `queue "q": dedup window set to 2h0m0s`) {
		t.Errorf("setup --dedup-window printed %q", out)
	}
	h.json(&s, "setup", "--queue", "q", "--group", "other", "--slots", "1")
	if s.DedupWindowSeconds != 7200 {
		t.Errorf("another group's setup: window %vs, want the queue's 7200", s.DedupWindowSeconds)
	}
	h.fails(cli.ExitUsage, []string{"invalid --dedup-window 200h0m0s", "a dedup window is from 1ms to 7 days", "give 1ms to 168h"},
		"setup", "--queue", "q", "--group", "g", "--slots", "2", "--dedup-window", "200h")
	h.fails(cli.ExitUsage, []string{"invalid --dedup-window 0"}, "setup", "--queue", "q", "--group", "g", "--slots", "2", "--dedup-window", "0")
}
