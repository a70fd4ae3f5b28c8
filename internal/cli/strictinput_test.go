package cli_test

import (
	"strings"
	"testing"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Every text flag that partitionq stores or looks up meets the library's
// text rule: --actor and --reason of the operator actions, the --key of
// dlq list. Before, they reached PostgreSQL, which answered "invalid byte
// sequence for encoding "UTF8": 0xff" from the middle of the transaction
// (dlq purge, drop-group), or the command answered something beside the
// point ("key is not blocked"). Now each is a usage error naming the
// field, and nothing is done or audited.
func TestTextFlagsFollowTheTextRule(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(qg, "skip", "--key", "k", "--reason", "r", "--actor", "\xff"), `invalid actor "\xff"`},
		{with(qg, "retry", "--key", "k", "--reason", "a\xed\xa0\x80"), `invalid reason "a\u{d800}"`},
		{with(qg, "quarantine", "--key", "k", "--reason", "r", "--actor", "al\x00ice"), `invalid actor "al\x00ice"`},
		{with(qg, "skip", "--key", "\xfe", "--reason", "r"), `invalid key "\xfe"`},
		{with(qg, "preview", "--key", "\xed\xbf\xbf"), `invalid key "\u{dfff}"`},
		{with(qg, "dlq", "list", "--key", "\xff"), `invalid key "\xff"`},
		{with(qg, "dlq", "replay", "1", "--actor", "\xff"), `invalid actor "\xff"`},
		{with(qg, "dlq", "purge", "--all", "--actor", "\xff"), `invalid actor "\xff"`},
		{with(qg, "dlq", "purge", "--all", "--reason", "\xc3("), `invalid reason "\xc3("`},
		{with(qg, "drop-group", "--force", "--reason", "\xff"), `invalid reason "\xff"`},
	} {
		r := h.fails(cli.ExitUsage, []string{c.want}, c.args...)
		if strings.Contains(r.stderr, "SQLSTATE") {
			t.Errorf("partitionq %s: a raw SQL error: %s", strings.Join(c.args, " "), r.stderr)
		}
	}
	if out := h.ok(with(qg, "audit")...); !strings.Contains(out, "no operator actions recorded") {
		t.Errorf("refused actions were audited:\n%s", out)
	}
	if evs := h.events("q"); len(evs) != 1 {
		t.Errorf("events after refused actions: %+v", evs)
	}
	h.ok(with(qg, "status")...) // the group is still there
}

// --engine pgque on a database with PgQ only was a raw SQL error
// ("relation "pgque.queue" does not exist"); it is reported as an engine
// that is not installed, with how to install it, as when no engine at all
// is found.
func TestEngineNotInstalled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	have, other := "pgq", "pgque" // the engine this database has, and the other
	if pgtest.Engine(t).Name == "pgque" {
		have, other = "pgque", "pgq"
	}
	r := h.fails(cli.ExitFailed, []string{"the engine " + other + " is not installed in this database", "docs/engines.md", "or use " + have + ", which is installed here"},
		with(qg, "--engine", other, "status")...)
	if strings.Contains(r.stderr, "SQLSTATE") {
		t.Errorf("a raw SQL error: %s", r.stderr)
	}
	h.ok(with(qg, "--engine", have, "status")...)
}

// Errors that echo a value the user gave quote it clipped and escaped
// (termsafe.Echo): a 100 KB --before was echoed whole, an unknown flag's
// name reached the terminal raw, escapes included. The whole error stays
// a few hundred bytes and holds no control character, whatever was given.
func TestErrorsClipWhatTheyEcho(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	esc := "\x1b]0;owned\x07\x1b[2J"
	h := newHarness(t)
	h.setup(2)
	for _, args := range [][]string{
		with(qg, "dlq", "purge", "--all", "--before", long),
		with(qg, "dlq", "purge", "--all", "--before", esc),
		with(qg, "work", "--exec", "true", "--slots", long),
		with(qg, "work", "--exec", "true", "--slots", "1,"+long),
		with(qg, "work", "--exec", "true", "--policy", long),
		with(qg, "work", "--exec", "true", "--handler-timeout", long),
		with(qg, "audit", "--limit", long),
		with(qg, "dlq", "purge", "--id", "1,"+long),
		with(qg, "dlq", "show", long),
		{"dlq", long},
		{long},
		{esc},
		with(qg, "status", long),
		with(qg, "status", "--"+long),
		with(qg, "status", "--"+esc),
		with(qg, "status", "-"+esc),
		with(qg, "status", "--engine", long),
		with(qg, "status", "--log-level", esc),
		{"demo", "--demo-db", long},
		{"send", "--queue", long},
		{"send", "--queue", "q", "--key", long},
		{"send", "--queue", "q", "--key", esc + long},
	} {
		r := h.run(args...)
		if r.code == cli.ExitOK {
			t.Fatalf("partitionq %.80q: exit 0", strings.Join(args, " "))
		}
		if len(r.stderr) > 600 {
			t.Errorf("partitionq %.80q: %d bytes of error: %.300s...", strings.Join(args, " "), len(r.stderr), r.stderr)
		}
		if strings.ContainsAny(r.stderr, "\x1b\x07\x00") {
			t.Errorf("partitionq %.80q: a control character in the error: %q", strings.Join(args, " "), r.stderr)
		}
		if strings.Contains(strings.Join(args, " "), long) && !strings.Contains(r.stderr, "bytes)") {
			t.Errorf("partitionq %.80q: the error does not say how long the value was: %s", strings.Join(args, " "), r.stderr)
		}
	}
}
