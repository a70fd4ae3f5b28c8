package cli_test

import (
	"strings"
	"testing"

	"github.com/partitionq/partitionq/internal/cli"
)

// Usage errors exit 2, say what is wrong, and never reach the database
// (the offline harness's server does not answer).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"status", "--queue", "q", "--group", "g", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"status", "--group", "g"}, "missing --queue"},
		{[]string{"status", "--queue", "q"}, "missing --group"},
		{[]string{"status", "--queue", "bad name", "--group", "g"}, "invalid queue name"},
		{[]string{"setup", "--queue", "q", "--group", "g"}, "missing --slots"},
		{[]string{"setup", "--queue", "q", "--group", "g", "--slots", "x"}, `invalid argument "x"`},
		{[]string{"send", "--queue", "q", "--payload", "{}"}, "missing --key"},
		{[]string{"skip", "--queue", "q", "--group", "g"}, "missing --key"},
		{[]string{"retry", "--queue", "q", "--group", "g"}, "missing --key"},
		{[]string{"quarantine", "--queue", "q", "--group", "g"}, "missing --key"},
		{[]string{"preview", "--queue", "q", "--group", "g"}, "missing --key"},
		{[]string{"work", "--queue", "q", "--group", "g"}, "missing the handler: give one of --exec CMD"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--http", "http://x/"}, "give one handler: --exec, --http or --pipe"},
		{[]string{"work", "--queue", "q", "--group", "g", "--http", "ftp://x/"}, `invalid --http "ftp://x/": give an absolute http or https URL`},
		{[]string{"work", "--queue", "q", "--group", "g", "--http", "http://user:secret@x/"}, "the URL holds credentials"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--http-config", "f.yml"}, "--http-config needs --http"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--pipe-cancel-grace", "100ms"}, "--pipe-cancel-grace needs --pipe"},
		{[]string{"work", "--queue", "q", "--group", "g", "--pipe", "cat", "--pipe-cancel-grace", "1s"}, "invalid --pipe-cancel-grace 1s: give a positive duration less than --lease-duration/5 (1s)"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--policy", "later"}, `invalid --policy "later"`},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--runs"}, "--runs needs --http or --pipe"},
		{[]string{"work", "--queue", "q", "--group", "g", "--pipe", "cat", "--max-run", "8"}, "--max-run needs --runs"},
		{[]string{"work", "--queue", "q", "--group", "g", "--pipe", "cat", "--runs", "--max-run", "0"}, "invalid --max-run 0: give 1 or more"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--handler-timeout", "soon"}, "invalid argument"},
		{[]string{"dlq"}, "dlq needs a subcommand"},
		{[]string{"dlq", "frob"}, `unknown dlq subcommand "frob"`},
		{[]string{"dlq", "show", "--queue", "q", "--group", "g"}, "wants ID"},
		{[]string{"dlq", "show", "x", "--queue", "q", "--group", "g"}, `invalid dead letter id "x"`},
		{[]string{"dlq", "purge", "--queue", "q", "--group", "g"}, "--id ID (repeatable), filters such as --key K or --filter EXPR, or --all"},
		{[]string{"dlq", "purge", "--queue", "q", "--group", "g", "--all", "--id", "3"}, "not both"},
		{[]string{"dlq", "purge", "--queue", "q", "--group", "g", "--all", "--before", "yesterday"}, `invalid --before "yesterday"`},
		{[]string{"status", "--queue", "q", "--group", "g", "--engine", "kafka"}, `invalid --engine "kafka"`},
		{[]string{"status", "--queue", "q", "--group", "g", "--log-level", "loud"}, `invalid --log-level "loud"`},
		{[]string{"tick", "--interval", "0s"}, "give positive durations"},
		// skip and quarantine ask why, as the console does.
		{[]string{"skip", "--queue", "q", "--group", "g", "--key", "k"}, "missing --reason"},
		{[]string{"quarantine", "--queue", "q", "--group", "g", "--key", "k", "--reason", "  "}, "missing --reason"},
		// 0 is not a silent "default".
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--concurrency", "0"}, "invalid --concurrency 0: give 1 to 4096"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--backoff-min", "0"}, "invalid --backoff-min 0s"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--backoff-max", "0"}, "invalid --backoff-max 0s"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--poll-interval", "0"}, "invalid --poll-interval 0s"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--tick-interval", "0"}, "invalid --tick-interval 0s"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--tick-interval", "-1s"}, "invalid --tick-interval -1s: give a positive duration"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--shutdown-timeout", "0"}, "invalid --shutdown-timeout 0s"},
		{[]string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--liveness-timeout", "0"}, "invalid --liveness-timeout 0s"},
		{[]string{"version", "extra"}, `partitionq version takes flags, not words (got "extra"): give them as flags`},
		{[]string{"setup", "files", "indexer", "8"}, `partitionq setup takes flags, not words (got "files" "indexer" "8"): give them as flags, e.g. partitionq setup --queue "files" --group "indexer" --slots "8"`},
		{[]string{"status", "files"}, `partitionq status takes flags, not words (got "files"): give them as flags, e.g. partitionq status --queue files --group indexer`},
	}
	h := offline(t)
	for _, c := range cases {
		r := h.run(c.args...)
		h.expect(r, cli.ExitUsage, []string{c.want, "--help' for usage"}, c.args)
		if strings.Contains(r.stderr, "secret") {
			t.Errorf("partitionq %s repeats the credentials of the URL: %s", strings.Join(c.args, " "), r.stderr)
		}
	}

	// No database at all.
	nodb := &harness{t: t, env: map[string]string{}}
	r := nodb.run("status", "--queue", "q", "--group", "g")
	nodb.expect(r, cli.ExitUsage, []string{"no database: pass --db URL or set DATABASE_URL"}, nil)
}

