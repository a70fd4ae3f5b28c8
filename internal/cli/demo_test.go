package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/test/pgtest"
)

// demoSummary matches the demo's closing summary line.
var demoSummary = regexp.MustCompile(`(\d+) tenants sent (\d+) events?: (\d+) handled, (\d+) dead letters?`)

// The demo runs end to end in process, headless (its standard output is
// not a terminal), in the test's fresh database: events fail, tenants block
// and unblock, some events end as dead letters, and the order check at the
// end says OK. Its numbers agree with the database's dead letters.
func TestDemoInPlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	args := []string{"demo", "--in-place", "--duration", "2s", "--tenants", "12", "--rate", "150", "--slots", "3",
		"--concurrency", "2", "--fail-rate", "0.05", "--max-attempts", "2"}
	r := h.run(args...)
	if r.code != cli.ExitOK {
		t.Fatalf("partitionq %s: %s", strings.Join(args, " "), r)
	}
	for _, want := range []string{"no terminal: a progress line every second", "TIME", "order check: OK: every tenant's events were handled in order"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the demo's output does not say %q:\n%s", want, r.stdout)
		}
	}
	m := demoSummary.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", r.stdout)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	tenants, sent, handled, dead := n(1), n(2), n(3), n(4)
	if tenants != 12 || sent < 100 || handled+dead != sent || dead == 0 {
		t.Errorf("summary %q: want 12 tenants, at least 100 events, some dead letters, handled + dead = sent", m[0])
	}
	var dl dlqListOut
	h.json(&dl, "dlq", "list", "--queue", "files", "--group", "storage", "--limit", "10000")
	if len(dl.DeadLetters) != dead {
		t.Errorf("the demo reports %d dead letters, the database holds %d", dead, len(dl.DeadLetters))
	}

	// The queue is the demo's own: a second run in place refuses to reuse it.
	h.fails(cli.ExitFailed, []string{`queue "files"`, "--queue"}, "demo", "--in-place", "--duration", "1s")
}

// The binary, without a terminal, makes its own database on the server
// with the engine of --engine (the tests' engine; PgQue from the file
// PARTITIONQ_PGQUE_SQL names), runs in it, and makes it again on the next
// run; it never drops a database it did not make.
func TestDemoBinaryMakesItsOwnDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t) // the server; its fresh database serves as --db
	name := "pqtest_demo_" + randomHex(6)
	t.Cleanup(func() { dropDatabase(t, name) })
	for run := 1; run <= 2; run++ {
		r := runBinary(t, db.URL, "", "--engine", db.Schema, "demo", "--demo-db", name, "--duration", "1s", "--tenants", "5", "--rate", "50", "--fail-rate", "0")
		if r.code != cli.ExitOK || !strings.Contains(r.stdout, "order check: OK") || !strings.Contains(r.stdout, name+" (made for this run") {
			t.Fatalf("run %d: %s", run, r)
		}
	}
	demoURL := pgtest.ReplaceDB(db.URL, db.Name, name)
	if r := runBinary(t, demoURL, "", "status", "--queue", "files", "--group", "storage"); r.code != cli.ExitOK || !strings.Contains(r.stdout, "engine "+db.Schema) {
		t.Fatalf("status of the demo's database: want engine %s, got %s", db.Schema, r)
	}

	foreign := "pqtest_demo_" + randomHex(6)
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(t.Context(), "create database "+foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropDatabase(t, foreign) })
	r := runBinary(t, db.URL, "", "demo", "--demo-db", foreign, "--duration", "1s")
	if r.code != cli.ExitFailed || !strings.Contains(r.stderr, "was not made by partitionq demo") {
		t.Fatalf("a database the demo did not make: want exit 1 refusing it, got %s", r)
	}
}

// In a real terminal (tmux) the demo opens the console; q ends it, and the
// demo then prints its verdict on the terminal.
func TestDemoConsoleInATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test in a terminal: skipped with -short")
	}
	tmuxPath, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is missing: CI must install it (apt-get install -y tmux)")
		}
		t.Skip("tmux is missing: apt-get install tmux to run this test")
	}
	t.Parallel()
	db := pgtest.New(t)
	bin := binary(t)
	socket := fmt.Sprintf("pq-demo-%d", os.Getpid())
	tmux := func(args ...string) string {
		out, _ := exec.Command(tmuxPath, append([]string{"-L", socket}, args...)...).CombinedOutput()
		return string(out)
	}
	t.Cleanup(func() { tmux("kill-server") })
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	tmux("new-session", "-d", "-s", "demo", "-x", "120", "-y", "40",
		quote(bin)+" demo --in-place --db "+quote(db.URL)+" --tenants 5 --rate 50 --fail-rate 0; echo EXIT=$?; sleep 60")
	screenShows := func(what string, wants ...string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool {
			s := tmux("capture-pane", "-p", "-t", "demo")
			for _, w := range wants {
				if !strings.Contains(s, w) {
					return false
				}
			}
			return true
		})
	}
	screenShows("the console on the demo's group", "files/storage", "4 slots", "● live")
	tmux("send-keys", "-t", "demo", "q")
	screenShows("the verdict after the console closed", "order check: OK", "EXIT=0")
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	h := offline(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenants", "0"}, "invalid --tenants 0"},
		{[]string{"--rate", "0"}, "invalid --rate 0"},
		{[]string{"--slots", "300"}, "invalid --slots 300"},
		{[]string{"--fail-rate", "0.9"}, "invalid --fail-rate 0.9"},
		{[]string{"--max-attempts", "0"}, "invalid --max-attempts 0"},
		{[]string{"--duration", "-1s"}, "invalid --duration"},
		{[]string{"--demo-db", "Bad-Name"}, "invalid --demo-db"},
		{[]string{"--queue", "a b"}, "queue name"},
		{[]string{"--engine", "pgque"}, "--engine pgque: the demo installs PgQue in the database it makes: PgQue is installed from its SQL file"},
	} {
		h.fails(cli.ExitUsage, []string{c.want}, append([]string{"demo"}, c.args...)...)
	}
	noDB := &harness{t: t, env: map[string]string{}}
	noDB.fails(cli.ExitUsage, []string{"no database", "make demo"}, "demo")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func dropDatabase(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Errorf("drop database %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "drop database if exists "+name+" with (force)"); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}
