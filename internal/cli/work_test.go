package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq/connstr"
)

// script writes a shell script into dir and returns the --exec to run it.
func script(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return "sh '" + path + "'"
}

func TestWorkExecHandlesEveryEventInKeyOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	dir := t.TempDir()
	exec := script(t, dir, fmt.Sprintf(`
out='%s'
payload=$(cat)
printf '%%s\n' "$PARTITIONQ_EVENT_ID" >> "$out/order-$PARTITIONQ_KEY"
env | grep '^PARTITIONQ_' | sort > "$out/env-$PARTITIONQ_EVENT_ID"
printf '%%s' "$payload" > "$out/payload-$PARTITIONQ_EVENT_ID"
echo "handled $PARTITIONQ_EVENT_ID"
`, dir))
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, `{"key":"tenant-%d","type":"T%d","payload":{"i":%d}}`+"\n", i%4, i%4, i)
	}
	if r := h.runStdin(in.String(), "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	w := h.startWork("--exec", exec, "--identity", "cli-test", "--concurrency", "4")
	waitFor(t, 60*time.Second, "20 events handled", func() bool { return len(files(t, dir, "payload-")) == 20 })

	var st statusOut
	h.json(&st, with(qg, "status")...)
	for _, s := range st.Slots {
		if s.Owner == nil || s.Owner.Name != "cli-test" {
			t.Errorf("slot %d owner = %+v, want the worker cli-test", s.Slot, s.Owner)
		}
	}

	// Each key's events ran one at a time, in the order sent.
	stored := h.events("q")
	for k := range 4 {
		key := fmt.Sprintf("tenant-%d", k)
		var want []string
		for _, e := range stored {
			if e.Key == key {
				want = append(want, strconv.FormatInt(e.ID, 10))
			}
		}
		got := strings.Fields(readFile(t, dir, "order-"+key))
		if !slices.Equal(got, want) {
			t.Errorf("key %s handled %v, sent %v", key, got, want)
		}
	}
	// The payload came on standard input, the metadata in the environment.
	e := stored[5]
	if p := readFile(t, dir, fmt.Sprintf("payload-%d", e.ID)); p != e.Data {
		t.Errorf("handler read payload %q, want %q", p, e.Data)
	}
	env := readFile(t, dir, fmt.Sprintf("env-%d", e.ID))
	for _, v := range []string{
		fmt.Sprintf("PARTITIONQ_EVENT_ID=%d", e.ID), "PARTITIONQ_KEY=" + e.Key, "PARTITIONQ_TYPE=" + e.Type,
		"PARTITIONQ_ATTEMPT=1", "PARTITIONQ_QUEUE=q", "PARTITIONQ_GROUP=g", "PARTITIONQ_SLOT=", "PARTITIONQ_EVENT_TIME=",
		"PARTITIONQ_SLOTS=2", "PARTITIONQ_EPOCH=", "PARTITIONQ_FENCE=q/g/2/", "PARTITIONQ_RETRY_AFTER_FILE=/",
	} {
		if !strings.Contains(env, v) {
			t.Errorf("handler environment lacks %s:\n%s", v, env)
		}
	}

	r := w.stop(t)
	if r.code != cli.ExitOK {
		t.Fatalf("work: %s", r)
	}
	if n := strings.Count(r.stdout, "handled "); n != 20 {
		t.Errorf("handlers' standard output: %d lines, want 20:\n%s", n, r.stdout)
	}
	for _, want := range []string{"worker stopped; per slot", "HANDLED", "FAILED", "SET ASIDE", "DEAD LETTERED"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stats at exit lack %q:\n%s", want, r.stderr)
		}
	}
}

func TestWorkSlotsAndSmallPool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(3)
	h.fails(cli.ExitUsage, []string{`invalid --slots "5"`, "outside the group's 3 slots"}, with(qg, "work", "--exec", "true", "--slots", "5")...)

	w := h.startWork("--exec", "true", "--slots", "0,2", "--identity", "part")
	waitFor(t, 30*time.Second, "slots 0 and 2 owned", func() bool {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		return st.Slots[0].Owner != nil && st.Slots[2].Owner != nil
	})
	var st statusOut
	h.json(&st, with(qg, "status")...)
	if st.Slots[1].Owner != nil {
		t.Errorf("slot 1 is owned by %+v; the worker runs slots 0 and 2 only", st.Slots[1].Owner)
	}
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}

	// The worker's slots and drains hold connections of the worker's own,
	// so the pool the connection string sizes can be as small as one.
	oneConn, err := connstr.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	oneConn.Set("pool_max_conns", "1")
	small := &harness{t: t, url: h.url, env: map[string]string{"DATABASE_URL": oneConn.String()}}
	sw := small.startWork("--exec", "true")
	waitFor(t, 30*time.Second, "all 3 slots owned by the worker whose pool has one connection", func() bool {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		for _, s := range st.Slots {
			if s.Owner == nil {
				return false
			}
		}
		return true
	})
	if r := sw.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 30*time.Second, "the handler's child pid", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// A handler that hangs past --handler-timeout is killed with everything
