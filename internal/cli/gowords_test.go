package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/internal/cli"
)

// goName matches a Go type and field or method (Config.EngineSchema,
// Client.Setup, WorkerConfig.Retry.MaxAttempts, ActionRequest.HeadID): the
// library's words, which the command's errors never use.
var goName = regexp.MustCompile(`\b(Config|Client|WorkerConfig|GroupSpec|ActionRequest|Options|TickerConfig)\.[A-Z]\w*`)

// The command's errors name its flags and commands, never the library's
// Go fields: an engine that is not installed, a database without
// partitionq's schema, a missing group.
func TestErrorsSayNoGoNames(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	other := "pgque"
	if h.db.Schema == "pgque" {
		other = "pgq"
	}
	check := func(want []string, args ...string) {
		t.Helper()
		r := h.fails(cli.ExitFailed, want, args...)
		if m := goName.FindString(r.stderr); m != "" {
			t.Errorf("partitionq %s names the Go field %s: %s", strings.Join(args, " "), m, r.stderr)
		}
	}
	check([]string{"the engine " + other + " is not installed in this database"}, with(qg, "--engine", other, "status")...)
	check([]string{"no such queue"}, with(qg, "status")...)
	h.setup(1)
	check([]string{"no such consumer group"}, "status", "--queue", "q", "--group", "nope")
	check([]string{"no such consumer group"}, "dlq", "list", "--queue", "q", "--group", "nope")
}
