package cli_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
)

// deadLetters sets up q/g with 2 slots and has a library worker
// dead-letter every event typed "Bad" at once (last error "corrupt
// <key>-<payload>"): keys "a" (payloads 1 to 4, all bad) and "b" (1 to 4,
// the even ones bad). It returns once the 6 dead letters exist.
func (h *harness) deadLetters() {
	h.t.Helper()
	h.setup(2)
	c := h.client()
	var ended atomic.Int64
	w, err := c.NewWorker(h.t.Context(), partitionq.WorkerConfig{
		Queue: "q", Group: "g", Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond},
		Identity: "w-test",
		Handler: partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
			ended.Add(1)
			if ev.Type == "Bad" {
				return partitionq.DeadLetterNow(fmt.Errorf("corrupt %s-%s", ev.Key, ev.Payload))
			}
			return nil
		}),
		Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
	var msgs []partitionq.Message
	for i := 1; i <= 4; i++ {
		msgs = append(msgs, partitionq.Message{Key: "a", Type: "Bad", Payload: []byte(strconv.Itoa(i))})
		typ := "Good"
		if i%2 == 0 {
			typ = "Bad"
		}
		msgs = append(msgs, partitionq.Message{Key: "b", Type: typ, Payload: []byte(strconv.Itoa(i))})
	}
	if _, err := c.SendBatch(h.t.Context(), "q", msgs); err != nil {
		h.t.Fatal(err)
	}
	waitFor(h.t, 30*time.Second, "8 events ended, 6 of them dead letters", func() bool {
		st, err := c.Status(h.t.Context(), "q", "g")
		return err == nil && ended.Load() == 8 && st.DeadLetters == 6
	})
	if err := w.Stop(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
}