// it started, and counts as a failure; the worker goes on.
func TestWorkExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	dir := t.TempDir()
	exec := script(t, dir, fmt.Sprintf(`
dir='%s'
cat >/dev/null
case "$PARTITIONQ_KEY" in
slow)
	sleep 300 &
	echo $! > "$dir/child"
	echo "slow handler started" >&2
	wait ;;
*)
	touch "$dir/done-$PARTITIONQ_KEY" ;;
esac
`, dir))
	h.ok("send", "--queue", "q", "--key", "slow")
	h.ok("send", "--queue", "q", "--key", "fast")
	w := h.startWork("--exec", exec, "--handler-timeout", "500ms", "--backoff-min", "1h")

	child := readPID(t, filepath.Join(dir, "child"))
	waitFor(t, 30*time.Second, "key slow blocked", func() bool { _, ok := h.blockedKey("slow"); return ok })
	bk, _ := h.blockedKey("slow")
	for _, want := range []string{"timed out after 500ms", "process group killed", "slow handler started"} {
		if !strings.Contains(bk.Head.LastError, want) {
			t.Errorf("last error %q lacks %q", bk.Head.LastError, want)
		}
	}
	waitFor(t, 10*time.Second, "the handler's child killed", func() bool { return !alive(child) })
	waitFor(t, 30*time.Second, "key fast handled", func() bool { return len(files(t, dir, "done-fast")) == 1 })
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
}

// A handler process that dies (kill -9 $$) is a failure of that event,
// not of the worker.
func TestWorkExecHandlerKilled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	dir := t.TempDir()
	// Inline, so that $$ is the handler process itself (sh -c).
	exec := fmt.Sprintf(`cat >/dev/null
if [ "$PARTITIONQ_KEY" = doomed ]; then echo "about to die" >&2; kill -9 $$; fi
if [ "$PARTITIONQ_KEY" = child ]; then sh -c 'kill -9 $$'; fi
if [ "$PARTITIONQ_KEY" = last ]; then sh -c 'kill -9 $$'; exit $?; fi
touch '%s'/"done-$PARTITIONQ_KEY"`, dir)
	h.ok("send", "--queue", "q", "--key", "doomed")
	h.ok("send", "--queue", "q", "--key", "child")
	h.ok("send", "--queue", "q", "--key", "last")
	h.ok("send", "--queue", "q", "--key", "ok-1")
	w := h.startWork("--exec", exec, "--backoff-min", "1h")
	waitFor(t, 30*time.Second, "key doomed blocked", func() bool { _, ok := h.blockedKey("doomed"); return ok })
	bk, _ := h.blockedKey("doomed")
	if !strings.HasPrefix(bk.Head.LastError, "killed by signal 9") || !strings.Contains(bk.Head.LastError, "about to die") {
		t.Errorf("last error %q", bk.Head.LastError)
	}
	// A command of the handler killed: the shell reports it as 128+9...
	waitFor(t, 30*time.Second, "key last blocked", func() bool { _, ok := h.blockedKey("last"); return ok })
	if bk, _ := h.blockedKey("last"); !strings.HasPrefix(bk.Head.LastError, "exit status 137 (a command it ran died of signal 9)") {
		t.Errorf("last error %q", bk.Head.LastError)
	}
	// ...or goes on, here to success.
	waitFor(t, 30*time.Second, "key child handled", func() bool { return len(files(t, dir, "done-child")) == 1 })
	waitFor(t, 30*time.Second, "key ok-1 handled", func() bool { return len(files(t, dir, "done-ok-1")) == 1 })
	h.ok("send", "--queue", "q", "--key", "ok-2")
	waitFor(t, 30*time.Second, "key ok-2 handled after the kill", func() bool { return len(files(t, dir, "done-ok-2")) == 1 })
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
}

// Stopping lets running handlers finish for --shutdown-timeout, then kills
// them: the worker's stop is bounded.
func TestWorkStopKillsHandlersAfterShutdownTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	dir := t.TempDir()
	exec := script(t, dir, fmt.Sprintf(`
cat >/dev/null
sleep 300 &
echo $! > '%s/child'
wait
`, dir))
	h.ok("send", "--queue", "q", "--key", "k")
	w := h.startWork("--exec", exec, "--handler-timeout", "0", "--shutdown-timeout", "200ms")
	child := readPID(t, filepath.Join(dir, "child"))
	start := time.Now()
	r := w.stop(t)
	if r.code != cli.ExitOK {
		t.Fatal(r)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("stop took %s with --shutdown-timeout 200ms", d)
	}
	waitFor(t, 10*time.Second, "the handler's child killed", func() bool { return !alive(child) })
}
