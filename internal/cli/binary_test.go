package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/internal/cli"

	"github.com/partitionq/partitionq/test/pgtest"
)

// binDir holds the partitionq binary built for the tests; TestMain makes
// and removes it.
var binDir string

// buildBinary builds cmd/partitionq once, on first use.
var buildBinary = sync.OnceValues(func() (string, error) {
	goTool := "go" // found on PATH, where go test and make put the go that runs them
	bin := filepath.Join(binDir, "partitionq")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/partitionq/partitionq/cmd/partitionq").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string {
	return "go build ./cmd/partitionq: " + e.err.Error() + "\n" + e.out
}

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" { // a handler of the handler tests (handlerroles_test.go)
		os.Exit(runRole(role))
	}
	dir, err := os.MkdirTemp("", "partitionq-cli-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// Every worker, ticker, pool and handler of the in-process runs
		// must be gone once its command returned.
		// The exec guardian's goroutines live as long as the process, by
		// design (internal/cli/guard_unix.go).
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/partitionq/partitionq/internal/cli.spawnLoop"),
			goleak.IgnoreAnyFunction("github.com/partitionq/partitionq/internal/cli.(*guardian).wait")); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runBinary runs the built command with DATABASE_URL set to url.
func runBinary(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func TestBinaryExitStatuses(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	check := func(r result, code int, want string) {
		t.Helper()
		if r.code != code || !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("want exit %d mentioning %q, got %s", code, want, r)
		}
	}
	check(runBinary(t, h.url, "", "version"), cli.ExitOK, "partitionq ")
	check(runBinary(t, h.url, "", "bogus"), cli.ExitUsage, `partitionq: unknown command "bogus"`)
	check(runBinary(t, h.url, "", "skip", "--queue", "q", "--group", "g"), cli.ExitUsage, "partitionq: missing --key")
	check(runBinary(t, h.url, "", "status", "--queue", "q", "--group", "g"), cli.ExitFailed, `partitionq: no such queue "q": create it and the group with partitionq setup --queue q --group g --slots N`)
	check(runBinary(t, h.url, "", "setup", "--queue", "q", "--group", "g", "--slots", "2"), cli.ExitOK, "with 2 slots")
	check(runBinary(t, h.url, "", "setup", "--queue", "q", "--group", "g", "--slots", "3"), cli.ExitFailed, "has 2 slots, not 3")
	check(runBinary(t, h.url, `{"key":"a"}`+"\n"+`{"key":"b"`+"\n", "send", "--queue", "q"), cli.ExitFailed, "standard input, line 2: malformed JSON")
	if evs := h.events("q"); len(evs) != 0 {
		t.Errorf("a malformed input sent %d events", len(evs))
	}
	check(runBinary(t, h.url, `{"key":"a"}`+"\n"+`{"key":"b"}`+"\n", "send", "--queue", "q"), cli.ExitOK, "sent 2 events")
}

// SIGTERM stops the worker gracefully: exit 0, stats on standard error.
func TestBinaryWorkStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "hello")
	cmd := exec.Command(binary(t), "work", "--queue", "q", "--group", "g", "--ticker", "--tick-interval", "10ms",
		"--identity", "bin-worker", "--exec", "cat")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+h.url)
	var out, errb pgtest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // already gone on success
	waitFor(t, 30*time.Second, "the event handled", func() bool { return strings.Contains(out.String(), "hello") })
	var st statusOut
	h.json(&st, with(qg, "status")...)
	if o := st.Slots[0].Owner; o == nil || o.Name != "bin-worker" {
		t.Errorf("slot 0 owner %+v, want bin-worker", o)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("work after SIGTERM: %v\nstderr:\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "worker stopped; per slot") {
		t.Errorf("no stats at exit:\n%s", errb.String())
	}
	h.json(&st, with(qg, "status")...)
	for _, s := range st.Slots {
		if s.Owner != nil {
			t.Errorf("slot %d still owned by %+v after the worker stopped", s.Slot, s.Owner)
		}
	}
}

// A work --exec command never outlives its worker: kill -9 the worker while
// its command runs, and the command (a shell) and what it started (a
// sleep, in the command's process group) are gone at once.
func TestBinaryWorkKilledTakesItsCommandsWithIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	dir := t.TempDir()
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "x")
	cmd := exec.Command(binary(t), "work", "--queue", "q", "--group", "g", "--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms",
		"--exec", fmt.Sprintf(`echo $$ > '%s/shell'; sleep 300 & echo $! > '%s/child'; wait`, dir, dir))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+h.url)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // killed on purpose
	t.Cleanup(func() { cmd.Process.Kill() })
	shell := readPID(t, filepath.Join(dir, "shell"))
	child := readPID(t, filepath.Join(dir, "child"))
	if !alive(shell) || !alive(child) {
		t.Fatal("the command is not running")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	waitFor(t, 5*time.Second, "the command and its child to die with the worker", func() bool { return !alive(shell) && !alive(child) })
}