func TestDLQFiltersAndBulk(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.deadLetters()
	list := func(args ...string) dlqListOut {
		t.Helper()
		var out dlqListOut
		h.json(&out, with(qg, append([]string{"dlq", "list"}, args...)...)...)
		return out
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--key", "b"}, 2},
		{[]string{"--type", "Bad"}, 6},
		{[]string{"--error", "CORRUPT A-"}, 4},
		{[]string{"--dead-reason", "handler"}, 6},
		{[]string{"--dead-reason", "skip"}, 0},
		{[]string{"--since", "1h"}, 6},
		{[]string{"--before", "1h"}, 0},
		{[]string{"--filter", `key=a error="a-3"`}, 1},
		{[]string{"--filter", "key=a", "--type", "Bad", "--pending"}, 4},
	} {
		if got := len(list(c.args...).DeadLetters); got != c.want {
			t.Errorf("dlq list %s: %d dead letters, want %d", strings.Join(c.args, " "), got, c.want)
		}
	}
	h.fails(cli.ExitUsage, []string{`unknown filter field "colour"`}, with(qg, "dlq", "list", "--filter", "colour=red")...)
	h.fails(cli.ExitUsage, []string{"invalid --since"}, with(qg, "dlq", "list", "--since", "yesterday")...)
	h.fails(cli.ExitUsage, []string{"is not before --before"}, with(qg, "dlq", "list", "--since", "1h", "--before", "2h")...)
	h.fails(cli.ExitUsage, []string{"say which dead letters to replay"}, with(qg, "dlq", "replay")...)
	h.fails(cli.ExitUsage, []string{"say which dead letters to purge"}, with(qg, "dlq", "purge")...)

	// A dry run of a's replay: event order, nothing changed.
	out := h.ok(with(qg, "dlq", "replay", "--key", "a", "--dry-run")...)
	if !strings.HasPrefix(out, `dry run: would replay 4 dead letters (key=a) in this order; nothing changed`) || strings.Count(out, "would replay") != 5 {
		t.Errorf("dlq replay --dry-run printed:\n%s", out)
	}
	if n := len(list("--pending").DeadLetters); n != 6 {
		t.Fatalf("after the dry run %d are pending, want 6", n)
	}
	h.fails(cli.ExitFailed, []string{"too many dead letters match: 4 match, more than the limit of 3", "--max"},
		with(qg, "dlq", "replay", "--key", "a", "--max", "3")...)

	// Replay them for real, with JSON.
	var rp bulkOut
	h.json(&rp, with(qg, "dlq", "replay", "--key", "a", "--reason", "fixed")...)
	if rp.Action != "replay" || rp.DryRun || rp.Filter != "key=a" || rp.Replayed == nil || *rp.Replayed != 4 || *rp.AlreadyReplayed != 0 ||
		rp.Purged != nil || rp.AuditID == 0 || len(rp.DeadLetters) != 4 {
		t.Fatalf("dlq replay --key a --json = %+v", rp)
	}
	var last int64
	for _, d := range rp.DeadLetters {
		if d.Outcome != "replayed" || d.NewEventID == nil || *d.NewEventID <= last {
			t.Fatalf("replayed out of order: %+v", rp.DeadLetters)
		}
		last = *d.NewEventID
	}
	// Their replays are in the queue in a's original order: 1 2 3 4.
	var seq []string
	for _, ev := range h.events("q") {
		if ev.ID > rp.DeadLetters[0].EventID && ev.Key == "a" && ev.ID >= *rp.DeadLetters[0].NewEventID {
			seq = append(seq, ev.Data)
		}
	}
	if strings.Join(seq, " ") != "1 2 3 4" {
		t.Errorf("a's replays in the queue: %v, want 1 2 3 4", seq)
	}
	// A list of ids, one already replayed: it is left as it was.
	b := list("--key", "b").DeadLetters
	ids := []string{strconv.FormatInt(rp.DeadLetters[0].ID, 10), strconv.FormatInt(b[0].ID, 10)}
	out = h.ok(with(qg, append([]string{"dlq", "replay"}, ids...)...)...)
	if !strings.HasPrefix(out, "replayed 1 dead letter (id="+strings.Join(ids, ",")+"), in event order; 1 already replayed, left as they were\naudit entry ") {
		t.Errorf("dlq replay %v printed:\n%s", ids, out)
	}
	raw := h.raw(with(qg, "dlq", "replay", "--key", "b", "--dry-run")...)
	pinKeys(t, "dlq replay (bulk)", raw, "action", "dry_run", "queue", "group", "filter", "replayed", "already_replayed", "audit_id", "dead_letters", "unmatched_ids")
	// An id the group does not have is said, not skipped in silence.
	var un bulkOut
	h.json(&un, with(qg, "dlq", "replay", ids[1], "999999", "--dry-run")...)
	if len(un.UnmatchedIDs) != 1 || un.UnmatchedIDs[0] != 999999 || *un.Replayed != 0 || *un.AlreadyReplayed != 1 {
		t.Errorf("replay of a replayed id and a missing one = %+v", un)
	}
	if out := h.ok(with(qg, "dlq", "purge", "--id", "999999")...); !strings.Contains(out, "purged 0 dead letters\nnot selected: 999999 (no such dead letter in this group") {
		t.Errorf("purge of a missing id printed:\n%s", out)
	}
	pinKeys(t, "dlq replay (bulk) item", field(t, raw, "dead_letters", 0), "id", "event_id", "key", "type", "outcome", "new_event_id")

	// Purge b's by error text: dry run, then for real.
	out = h.ok(with(qg, "dlq", "purge", "--error", "b-", "--dry-run")...)
	if !strings.HasPrefix(out, `dry run: would purge 2 dead letters (error=b-); nothing changed`) || strings.Count(out, "would purge") != 3 || strings.Contains(out, "NEW EVENT") {
		t.Errorf("dlq purge --dry-run printed:\n%s", out)
	}
	var pg bulkOut
	h.json(&pg, with(qg, "dlq", "purge", "--error", "b-", "--reason", "tenant b gone")...)
	if pg.Purged == nil || *pg.Purged != 2 || pg.Replayed != nil || pg.AuditID == 0 {
		t.Fatalf("dlq purge --error b- = %+v", pg)
	}
	if n := len(list().DeadLetters); n != 4 {
		t.Fatalf("%d dead letters left, want a's 4", n)
	}

	// The audit trail: one entry per bulk action, with its count.
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action+"|"+e.Key+"|"+e.Outcome)
	}
	want := []string{
		`purge|b|purged 2 (error="b-")`,
		`purge||purged 0 (ids=999999)`,
		`replay|b|replayed 1 (already_replayed 1, ids=` + strings.Join(ids, ",") + `)`,
		`replay|a|replayed 4 (key="a")`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit trail:\n got %q\nwant %q", got, want)
	}
}

func TestGroupsAndKeyCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.deadLetters()
	h.ok("setup", "--queue", "other", "--group", "billing", "--slots", "3")

	var gs groupsOut
	h.json(&gs, "groups")
	if len(gs.Groups) != 2 {
		t.Fatalf("groups = %+v", gs)
	}
	o, g := gs.Groups[0], gs.Groups[1]
	if o.Queue != "other" || o.Group != "billing" || o.SlotCount != 3 || o.OwnedSlots != 0 || len(o.Workers) != 0 || o.DeadLetters != 0 {
		t.Errorf("other/billing = %+v", o)
	}
	if g.Queue != "q" || g.Group != "g" || g.SlotCount != 2 || g.DeadLetters != 6 || g.BlockedKeys != 0 || g.Broken != "" {
		t.Errorf("q/g = %+v", g)
	}
	raw := h.raw("groups")
	pinKeys(t, "groups", raw, "groups")
	pinKeys(t, "group", field(t, raw, "groups", 0), "queue", "group", "slot_count", "generation", "resize", "owned_slots", "workers", "backlog", "lag_seconds",
		"set_aside", "blocked_keys", "draining_keys", "dead_letters", "broken", "dropped")
	out := h.ok("groups")
	for _, w := range []string{"QUEUE", "DEAD LETTERS", "billing", "0/3"} {
		if !strings.Contains(out, w) {
			t.Errorf("groups table lacks %q:\n%s", w, out)
		}
	}
	h.json(&gs, "groups", "--queue", "other")
	if len(gs.Groups) != 1 || gs.Groups[0].Group != "billing" {
		t.Errorf("groups --queue other = %+v", gs)
	}

	var k keyOut
	h.json(&k, with(qg, "key", "--key", "b")...)
	if k.Key != "b" || k.State != "flowing" || k.Blocked != nil || len(k.SetAside) != 0 || k.DeadLetterCount != 2 ||
		k.PendingDeadLetters != 2 || len(k.DeadLetters) != 2 || k.DeadLetters[0].Payload != "4" || k.Owner != nil {
		t.Errorf("key b = %+v", k)
	}
	raw = h.raw(with(qg, "key", "--key", "b")...)
	pinKeys(t, "key", raw, "queue", "group", "key", "slot", "owner", "state", "blocked", "set_aside", "dead_letters",
		"dead_letter_count", "pending_dead_letters", "dedup_window_seconds", "dedup_hits", "duplicates")
	out = h.ok(with(qg, "key", "--key", "b")...)
	for _, w := range []string{"state:  flowing", "dead letters: 2 (2 not replayed), newest first (2 shown):", "corrupt b-4"} {
		if !strings.Contains(out, w) {
			t.Errorf("key table lacks %q:\n%s", w, out)
		}
	}
	h.fails(cli.ExitUsage, []string{"missing --key"}, with(qg, "key")...)
	h.fails(cli.ExitFailed, []string{"no such consumer group"}, "key", "--queue", "q", "--group", "nosuch", "--key", "b")

	// A queue that does not exist has no groups: not an error.
	h.json(&gs, "groups", "--queue", "nosuch")
	if len(gs.Groups) != 0 {
		t.Errorf("groups --queue nosuch = %+v, want none", gs)
	}
	if out := h.ok("groups", "--queue", "nosuch"); !strings.Contains(out, "no consumer groups") {
		t.Errorf("groups --queue nosuch says %q", out)
	}
	// But a group dropped with its queue (the engine's drop_queue) whose
	// dead letters wait is listed, dropped, as in the list of every group.
	h.ok(with(qg, "drop-group", "--force", "--reason", "moving")...)
	conn, err := pgx.Connect(t.Context(), h.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), h.db.SQL(`select pgq.drop_queue('q')`)); err != nil {
		t.Fatal(err)
	}
	h.json(&gs, "groups", "--queue", "q")
	if len(gs.Groups) != 1 || gs.Groups[0].Group != "g" || !gs.Groups[0].Dropped || gs.Groups[0].DeadLetters != 6 {
		t.Errorf("groups --queue q after its queue was dropped = %+v, want g dropped with 6 dead letters", gs.Groups)
	}
}
