package security_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
	"github.com/partitionq/partitionq/tui"
)

// hostile are keys and types that would do harm if pasted into SQL, a
// shell or a terminal. All are valid keys (UTF-8 without NUL).
var hostile = []string{
	`'; drop table canary; --`,
	`"; drop table canary; --`,
	`$$; drop table canary; $$`,
	`$1`,
	`\'; select pg_sleep(10); --`,
	`' || (select string_agg(rolname, ',') from pg_roles) || '`,
	`ev_extra1) or (true`,
	`1; delete from pgq.retry_queue`,
	`); truncate partitionq.dead_letter; --`,
	`%s%n%x%d`,
	`$(touch /tmp/pwned)`,
	"`reboot`",
	`k' and hashtextextended('x', 0) = 0 --`,
	"Robert'); DROP TABLE Students;--",
	"ключ/ключ",
	"\U0001F600 'x'",
}

// terminal are keys with control characters: stored and handled as they
// are, and never written raw to a terminal.
var terminal = []string{
	"\x1b[2J\x1b[31mred",
	"\x1b]0;owned\x07",
	"line1\nline2",
	"cr\roverwrite",
}

// hostileEnv is a database with queue q, group g, a canary table, a worker
// whose handler fails an event whose payload starts with "fail:" and
// records the keys it handles.
type hostileEnv struct {
	*env
	h *handler
}

func newHostileEnv(t *testing.T) *hostileEnv {
	e := newEnv(t)
	if _, err := e.admin.Exec(e.ctx, `create table canary (x int); insert into canary values (1)`); err != nil {
		t.Fatal(err)
	}
	h := &handler{}
	w, err := e.ac.NewWorker(e.ctx, partitionq.WorkerConfig{
		Queue: "q", Group: "g", Handler: h,
		Retry:     partitionq.RetryConfig{BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, HeadScanInterval: 50 * time.Millisecond},
		Limits:    partitionq.LimitsConfig{Concurrency: 4, PollInterval: 10 * time.Millisecond},
		Ownership: partitionq.OwnershipConfig{StandbyPoll: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return &hostileEnv{env: e, h: h}
}

func (e *hostileEnv) intact(t *testing.T) {
	t.Helper()
	var canary, queues, consumers, deadTable int
	err := e.admin.QueryRow(e.ctx, e.db.SQL(`select (select count(*) from canary), (select count(*) from pgq.queue),
		(select count(*) from pgq.consumer), (select count(*) from pg_tables where schemaname = 'partitionq' and tablename = 'dead_letter')`)).
		Scan(&canary, &queues, &consumers, &deadTable)
	if err != nil || canary != 1 || queues != 1 || consumers != 2 || deadTable != 1 {
		t.Fatalf("something was executed: canary %d, queues %d, consumers %d, dead_letter table %d, %v", canary, queues, consumers, deadTable, err)
	}
}

// SQL in queue and group names never reaches the database: every entry
// point refuses the name with ErrInvalid (the command with a usage error),
// and nothing is created.
func TestHostileNamesAreRefused(t *testing.T) {
	t.Parallel()
	e := newHostileEnv(t)
	names := append(slices.Clone(hostile), "q'", "q;", "q g", "g#0/2", "-q", "", strings.Repeat("q", 49))
	for _, n := range names {
		checks := map[string]error{}
		_, checks["Setup queue"] = e.ac.Setup(e.ctx, partitionq.GroupSpec{Queue: n, Group: "g", Slots: 2})
		_, checks["Setup group"] = e.ac.Setup(e.ctx, partitionq.GroupSpec{Queue: "q", Group: n, Slots: 2})
		_, checks["Send"] = e.ac.Send(e.ctx, n, partitionq.Message{Key: "k"})
		_, checks["BlockedKeys"] = e.ac.BlockedKeys(e.ctx, "q", n)
		_, checks["Status"] = e.ac.Status(e.ctx, n, "g")
		_, checks["Act skip"] = e.ac.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: n, Key: "k", Reason: "test"})
		_, checks["DeadLetters"] = e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: n, Group: "g"})
		_, checks["Replay"] = e.ac.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: n, ID: 1})
		_, checks["NewWorker"] = e.ac.NewWorker(e.ctx, partitionq.WorkerConfig{Queue: n, Group: "g", Handler: e.h})
		for what, err := range checks {
			if !errors.Is(err, partitionq.ErrInvalid) {
				t.Errorf("%s with name %q: %v, want ErrInvalid", what, n, err)
			}
		}
		if n == "" {
			continue // the command reads an empty flag as missing: also a usage error, tested in internal/cli
		}
		for _, args := range [][]string{
			{"setup", "--queue", n, "--group", "g", "--slots", "2"},
			{"setup", "--queue", "q", "--group", n, "--slots", "2"},
			{"blocked", "--queue", "q", "--group", n},
			{"send", "--queue", n, "--key", "k"},
		} {
			code, _, errs := e.cli("operator", "", args...)
			if code != cli.ExitUsage || !strings.Contains(errs, "invalid") {
				t.Errorf("partitionq %q: exit %d, want a usage error (2) naming the invalid name: %s", args, code, errs)
			}
		}
	}
	e.intact(t)
}

