package tui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/test/pgtest"
)

// TestEndToEnd runs the real partitionq binary in a real terminal (tmux)
// against the real database: a worker whose handler fails for one event
// blocks its key, the console shows it, keystrokes skip it, the key
// disappears and its waiting events get handled. Keys typed fast (several
// in one read) each count; a key with a newline keeps its row and the
// frame; the result line says when; a console opened on a group that does
// not exist yet waits for it.
//
// It needs tmux: it is skipped without it, except under CI (CI set), where
// it fails instead. It is skipped with -short.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	tmuxPath, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is missing: CI must install it (apt-get install -y tmux) to run the console's end-to-end test")
		}
		t.Skip("tmux is missing: apt-get install tmux to run the console's end-to-end test")
	}
	t.Parallel()
	db := pgtest.New(t)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	pq := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--db", db.URL)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("partitionq %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	pq("setup", "--queue", "files", "--group", "indexer", "--slots", "2", "--tick-max-lag", "50ms")

	// The handler fails for the poison event and records the others.
	handled := filepath.Join(dir, "handled.txt")
	handler := filepath.Join(dir, "handler.sh")
	script := `#!/bin/sh
payload=$(cat)
case "$payload" in *'"poison":true'*) echo "cannot parse invoice: field total missing" >&2; exit 3;; esac
echo "$PARTITIONQ_KEY $payload" >> ` + shellQuote(handled) + "\n"
	if err := os.WriteFile(handler, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pq("send", "--queue", "files", "--key", "tenant-7", "--type", "InvoiceCreated", "--payload", `{"seq":1,"poison":true}`)
	pq("send", "--queue", "files", "--key", "tenant-7", "--type", "InvoiceCreated", "--payload", `{"seq":2}`)
	pq("send", "--queue", "files", "--key", "tenant-7", "--type", "InvoiceCreated", "--payload", `{"seq":3}`)
	pq("send", "--queue", "files", "--key", "tenant-8", "--type", "InvoiceCreated", "--payload", `{"seq":1}`)
	pq("send", "--queue", "files", "--key", "multi\nline", "--type", "InvoiceCreated", "--payload", `{"seq":1,"poison":true}`)

	ctx, cancel := context.WithCancel(context.Background())
	work := exec.CommandContext(ctx, bin, "work", "--db", db.URL, "--queue", "files", "--group", "indexer",
		"--exec", handler, "--ticker", "--tick-interval", "20ms", "--poll-interval", "20ms", "--backoff-min", "300ms", "--backoff-max", "1s")
	work.Cancel = func() error { return work.Process.Signal(os.Interrupt) }
	work.WaitDelay = 30 * time.Second
	workLog, err := os.Create(filepath.Join(dir, "work.log"))
	if err != nil {
		t.Fatal(err)
	}
	work.Stdout, work.Stderr = workLog, workLog
	if err := work.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = work.Wait()
		workLog.Close()
	})

	// The console, in a tmux server of its own, 80x24.
	term := &tmux{t: t, bin: tmuxPath, socket: fmt.Sprintf("pq-e2e-%d", os.Getpid()), target: "console"}
	t.Cleanup(term.kill)
	consoleLog := filepath.Join(dir, "console.log")
	term.run(80, 24, shellQuote(bin)+" console --db "+shellQuote(db.URL)+" --queue files --group indexer --actor e2e --log-file "+shellQuote(consoleLog))

	term.waitFor("the console live, with the blocked keys", "● live", "Blocked keys (2)")
	// "3" then "2" in one read: the dead letters, then the blocked keys.
	term.text("32")
	term.waitFor("the inbox, reached by keys typed fast", "[2 Blocked keys (2)]", `multi\nline`, "cannot parse invoice")
	term.frameIntact()
	term.text("ftenant-7")
	term.keys("Enter")
	term.waitFor("the inbox filtered to tenant-7", "▸ tenant-7", "(1 of 2)")
	term.keys("s")
	term.waitFor("the skip confirmation previewing what runs next", "Skip event #1 of key tenant-7?", `{"seq":2}`, `{"seq":3}`, "Reason:")
	term.text("poison invoice, INC-42")
	term.keys("Enter")
	term.waitFor("the skip confirmed, with its time, and the key gone", "✓ Skipped event #1 of key tenant-7", "Blocked keys (1)")
	if !regexp.MustCompile(`\d\d:\d\d:\d\d ✓ Skipped event #1`).MatchString(term.screen()) {
		t.Fatalf("the result line has no time:\n%s", term.screen())
	}
	pgtest.WaitFor(t, 30*time.Second, "the waiting events of tenant-7 handled, in order", func() (bool, error) {
		b, err := os.ReadFile(handled)
		if os.IsNotExist(err) {
			return false, nil
		}
		var seqs []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if k, payload, _ := strings.Cut(l, " "); k == "tenant-7" {
				seqs = append(seqs, payload)
			}
		}
		return strings.Join(seqs, ",") == `{"seq":2},{"seq":3}`, err
	})
	// The key with a newline: on one row, skipped, and the frame stays.
	term.keys("Escape")
	term.waitFor("the other blocked key", `▸ multi\nline`)
	term.keys("s")
	term.waitFor("its skip confirmation", `key multi\nline?`)
	term.text("newline key")
	term.keys("Enter")
	term.waitFor("the skip of the key with a newline", `✓ Skipped event #5 of key multi\nline`, "Blocked keys (0)", "No blocked keys")
	term.frameIntact()
	term.keys("4")
	term.waitFor("the skips in the audit trail", "e2e", "skip", "skipped", "poison invoice, INC-42")
	// Find a key, and replay its dead letters in bulk.
	term.text("/tenant-7")
	term.keys("Enter")
	term.waitFor("tenant-7 found, flowing, with its dead letter", "Key tenant-7 · slot", "flowing", "Dead letters: 1 (1 not replayed)")
	term.keys("R")
	term.waitFor("the bulk replay confirmation, from its dry run", "Replay 1 dead letter (filter key=tenant-7 pending)?", "Reason:")
	term.text("invoice fixed, INC-42")
	term.keys("Enter")
	term.waitFor("the bulk replay done", "✓ Replayed 1 dead letter (key=tenant-7 pending) in event order")
	// The slots: the group's exact pending and the worker's handled rate
	// (from the database), and each slot's lag to the millisecond.
	term.keys("1")
	term.waitFor("the slots with the handled rate", "[1 Slots]", "/s handled", "HANDLED/s")
	// The lag reads in milliseconds below a second and in tenths above; a
	// loaded machine may keep it above a second for a while.
	pgtest.WaitFor(t, 30*time.Second, "the group's pending count and each slot's lag on the slots view", func() (bool, error) {
		sc := term.screen()
		return regexp.MustCompile(`\d pending `).MatchString(sc) && regexp.MustCompile(`\s(\d{1,3}ms|\d\.\ds)\s`).MatchString(sc), nil
	})
	term.keys("q")
	pgtest.WaitFor(t, 10*time.Second, "the console to quit on q", func() (bool, error) { return !term.alive(), nil })
	if b, err := os.ReadFile(consoleLog); err != nil || !strings.Contains(string(b), "outcome=skipped") {
		t.Fatalf("console log (err %v) lacks the skip's outcome:\n%s", err, b)
	}

	// A console on a group that does not exist yet says how to make it,
	// and shows it once it is set up.
	later := &tmux{t: t, bin: tmuxPath, socket: term.socket, target: "later"}
	later.run(80, 24, shellQuote(bin)+" console --db "+shellQuote(db.URL)+" --queue files --group billing --refresh 200ms")
	later.waitFor("the missing group explained", `No consumer group "billing" on queue "files"`, "partitionq setup --queue files --group billing --slots N", "keeps looking")
	pq("setup", "--queue", "files", "--group", "billing", "--slots", "2")
	later.waitFor("the group, once set up", "● live", "2 slots", "Blocked keys (0)")
	later.keys("q")
	pgtest.WaitFor(t, 10*time.Second, "the second console to quit on q", func() (bool, error) { return !later.alive(), nil })

	// Without --queue and --group: every group, one opened, and back.
	all := &tmux{t: t, bin: tmuxPath, socket: term.socket, target: "all"}
	all.run(100, 24, shellQuote(bin)+" console --db "+shellQuote(db.URL)+" --refresh 200ms")
	all.waitFor("the list of every group", "every group · 2 groups", "▸ files/billing", "files/indexer")
	all.keys("Down", "Enter")
	all.waitFor("files/indexer opened", "files/indexer · 2 slots", "Blocked keys (")
	all.keys("0")
	all.waitFor("back on the list", "every group · 2 groups")
	all.keys("q")
	pgtest.WaitFor(t, 10*time.Second, "the third console to quit on q", func() (bool, error) { return !all.alive(), nil })
}

