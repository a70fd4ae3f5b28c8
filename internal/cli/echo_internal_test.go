package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// The audit table clips the free-text ACTOR as it clips REASON: a
// 100,000-character actor printed a 100,147-character line.
func TestAuditTableClipsTheActor(t *testing.T) {
	var out bytes.Buffer
	es := []partitionq.AuditEntry{{ID: 1, At: time.Now(), DBRole: "ops", Actor: strings.Repeat("a", 100_000) + "\x1b[2J",
		Action: "skip", Key: "k", EventID: 7, Reason: "r", Outcome: "skipped"}}
	if err := printAudit(&out, es); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if len(l) > 200 {
			t.Errorf("a line of %d bytes: %.120s...", len(l), l)
		}
	}
	if !strings.Contains(out.String(), "a…") {
		t.Errorf("the cut is not marked:\n%s", out.String())
	}
}

// clipQuoted re-quotes the %q strings of a message made by cobra, and
// leaves short ones and other text alone.
func TestClipQuoted(t *testing.T) {
	long := strings.Repeat("x", 1000)
	for in, want := range map[string]string{
		`unknown command "bogus" for "partitionq"`:        `unknown command "bogus" for "partitionq"`,
		`unknown command "` + long + `" for "partitionq"`: `unknown command "` + long[:48] + `"... (1000 bytes) for "partitionq"`,
		`time: invalid duration "\x1b[2J` + long + `"`:    `time: invalid duration "\x1b[2J` + long[:41] + `"... (1004 bytes)`,
		"no quotes at all": "no quotes at all",
		`relation "pgque.queue" does not exist (SQLSTATE 42P01)`: `relation "pgque.queue" does not exist (SQLSTATE 42P01)`,
	} {
		if got := clipQuoted(in); got != want {
			t.Errorf("clipQuoted(%.60q) = %.120q, want %.120q", in, got, want)
		}
	}
}
