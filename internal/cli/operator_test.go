package cli_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
)

// An incident, as an operator scripts it: a handler fails for one key,
// which blocks; blocked, status and preview show it; retry, skip and
// quarantine unblock it; the dead letters are listed, shown, replayed and
// purged; the audit trail records it all.
func TestWorkExecFailureThenOperatorActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	dir := t.TempDir()
	exec := script(t, dir, `
cat >/dev/null
if [ "$PARTITIONQ_KEY" = bad ]; then
	i=1
	while [ $i -le 25 ]; do echo "err line $i of $PARTITIONQ_EVENT_ID" >&2; i=$((i+1)); done
	exit 3
fi
`)
	in := `{"key":"bad","type":"B","payload":{"n":1}}
{"key":"good","payload":{"n":1}}
{"key":"bad","type":"B","payload":{"n":2}}
{"key":"bad","type":"B","payload":{"n":3}}
{"key":"good","payload":{"n":2}}
`
	if r := h.runStdin(in, "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	var bad []int64
	for _, e := range h.events("q") {
		if e.Key == "bad" {
			bad = append(bad, e.ID)
		}
	}
	w := h.startWork("--exec", exec, "--backoff-min", "1h")

	// blocked: the head, its attempts, the next retry, the waiting events
	// and the last 20 lines of the handler's standard error.
	waitFor(t, 60*time.Second, "key bad blocked", func() bool { _, ok := h.blockedKey("bad"); return ok })
	bk, _ := h.blockedKey("bad")
	head := bk.Head
	if head.EventID != bad[0] || head.Attempts != 1 || bk.Waiting != 2 || head.Type != "B" || head.Payload != `{"n":1}` {
		t.Errorf("blocked key = %+v", bk)
	}
	if head.NextAttempt == nil || time.Until(*head.NextAttempt) < 50*time.Minute {
		t.Errorf("next attempt %v, want about an hour from now (--backoff-min 1h)", head.NextAttempt)
	}
	last := head.LastError
	if !strings.HasPrefix(last, "exit status 3: ") || !strings.Contains(last, fmt.Sprintf("err line 25 of %d", bad[0])) ||
		!strings.Contains(last, "err line 6 of") || strings.Contains(last, "err line 5 of") {
		t.Errorf("last error is not the last 20 lines of standard error: %q", last)
	}
	raw := h.raw(with(qg, "blocked")...)
	pinKeys(t, "blocked", raw, "queue", "group", "blocked_keys")
	pinKeys(t, "blocked key", field(t, raw, "blocked_keys", 0), "key", "slot", "head", "waiting", "blocked_since")
	pinKeys(t, "blocked head", field(t, field(t, raw, "blocked_keys", 0), "head", -1),
		"event_id", "type", "payload", "sent_at", "attempts", "next_attempt", "last_error")
	if out := h.ok(with(qg, "blocked")...); !strings.Contains(out, "LAST ERROR") || !strings.Contains(out, "exit status 3") {
		t.Errorf("blocked table:\n%s", out)
	}

	// status counts the blocked key and the set-aside events of its slot.
	raw = h.raw(with(qg, "status")...)
	pinKeys(t, "status", raw, "queue", "group", "engine", "slot_count", "dead_letters", "at", "slots")
	pinKeys(t, "status slot", field(t, raw, "slots", bk.Slot), "slot", "consumer", "owner", "lag_seconds", "last_seen_seconds",
		"in_batch", "queue_pending", "pending_estimate", "blocked_keys", "set_aside")
	pinKeys(t, "status owner", field(t, field(t, raw, "slots", bk.Slot), "owner", -1), "name", "pid", "addr", "since")
	var st statusOut
	h.json(&st, with(qg, "status")...)
	if s := st.Slots[bk.Slot]; s.BlockedKeys != 1 || s.SetAside != 3 {
		t.Errorf("status of slot %d = %+v, want 1 blocked key and 3 events set aside", bk.Slot, s)
	}
	if out := h.ok(with(qg, "status")...); !strings.Contains(out, "PENDING (est.)") {
		t.Errorf("status table does not label the estimate:\n%s", out)
	}

	// preview: the head, then the waiting events, in order.
	var pv previewOut
	h.json(&pv, with(qg, "preview", "--key", "bad")...)
	if len(pv.Events) != 3 || !pv.Events[0].Head || pv.Events[1].Head ||
		pv.Events[0].EventID != bad[0] || pv.Events[1].EventID != bad[1] || pv.Events[2].EventID != bad[2] {
		t.Errorf("preview = %+v", pv)
	}
	raw = h.raw(with(qg, "preview", "--key", "bad")...)
	pinKeys(t, "preview", raw, "queue", "group", "key", "events")
	pinKeys(t, "preview event", field(t, raw, "events", 0), "event_id", "type", "payload", "sent_at", "head")

	// retry: the head runs again now, and fails a second time.
	var act actionOut
	h.json(&act, with(qg, "retry", "--key", "bad")...)
	if act.Outcome != "retry_scheduled" || act.EventID != bad[0] {
		t.Errorf("retry = %+v", act)
	}
	waitFor(t, 30*time.Second, "a second attempt", func() bool { bk, _ := h.blockedKey("bad"); return bk.Head.Attempts == 2 })

	// skip: the head goes to the dead letters; a second skip of it is a no-op.
	head1 := strconv.FormatInt(bad[0], 10)
	out := h.ok(with(qg, "skip", "--key", "bad", "--event", head1, "--reason", "corrupt", "--actor", "alice")...)
	if !strings.Contains(out, "skipped: event "+head1) || !strings.Contains(out, fmt.Sprintf("next to run: %d, %d", bad[1], bad[2])) {
		t.Errorf("skip printed %q", out)
	}
	raw = h.raw(with(qg, "skip", "--key", "bad", "--event", head1)...)
	pinKeys(t, "skip", raw, "action", "outcome", "queue", "group", "key", "slot", "event_id", "count", "next_event_ids")
	if err := jsonUnmarshal(raw, &act); err != nil || act.Outcome != "already_resolved" || act.Action != "skip" {
		t.Errorf("second skip = %+v (%v)", act, err)
	}
	if out := h.ok(with(qg, "skip", "--key", "bad", "--event", head1)...); !strings.Contains(out, "already resolved") {
		t.Errorf("third skip printed %q", out)
	}

	// The next event fails in its turn; quarantine takes it and the one behind.
	waitFor(t, 30*time.Second, "the second event blocked", func() bool {
		bk, ok := h.blockedKey("bad")
		return ok && bk.Head.EventID == bad[1] && bk.Head.Attempts >= 1
	})
	h.json(&act, with(qg, "quarantine", "--key", "bad", "--reason", "tenant gone")...)
	if act.Outcome != "quarantined" || act.Count != 2 {
		t.Errorf("quarantine = %+v", act)
	}
	if _, ok := h.blockedKey("bad"); ok {
		t.Error("key bad is still blocked after quarantine")
	}
	h.fails(cli.ExitFailed, []string{"key is not blocked"}, with(qg, "skip", "--key", "bad")...)
	h.fails(cli.ExitFailed, []string{"key is not blocked"}, with(qg, "preview", "--key", "bad")...)

	// dlq: list, show, replay (once), purge.
	var dl dlqListOut
	h.json(&dl, with(qg, "dlq", "list")...)
	if len(dl.DeadLetters) != 3 {
		t.Fatalf("dlq list = %+v", dl)
	}
	d0 := dl.DeadLetters[0]
	if d0.EventID != bad[0] || d0.Reason != "skip: corrupt" || d0.Actor != "alice" || d0.Attempts != 2 ||
		!strings.HasPrefix(d0.LastError, "exit status 3") || d0.ReplayedAt != nil {
		t.Errorf("first dead letter = %+v", d0)
	}
	if r := dl.DeadLetters[2].Reason; r != "quarantine: tenant gone" {
		t.Errorf("quarantined dead letter reason %q", r)
	}
	raw = h.raw(with(qg, "dlq", "list")...)
	pinKeys(t, "dlq list", raw, "queue", "group", "dead_letters")
	dlKeys := []string{"id", "event_id", "slot", "key", "type", "payload", "sent_at", "attempts", "last_error", "reason",
		"actor", "db_role", "dead_at", "replayed_at", "replay_event_id"}
	pinKeys(t, "dead letter", field(t, raw, "dead_letters", 0), dlKeys...)
	id0 := strconv.FormatInt(d0.ID, 10)
	pinKeys(t, "dlq show", h.raw(with(qg, "dlq", "show", id0)...), dlKeys...)
	if out := h.ok(with(qg, "dlq", "show", id0)...); !strings.Contains(out, "payload:\n  {\"n\":1}") || !strings.Contains(out, "reason:") {
		t.Errorf("dlq show:\n%s", out)
	}
	if out := h.ok(with(qg, "dlq", "list")...); !strings.Contains(out, "skip: corrupt") {
		t.Errorf("dlq list table:\n%s", out)
	}
	h.fails(cli.ExitFailed, []string{"no such dead letter 999999"}, with(qg, "dlq", "show", "999999")...)

	var rp replayOut
	h.json(&rp, with(qg, "dlq", "replay", id0)...)
	pinKeys(t, "dlq replay", h.raw(with(qg, "dlq", "replay", id0)...), "id", "outcome", "new_event_id")
	if rp.Outcome != "replayed" || rp.NewEventID <= bad[2] {
		t.Errorf("replay = %+v", rp)
	}
	if out := h.ok(with(qg, "dlq", "replay", id0)...); !strings.Contains(out, fmt.Sprintf("already replayed: dead letter %s was sent again before as event %d", id0, rp.NewEventID)) {
		t.Errorf("second replay printed %q", out)
	}

	// audit: every action, newest first, with its actor.
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action+":"+e.Outcome+":"+e.Actor)
	}
	want := []string{"replay:already_replayed:tester", "replay:already_replayed:tester", "replay:replayed:tester",
		"quarantine:quarantined:tester", "skip:already_resolved:tester", "skip:already_resolved:tester",
		"skip:skipped:alice", "retry:retry_scheduled:tester"}
	if !slices.Equal(got, want) {
		t.Errorf("audit trail\n got %v\nwant %v", got, want)
	}
	raw = h.raw(with(qg, "audit")...)
	pinKeys(t, "audit", raw, "queue", "group", "entries")
	pinKeys(t, "audit entry", field(t, raw, "entries", 0), "id", "at", "db_role", "actor", "action", "key", "event_id", "reason", "outcome")

	var pg purgeOut
	h.json(&pg, with(qg, "dlq", "purge", "--id", strconv.FormatInt(dl.DeadLetters[1].ID, 10))...)
	if pg.Purged != 1 {
		t.Errorf("purge --id = %+v", pg)
	}
	if out := h.ok(with(qg, "dlq", "purge", "--all", "--before", "1h")...); out != "purged 0 dead letters\n" {
		t.Errorf("purge --all --before 1h (all died in the last hour) printed %q", out)
	}
	h.json(&pg, with(qg, "dlq", "purge", "--all")...)
	pinKeys(t, "dlq purge", h.raw(with(qg, "dlq", "purge", "--all")...), "purged")
	if pg.Purged != 2 {
		t.Errorf("purge --all = %+v", pg)
	}
	if out := h.ok(with(qg, "dlq", "list")...); out != "no dead letters\n" {
		t.Errorf("dlq list after purge:\n%s", out)
	}
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
}