// buildBinary builds cmd/partitionq with the console into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	goBin := "go" // found on PATH, where go test and make put the go that runs them
	bin := filepath.Join(dir, "partitionq")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/partitionq")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/partitionq: %v\n%s", err, out)
	}
	return bin
}

// tmux drives one window of a private tmux server.
type tmux struct {
	t              *testing.T
	bin            string
	socket, target string
}

func (x *tmux) cmd(args ...string) (string, error) {
	out, err := exec.Command(x.bin, append([]string{"-L", x.socket}, args...)...).CombinedOutput()
	return string(out), err
}

func (x *tmux) run(width, height int, command string) {
	x.t.Helper()
	if out, err := x.cmd("new-session", "-d", "-s", x.target, "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command); err != nil {
		x.t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
}

func (x *tmux) screen() string {
	out, _ := x.cmd("capture-pane", "-p", "-t", x.target)
	return out
}

func (x *tmux) alive() bool {
	_, err := x.cmd("has-session", "-t", x.target)
	return err == nil
}

// keys sends tmux key names (e.g. "Enter", "s").
func (x *tmux) keys(names ...string) {
	x.t.Helper()
	if out, err := x.cmd(append([]string{"send-keys", "-t", x.target}, names...)...); err != nil {
		x.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
}

// text types s literally.
func (x *tmux) text(s string) {
	x.t.Helper()
	if out, err := x.cmd("send-keys", "-t", x.target, "-l", s); err != nil {
		x.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
}

// waitFor polls the screen until it shows every one of wants.
func (x *tmux) waitFor(what string, wants ...string) {
	x.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := x.screen()
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(s, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("timed out waiting for %s (%q); the screen:\n%s", what, wants, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// frameIntact checks that the screen starts with the console's header and
// ends with its help line: nothing pushed the frame off the terminal.
func (x *tmux) frameIntact() {
	x.t.Helper()
	s := strings.TrimRight(x.screen(), "\n")
	ls := strings.Split(s, "\n")
	if !strings.HasPrefix(ls[0], "partitionq console") || !strings.Contains(ls[len(ls)-1], "quit") && !strings.Contains(ls[len(ls)-1], "·") {
		x.t.Fatalf("the frame is broken (header scrolled away, or no help line):\n%s", s)
	}
}

func (x *tmux) kill() { _, _ = x.cmd("kill-server") }

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
