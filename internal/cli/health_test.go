package cli_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// probeURLs waits for work's line naming its liveness and readiness URLs
// in stderr and returns them.
func probeURLs(t *testing.T, stderr *pgtest.SyncBuffer) (livez, readyz string) {
	t.Helper()
	served := regexp.MustCompile(`serving liveness at (http://\S+/livez) and readiness at (http://\S+/readyz)`)
	waitFor(t, 30*time.Second, "the liveness and readiness addresses printed", func() bool {
		if m := served.FindStringSubmatch(stderr.String()); m != nil {
			livez, readyz = m[1], m[2]
		}
		return livez != ""
	})
	return livez, readyz
}

// probeGet asks a probe URL: its status code and body (0 and the error
// when nothing answers).
func probeGet(url string) (int, string) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWorkHealth runs `partitionq work --metrics-addr` through a TCP proxy
// and follows its /livez and /readyz as the database goes away and comes
// back: when the sessions are reset and new ones are never answered, the
// worker is not ready (its lease lapses) but stays live (its loops go on
// trying); when the network freezes with the sessions open, a statement
// hangs and the worker is not live either, once --liveness-timeout has
// passed; when the network comes back, both answer 200 again.
func TestWorkHealth(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	px, url := netproxy.Front(t, h.url, "connect_timeout", "1")
	const liveness = 10 * time.Second

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr pgtest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, with(qg, "work", "--db", url, "--poll-interval", "100ms", "--liveness-timeout", liveness.String(),
			"--metrics-addr", "127.0.0.1:0", "--exec", "true"),
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return h.env[k] }})
	}()
	livez, readyz := probeURLs(t, &stderr)
	healthz := strings.TrimSuffix(livez, "/livez") + "/healthz"
	answers := func(url string, code int, body string) func() bool {
		return func() bool {
			c, b := probeGet(url)
			return c == code && strings.Contains(b, body)
		}
	}
	waitFor(t, 30*time.Second, "/livez and /readyz answering 200 ok", func() bool {
		return answers(livez, 200, "ok")() && answers(readyz, 200, "ok")()
	})
	if c, b := probeGet(healthz); c != 200 || b != "ok\n" {
		t.Errorf("/healthz answered %d %q, want 200 ok (as /livez)", c, b)
	}
	// The slots' epochs, as the database has them: a worker that takes its
	// slots again after a lapse of its lease takes them at a new epoch.
	epochs := func() map[int]int64 {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		out := map[int]int64{}
		for _, s := range st.Slots {
			if s.Owner != nil {
				out[s.Slot] = s.Owner.Epoch
			}
		}
		return out
	}
	var before map[int]int64
	waitFor(t, 30*time.Second, "both slots owned", func() bool { before = epochs(); return len(before) == 2 })

	// The database goes away: every session reset, no new one answered.
	px.Freeze()
	px.DropAll()
	outage := time.Now()
	waitFor(t, 30*time.Second, "/readyz answering 503 once the lease lapsed", answers(readyz, 503, "lease"))
	_, why := probeGet(readyz)
	t.Logf("/readyz during the outage: %s", why)
	// Live all along: every loop goes on trying.
	for time.Since(outage) < liveness+2*time.Second {
		if c, b := probeGet(livez); c != 200 {
			t.Fatalf("/livez answered %d %q %s into an outage (the loops turn; the liveness timeout is %s)", c, b, time.Since(outage), liveness)
		}
		time.Sleep(100 * time.Millisecond)
	}
	px.Resume()
	waitFor(t, 30*time.Second, "/readyz answering 200 once the database is back", answers(readyz, 200, "ok"))
	// Its slots taken again: its loop that looks for new ticks queries
	// the database again.
	waitFor(t, 30*time.Second, "both slots taken again, at new epochs", func() bool {
		now := epochs()
		return len(now) == 2 && now[0] > before[0] && now[1] > before[1]
	})

	// The network freezes with the sessions open: a statement never returns.
	px.Freeze()
	waitFor(t, liveness+30*time.Second, "/livez answering 503: a loop is stuck", answers(livez, 503, "is stuck"))
	_, why = probeGet(livez)
	t.Logf("/livez during the freeze: %s", why)
	if c, _ := probeGet(readyz); c != 503 {
		t.Errorf("/readyz answered %d while /livez says the worker is stuck", c)
	}
	px.Resume()
	waitFor(t, 30*time.Second, "/livez and /readyz answering 200 once the network is back", func() bool {
		return answers(livez, 200, "ok")() && answers(readyz, 200, "ok")()
	})

	cancel()
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("work exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("work did not stop")
	}
	if c, _ := probeGet(livez); c != 0 {
		t.Errorf("/livez still answers %d after the worker stopped", c)
	}
}