// A server that does not answer is an operation failure (1), and the
// message says what to check.
func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	h := offline(t)
	r := h.run("status", "--queue", "q", "--group", "g")
	h.expect(r, cli.ExitFailed, []string{"cannot connect to the database", "check --db or DATABASE_URL"}, nil)
	if strings.Contains(r.stderr, "--help") {
		t.Errorf("an operation failure should not point at --help: %s", r)
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	out := offline(t).ok("--help")
	for _, c := range []string{"setup", "send", "work", "tick", "groups", "status", "key", "blocked", "preview", "audit", "console",
		"skip", "retry", "quarantine", "dlq", "version"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("--help does not list %s:\n%s", c, out)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	h := offline(t)
	if out := h.ok("version"); !strings.HasPrefix(out, "partitionq ") {
		t.Errorf("version printed %q", out)
	}
	var v versionOut
	h.json(&v, "version")
	if v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("version --json = %+v", v)
	}
	pinKeys(t, "version", h.raw("version"), "version", "go")
}

// --reason says where each action records it: retry writes no dead letter.
func TestReasonHelpSaysWhereItGoes(t *testing.T) {
	t.Parallel()
	h := offline(t)
	for cmd, want := range map[string]string{
		"retry":      "why, recorded in the audit trail (optional)",
		"skip":       "why (required), recorded in the audit trail and in the dead letter of the head",
		"quarantine": "why (required), recorded in the audit trail and in the dead letters of the key's events",
	} {
		r := h.run(cmd, "--help")
		if r.code != cli.ExitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("partitionq %s --help does not say %q:\n%s", cmd, want, r.stdout)
		}
		if cmd == "retry" && strings.Contains(r.stdout, "dead letter") {
			t.Errorf("partitionq retry --help says its reason goes in a dead letter:\n%s", r.stdout)
		}
	}
}

// --policy skip, the retry-later policy's old name, still works and says
// what to use instead (the --concurrency 0 after it stops the command
// before the database).
func TestPolicyNamedSkipIsRetryLater(t *testing.T) {
	t.Parallel()
	h := offline(t)
	args := []string{"work", "--queue", "q", "--group", "g", "--exec", "true", "--policy", "skip", "--concurrency", "0"}
	r := h.run(args...)
	h.expect(r, cli.ExitUsage, []string{"--policy skip is now --policy retry-later", "invalid --concurrency 0"}, args)
	args[8] = "retry-later"
	r = h.run(args...)
	h.expect(r, cli.ExitUsage, []string{"invalid --concurrency 0"}, args)
	if strings.Contains(r.stderr, "is now") {
		t.Errorf("--policy retry-later is not an old name: %s", r)
	}
}
