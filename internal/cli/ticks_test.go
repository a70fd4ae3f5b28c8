package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"

	"github.com/partitionq/partitionq/test/pgtest"
)

// shellWords splits a command line as sh would, for the plain lines of
// docs/cli.md: words, 'single' and "double" quotes, a # comment.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				t.Fatalf("unbalanced quote in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '#' && !inWord:
			i = len(line)
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// The first example of docs/cli.md, run as written (setup, send, work,
// status; the work command with its --exec in sh): the worker prints the
// event handled, and status then counts nothing pending.
func TestOpeningExampleWorksAsWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "```sh\n")
	end := strings.Index(doc[start+6:], "```")
	var cmds [][]string
	for _, l := range strings.Split(doc[start+6:start+6+end], "\n") {
		if w := shellWords(t, l); len(w) > 0 && w[0] == "partitionq" {
			cmds = append(cmds, w[1:])
		}
	}
	if len(cmds) != 4 || cmds[0][0] != "setup" || cmds[1][0] != "send" || cmds[2][0] != "work" || cmds[3][0] != "status" {
		t.Fatalf("the opening example of docs/cli.md is not setup, send, work, status: %q", cmds)
	}
	h.ok(cmds[0]...)
	h.ok(cmds[1]...)
	var stdout, stderr pgtest.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, cmds[2], cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Getenv: func(k string) string { return h.env[k] }})
	}()
	waitFor(t, 30*time.Second, "work to print the event handled", func() bool {
		return strings.Contains(stdout.String(), `handled tenant-42: {"path":"/a"}`)
	})
	waitFor(t, 30*time.Second, "status to count nothing pending", func() bool {
		return strings.Contains(h.ok(cmds[3]...), "\npending: 0;")
	})
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Fatalf("work exited %d:\n%s", code, stderr.String())
	}
}

// A worker with nothing making ticks says so once in its log, naming the
// fix, and status warns the same; once a tick comes, status is quiet.
func TestNoTickerIsNotSilent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2) // ticker_max_lag 20ms: a stall after 2s
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "x")
	var stdout, stderr pgtest.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, with(qg, "work", "--poll-interval", "50ms", "--exec", "true"),
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return h.env[k] }})
	}()
	const warned = "no slot can read them; run a ticker: partitionq tick (as the owner), the workers with --ticker, or pgqd"
	waitFor(t, 30*time.Second, "the worker's warning", func() bool { return strings.Contains(stderr.String(), warned) })
	out := h.ok(with(qg, "status")...)
	if !strings.Contains(out, `warning: the queue has no tick at all on queue "q" while 1 event wait`) &&
		!strings.Contains(out, `on queue "q" while 1 event wait after it: no slot reads them until the next tick; run a ticker: partitionq tick (as the owner), the workers with --ticker, or pgqd`) {
		t.Errorf("status does not warn:\n%s", out)
	}
	var st struct {
		Ticks struct {
			AgeSeconds float64 `json:"age_seconds"`
			Stalled    bool    `json:"stalled"`
			Warning    string  `json:"warning"`
		} `json:"ticks"`
	}
	h.json(&st, with(qg, "status")...)
	if !st.Ticks.Stalled || !strings.Contains(st.Ticks.Warning, "run a ticker") {
		t.Errorf("status --json ticks = %+v", st.Ticks)
	}
	// Once: three more of the worker's watch rounds (one a second here)
	// pass, by the tick's age, without a second warning.
	warnedAt := st.Ticks.AgeSeconds
	waitFor(t, 30*time.Second, "three more watch rounds", func() bool {
		h.json(&st, with(qg, "status")...)
		return st.Ticks.AgeSeconds > warnedAt+3.5
	})
	if n := strings.Count(stderr.String(), warned); n != 1 {
		t.Errorf("the worker warned %d times:\n%s", n, stderr.String())
	}
	h.ok("tick", "--once")
	waitFor(t, 30*time.Second, "status quiet after a tick", func() bool { return !strings.Contains(h.ok(with(qg, "status")...), "warning:") })
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Fatalf("work exited %d:\n%s", code, stderr.String())
	}
}

// partitionq keys lists the keys with the most pending events, exact for a
// small backlog, in a table and in JSON.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	var in strings.Builder
	for i := range 30 {
		key := "hot"
		if i%3 == 0 {
			key = "cold"
		}
		in.WriteString(`{"key":"` + key + `"}` + "\n")
	}
	if r := h.runStdin(in.String(), "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	raw := h.raw(with(qg, "keys", "--top", "1")...)
	pinKeys(t, "keys", raw, "queue", "group", "pending", "exact", "sampled", "top", "busiest", "oldest")
	pinKeys(t, "keys top", field(t, raw, "top", 0), "key", "slot", "pending", "error")
	pinKeys(t, "keys oldest", field(t, raw, "oldest", 0), "slot", "key", "oldest_seconds")
	var out struct {
		Pending int64 `json:"pending"`
		Exact   bool  `json:"exact"`
		Top     []struct {
			Key     string `json:"key"`
			Pending int64  `json:"pending"`
		} `json:"top"`
		Busiest []struct {
			Key string `json:"key"`
		} `json:"busiest"`
	}
	h.json(&out, with(qg, "keys", "--top", "1")...)
	if out.Pending != 30 || !out.Exact || len(out.Top) != 1 || out.Top[0].Key != "hot" || out.Top[0].Pending != 20 || len(out.Busiest) != 2 {
		t.Errorf("keys --json = %+v", out)
	}
	table := h.ok(with(qg, "keys")...)
	if !strings.Contains(table, `the keys of group "g" on queue "q" with the most pending events (exact: all 30 pending events counted):`) ||
		!strings.Contains(table, "hot") || !strings.Contains(table, "66.7%") {
		t.Errorf("keys table:\n%s", table)
	}
	h.fails(cli.ExitUsage, []string{"invalid --top 0: give 1 to 10000"}, with(qg, "keys", "--top", "0")...)
}