// SQL, shell and format strings in keys, types, payloads and reasons are
// data: stored exactly, routed by their hash, handled with the exact key,
// blocked and listed, previewed, skipped by that key through the library and
// the command, dead-lettered and audited, all literally; nothing is executed.
func TestHostileStringsAreStoredAndShownLiterally(t *testing.T) {
	t.Parallel()
	e := newHostileEnv(t)
	keys := append(slices.Clone(hostile), terminal...)
	var ms []partitionq.Message
	for _, k := range keys {
		ms = append(ms, partitionq.Message{Key: k, Type: k, Payload: []byte("fail:" + k)}, partitionq.Message{Key: k, Type: k, Payload: []byte(k)})
	}
	pc := e.client("producer", 2, nil)
	if _, err := pc.SendBatch(e.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	heads := map[string]int64{}
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d blocked keys with one event waiting each", len(keys)), func() (bool, error) {
		bk, err := e.ac.BlockedKeys(e.ctx, "q", "g")
		if err != nil || len(bk) != len(keys) {
			return false, err
		}
		for _, b := range bk {
			if b.Waiting != 1 {
				return false, nil
			}
			heads[b.Key] = b.Head.ID
			if b.Head.Type != b.Key || string(b.Head.Payload) != "fail:"+b.Key {
				t.Fatalf("key %q blocked on a head stored as type %q payload %q", b.Key, b.Head.Type, b.Head.Payload)
			}
		}
		return true, nil
	})
	e.intact(t)
	for _, k := range keys {
		if _, ok := heads[k]; !ok {
			t.Fatalf("key %q is not among the blocked keys %q", k, mapKeys(heads))
		}
		slot, err := e.ac.SlotOf(e.ctx, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		bk, err := e.ac.BlockedKey(e.ctx, "q", "g", k)
		if err != nil || bk.Slot != slot {
			t.Fatalf("BlockedKey(%q): slot %d (want %d), %v", k, bk.Slot, slot, err)
		}
		pv, err := e.ac.Preview(e.ctx, "q", "g", k, 10)
		if err != nil || len(pv) != 2 || string(pv[1].Payload) != k || pv[1].Type != k {
			t.Fatalf("Preview(%q): %+v, %v", k, pv, err)
		}
	}

	t.Run("the command shows them literally", func(t *testing.T) {
		var blocked struct {
			BlockedKeys []struct {
				Key  string `json:"key"`
				Head struct {
					Type    string `json:"type"`
					Payload string `json:"payload"`
				} `json:"head"`
			} `json:"blocked_keys"`
		}
		code, out, errs := e.cli("viewer", "", "blocked", "--queue", "q", "--group", "g", "--json")
		if code != cli.ExitOK {
			t.Fatalf("blocked --json: exit %d: %s", code, errs)
		}
		if err := json.Unmarshal([]byte(out), &blocked); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range blocked.BlockedKeys {
			got = append(got, b.Key)
			if b.Head.Type != b.Key || b.Head.Payload != "fail:"+b.Key {
				t.Errorf("blocked --json shows key %q with type %q payload %q", b.Key, b.Head.Type, b.Head.Payload)
			}
		}
		if !sameSet(got, keys) {
			t.Errorf("blocked --json lists %q, want %q", got, keys)
		}
	})

	t.Run("the command never writes control characters to a terminal", func(t *testing.T) {
		for _, args := range [][]string{{"blocked", "--queue", "q", "--group", "g"}, {"preview", "--queue", "q", "--group", "g", "--key", terminal[0]}} {
			code, out, errs := e.cli("viewer", "", args...)
			if code != cli.ExitOK {
				t.Fatalf("%q: exit %d: %s", args, code, errs)
			}
			if i := strings.IndexAny(out, "\x1b\x07\r"); i >= 0 {
				t.Errorf("partitionq %s prints a key's control characters raw (%q...): a key can then rewrite the operator's terminal; print them escaped, as %%q does",
					strings.Join(args, " "), out[max(0, i-10):min(len(out), i+20)])
			}
		}
	})

	t.Run("the console never writes a key's control characters to the terminal", func(t *testing.T) {
		m, err := tui.NewModel(e.ctx, e.ac, tui.Options{Queue: "q", Group: "g", ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		m.Update(tea.WindowSizeMsg{Width: 160, Height: 60})
		var wg sync.WaitGroup
		defer wg.Wait() // the refresh ticks left running
		run(m, m.Init(), &wg)
		run(m, func() tea.Msg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")} }, &wg) // the blocked keys tab
		view := m.View()
		for _, k := range terminal[:2] {
			if !strings.Contains(view, "red") && !strings.Contains(view, "owned") {
				t.Fatalf("the blocked keys tab does not show the hostile keys:\n%s", view)
			}
			if strings.Contains(view, k) {
				t.Errorf("the console writes key %q to the terminal as it is: a tenant's key can clear the operator's screen, "+
					"set its title, its clipboard (OSC 52) or forge what it shows; render keys, types, payloads and errors escaped", k)
			}
		}
	})

	// Skip half of the keys through the library, half through the command,
	// with the hostile string as the reason too.
	for i, k := range keys {
		if i%2 == 0 {
			pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("skip of %q", k), func() (bool, error) {
				res, err := e.ac.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: k, HeadID: heads[k], Reason: k, Actor: k})
				if errors.Is(err, partitionq.ErrHeadBusy) {
					return false, nil
				}
				if err == nil && (res.Outcome != partitionq.OutcomeSkipped || res.Key != k) {
					t.Fatalf("skip of %q: %+v", k, res)
				}
				return err == nil, err
			})
			continue
		}
		code, out, errs := e.cli("", "", "skip", "--queue", "q", "--group", "g", "--key", k,
			"--event", fmt.Sprint(heads[k]), "--reason", k, "--actor", k, "--json")
		if code != cli.ExitOK {
			t.Fatalf("partitionq skip --key %q: exit %d\n%s%s", k, code, out, errs)
		}
		var res struct {
			Outcome string `json:"outcome"`
			Key     string `json:"key"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Outcome != "skipped" || res.Key != k {
			t.Fatalf("partitionq skip --key %q printed %s (%v)", k, out, err)
		}
	}
	pgtest.WaitFor(t, 30*time.Second, "every key's waiting event handled", func() (bool, error) {
		for _, k := range keys {
			if !slices.Equal(e.h.got(k), []string{k}) {
				return false, nil
			}
		}
		return true, nil
	})
	e.intact(t)

	dls, err := e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Limit: 1000})
	if err != nil || len(dls) != len(keys) {
		t.Fatalf("dead letters: %d, %v", len(dls), err)
	}
	for _, d := range dls {
		if d.Type != d.Key || string(d.Payload) != "fail:"+d.Key || d.Reason != "skip: "+d.Key || d.Actor != d.Key {
			t.Errorf("dead letter of key %q stored as type %q payload %q reason %q actor %q", d.Key, d.Type, d.Payload, d.Reason, d.Actor)
		}
		if one, err := e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: d.Key}); err != nil || len(one) != 1 {
			t.Errorf("dead letters of key %q: %d, %v", d.Key, len(one), err)
		}
	}
	audit, err := e.ac.Audit(e.ctx, "q", "g", 1000)
	if err != nil || len(audit) != len(keys) {
		t.Fatalf("audit: %d, %v", len(audit), err)
	}
	var audited []string
	for _, a := range audit {
		audited = append(audited, a.Key)
		if a.Reason != a.Key || a.Actor != a.Key || a.Outcome != "skipped" {
			t.Errorf("audit of key %q: %+v", a.Key, a)
		}
	}
	if !sameSet(audited, keys) {
		t.Errorf("audited keys %q, want %q", audited, keys)
	}
	var dlq struct {
		DeadLetters []struct {
			Key     string `json:"key"`
			Type    string `json:"type"`
			Payload string `json:"payload"`
			Reason  string `json:"reason"`
		} `json:"dead_letters"`
	}
	code, out, errs := e.cli("viewer", "", "dlq", "list", "--queue", "q", "--group", "g", "--limit", "1000", "--json")
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &dlq) != nil {
		t.Fatalf("dlq list --json: exit %d: %s%s", code, out, errs)
	}
	var listed []string
	for _, d := range dlq.DeadLetters {
		listed = append(listed, d.Key)
		if d.Type != d.Key || d.Payload != "fail:"+d.Key || d.Reason != "skip: "+d.Key {
			t.Errorf("dlq list --json shows %+v", d)
		}
	}
	if !sameSet(listed, keys) {
		t.Errorf("dlq list --json lists %q, want %q", listed, keys)
	}
}

// run runs a Bubble Tea command the way the runtime would, feeding its
// messages back into m, a few rounds deep. Commands still waiting after a
// few seconds (the refresh ticks) are dropped; wg tells when they are done.
func run(m tea.Model, cmd tea.Cmd, wg *sync.WaitGroup) {
	for depth := 0; cmd != nil && depth < 4; depth++ {
		ch := make(chan tea.Msg, 1)
		wg.Add(1)
		go func() { defer wg.Done(); ch <- cmd() }()
		var msg tea.Msg
		select {
		case msg = <-ch:
		case <-time.After(3 * time.Second):
			return
		}
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch {
				run(m, c, wg)
			}
			return
		}
		if msg == nil {
			return
		}
		_, cmd = m.Update(msg)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

func mapKeys(m map[string]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
