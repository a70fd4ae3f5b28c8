package cli_test

import (
	"encoding/json"
	"fmt"
	"os/user"
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
	pinKeys(t, "blocked key", field(t, raw, "blocked_keys", 0), "key", "slot", "state", "head", "waiting", "blocked_since")
	pinKeys(t, "blocked head", field(t, field(t, raw, "blocked_keys", 0), "head", -1),
		"event_id", "type", "payload", "sent_at", "attempts", "next_attempt", "last_error")
	if out := h.ok(with(qg, "blocked")...); !strings.Contains(out, "LAST ERROR") || !strings.Contains(out, "exit status 3") {
		t.Errorf("blocked table:\n%s", out)
	}

	// status counts the blocked key and the set-aside events of its slot.
	raw = h.raw(with(qg, "status")...)
	pinKeys(t, "status", raw, "queue", "group", "engine", "slot_count", "generation", "resize", "dead_letters", "pending", "pending_max", "rates", "ticks", "at", "slots", "workers")
	pinKeys(t, "status ticks", field(t, raw, "ticks", -1), "age_seconds", "unticked", "stalled", "warning")
	pinKeys(t, "status slot", field(t, raw, "slots", bk.Slot), "slot", "slots", "resize", "consumer", "owner", "moving_to", "lag_seconds", "last_seen_seconds",
		"in_batch", "pending", "pending_max", "oldest_seconds", "since_finish_seconds", "rates", "queue_pending", "blocked_keys", "draining_keys", "set_aside")
	pinKeys(t, "status rates", field(t, field(t, raw, "slots", bk.Slot), "rates", -1), "handled_10s", "failed_10s", "handled_1m", "failed_1m")
	pinKeys(t, "status owner", field(t, field(t, raw, "slots", bk.Slot), "owner", -1), "name", "host", "pid", "backend_pid", "addr", "since", "epoch", "lease_left_seconds", "member")
	pinKeys(t, "status worker", field(t, raw, "workers", 0), "name", "host", "pid", "member", "pinned", "slots", "old_slots", "share")
	var st statusOut
	h.json(&st, with(qg, "status")...)
	if s := st.Slots[bk.Slot]; s.BlockedKeys != 1 || s.SetAside != 3 || s.Pending != 0 || s.SinceFinishSeconds == nil {
		t.Errorf("status of slot %d = %+v, want 1 blocked key, 3 events set aside, none pending, a finished batch", bk.Slot, s)
	}
	if out := h.ok(with(qg, "status")...); !strings.Contains(out, "HANDLED/S 10S 1M") || !strings.Contains(out, "\npending: 0; handled/s: ") {
		t.Errorf("status table has no rates or no exact pending:\n%s", out)
	}

	// preview: the head, then the waiting events, in order.
	var pv previewOut
	h.json(&pv, with(qg, "preview", "--key", "bad")...)
	if len(pv.Events) != 3 || !pv.Events[0].Head || pv.Events[1].Head ||
		pv.Events[0].EventID != bad[0] || pv.Events[1].EventID != bad[1] || pv.Events[2].EventID != bad[2] {
		t.Errorf("preview = %+v", pv)
	}
	raw = h.raw(with(qg, "preview", "--key", "bad")...)
	pinKeys(t, "preview", raw, "queue", "group", "key", "state", "events")
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
	raw = h.raw(with(qg, "skip", "--key", "bad", "--event", head1, "--reason", "again")...)
	pinKeys(t, "skip", raw, "action", "outcome", "queue", "group", "key", "slot", "event_id", "count", "next_event_ids", "resolved")
	pinKeys(t, "skip resolved", field(t, raw, "resolved", -1), "how", "reason", "actor", "db_role", "at", "dead_letter_id")
	if err := jsonUnmarshal(raw, &act); err != nil || act.Outcome != "already_resolved" || act.Action != "skip" {
		t.Errorf("second skip = %+v (%v)", act, err)
	}
	if out := h.ok(with(qg, "skip", "--key", "bad", "--event", head1, "--reason", "again")...); !strings.Contains(out,
		fmt.Sprintf(`already resolved: event %s of key "bad" was skipped by "alice" (role "postgres") at `, head1)) ||
		!strings.Contains(out, `reason "skip: corrupt"); nothing changed`) {
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
	h.fails(cli.ExitFailed, []string{`partitionq: key "bad" is not blocked: nothing of it is set aside, so skip has nothing to act on; its events run as they arrive (partitionq key --queue q --group g --key "bad" shows its state; partitionq blocked lists the blocked keys)`},
		with(qg, "skip", "--key", "bad", "--reason", "late")...)
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
	pinKeys(t, "dlq purge", h.raw(with(qg, "dlq", "purge", "--all")...), "action", "dry_run", "queue", "group", "filter", "purged", "audit_id", "dead_letters", "unmatched_ids")
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

// stuckKey leaves key "bad" blocked on its first event ({"n":1}, which
// fails), with {"n":2} and {"n":3} waiting, and no worker running: the
// state an operator finds after a skip with the workers down.
func (h *harness) stuckKey(t *testing.T, key string) []int64 {
	t.Helper()
	h.setup(2)
	exec := script(t, t.TempDir(), `
payload=$(cat)
case "$payload" in *'"n":1'*) echo "cannot parse: corrupt file" >&2; exit 3;; esac
`)
	var in strings.Builder
	for n := 1; n <= 3; n++ {
		b, _ := json.Marshal(map[string]any{"key": key, "payload": map[string]int{"n": n}})
		in.Write(append(b, '\n'))
	}
	if r := h.runStdin(in.String(), "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	var ids []int64
	for _, e := range h.events("q") {
		ids = append(ids, e.ID)
	}
	w := h.startWork("--exec", exec, "--backoff-min", "1h")
	waitFor(t, 60*time.Second, "the key blocked with 2 events waiting", func() bool {
		bk, ok := h.blockedKey(key)
		return ok && bk.Waiting == 2 && bk.State == "blocked"
	})
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	return ids
}

// A second `skip --key K` moved a healthy event to
// the dead letters. After a skip the key is draining: blocked, its JSON
// and preview say so, and every action without --event refuses it, saying
// how to act anyway.
func TestSkipTwiceNeverDeadLettersAHealthyEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := h.stuckKey(t, "bad")
	out := h.ok(with(qg, "skip", "--key", "bad", "--reason", "corrupt file")...)
	if !strings.Contains(out, fmt.Sprintf(`skipped: event %d of key "bad"`, ids[0])) {
		t.Fatalf("first skip printed %q", out)
	}
	bk, ok := h.blockedKey("bad")
	if !ok || bk.State != "draining" || bk.Head.EventID != ids[1] || bk.Head.Attempts != 0 || bk.Head.LastError != "" {
		t.Fatalf("after the skip: %+v (listed %v), want draining on event %d", bk, ok, ids[1])
	}
	if out := h.ok(with(qg, "blocked")...); !strings.Contains(out, "draining") || !strings.Contains(out, "never failed") {
		t.Errorf("blocked does not show the key as draining:\n%s", out)
	}
	var pv previewOut
	h.json(&pv, with(qg, "preview", "--key", "bad")...)
	if pv.State != "draining" || len(pv.Events) != 2 || pv.Events[0].EventID != ids[1] {
		t.Errorf("preview = %+v", pv)
	}
	if out := h.ok(with(qg, "preview", "--key", "bad")...); !strings.Contains(out, "draining") || !strings.Contains(out, "head, never failed") {
		t.Errorf("preview does not say the key drains:\n%s", out)
	}
	var st statusOut
	h.json(&st, with(qg, "status")...)
	if s := st.Slots[bk.Slot]; s.BlockedKeys != 0 || s.DrainingKeys != 1 {
		t.Errorf("status of slot %d = %+v, want 0 blocked and 1 draining key", bk.Slot, s)
	}

	next := strconv.FormatInt(ids[1], 10)
	for _, args := range [][]string{
		{"skip", "--key", "bad", "--reason", "corrupt file"},
		{"retry", "--key", "bad"},
		{"quarantine", "--key", "bad", "--reason", "tenant gone"},
	} {
		h.fails(cli.ExitFailed, []string{`key "bad" is draining, not blocked`, "has never failed", args[0] + " changed nothing", "pass --event " + next}, with(qg, args...)...)
	}
	var dl dlqListOut
	h.json(&dl, with(qg, "dlq", "list")...)
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].EventID != ids[0] {
		t.Fatalf("dead letters = %+v, want only the skipped event %d", dl.DeadLetters, ids[0])
	}

	// Named, it goes through: the operator chose that event.
	var act actionOut
	h.json(&act, with(qg, "skip", "--key", "bad", "--event", next, "--reason", "stale too")...)
	if act.Outcome != "skipped" || act.EventID != ids[1] {
		t.Errorf("skip --event %s = %+v", next, act)
	}
}

// After drop-group --force, the group's dead
// letters and audit trail are still listed, shown and replayed, without
// setup (which would register consumers that hold back table rotation).
func TestDroppedGroupDeadLettersStayReachable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := h.stuckKey(t, "bad")
	h.ok(with(qg, "skip", "--key", "bad", "--event", strconv.FormatInt(ids[0], 10), "--reason", "corrupt file")...)
	h.fails(cli.ExitFailed, []string{`partitionq: group "g" has 2 events set aside (blocked keys and their waiting events): nothing was dropped; resolve them first (partitionq blocked --queue q --group g, then skip or quarantine), or add --force to drop them with the group` + "\n"},
		with(qg, "drop-group", "--reason", "moving to 8 slots")...)
	h.ok(with(qg, "drop-group", "--force", "--reason", "moving to 8 slots")...)
	if out := h.ok(with(qg, "dlq", "replay", "--all", "--dry-run")...); !strings.HasPrefix(out, "dry run: would replay 1 dead letter in this order; nothing changed\n") {
		t.Errorf("a dry run of one dead letter says %q", out)
	}
	// groups lists it, dropped, with its dead letter.
	var gs groupsOut
	h.json(&gs, "groups")
	if len(gs.Groups) != 1 || gs.Groups[0].Group != "g" || !gs.Groups[0].Dropped || gs.Groups[0].DeadLetters != 1 || gs.Groups[0].SlotCount != 0 {
		t.Errorf("groups after the drop = %+v, want g dropped with 1 dead letter", gs.Groups)
	}
	if out := h.ok("groups"); !strings.Contains(out, `group "g" on queue "q" was dropped and has 1 dead letter not yet replayed: partitionq dlq list --queue q --group g (then dlq replay or dlq purge)`) {
		t.Errorf("groups table after the drop:\n%s", out)
	}
	h.fails(cli.ExitFailed, []string{`no such consumer group "g"`}, with(qg, "status")...)

	var dl dlqListOut
	h.json(&dl, with(qg, "dlq", "list")...)
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].EventID != ids[0] {
		t.Fatalf("dlq list of the dropped group = %+v", dl)
	}
	id := strconv.FormatInt(dl.DeadLetters[0].ID, 10)
	if out := h.ok(with(qg, "dlq", "show", id)...); !strings.Contains(out, "skip: corrupt file") {
		t.Errorf("dlq show of the dropped group:\n%s", out)
	}
	var rp replayOut
	h.json(&rp, with(qg, "dlq", "replay", id, "--reason", "file fixed")...)
	if rp.Outcome != "replayed" || rp.NewEventID <= ids[2] {
		t.Errorf("dlq replay of the dropped group = %+v", rp)
	}
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action)
	}
	if !slices.Equal(got, []string{"replay", "drop_group", "skip"}) {
		t.Errorf("audit of the dropped group: %v", got)
	}
	// None of it set the group up again.
	h.fails(cli.ExitFailed, []string{`no such consumer group "g"`}, with(qg, "status")...)
}

// The one escaping rule: a key with a newline
// (and a bidi override) is shown the same way in every table and
// sentence, on one line (multi\nline\u{202e}key), exactly in JSON, and
// never raw; a 100,000-character actor is clipped in the audit table.
func TestUntrustedTextShownByOneRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := "multi\nline\u202ekey"
	shown := `multi\nline\u{202e}key`
	ids := h.stuckKey(t, key)

	blocked := h.ok(with(qg, "blocked")...)
	if lines := strings.Split(strings.TrimRight(blocked, "\n"), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], shown+"  ") {
		t.Errorf("blocked: want a header and one row starting with %s:\n%s", shown, blocked)
	}
	preview := h.ok(with(qg, "preview", "--key", key)...)
	if !strings.HasPrefix(preview, `key "`+shown+`" runs next`) {
		t.Errorf("preview header:\n%s", preview)
	}
	for what, out := range map[string]string{"blocked": blocked, "preview": preview} {
		if strings.ContainsAny(out, "\u202e\r") || strings.Contains(out, "multi\n") {
			t.Errorf("%s writes the key raw:\n%q", what, out)
		}
	}
	raw := h.ok(with(qg, "blocked", "--json")...)
	if strings.Contains(raw, "\u202e") || !strings.Contains(raw, `multi\nline\u202ekey`) {
		t.Errorf("blocked --json writes the key's characters raw, or not as JSON escapes:\n%s", raw)
	}
	var bo blockedOut
	if err := json.Unmarshal([]byte(raw), &bo); err != nil || len(bo.BlockedKeys) != 1 || bo.BlockedKeys[0].Key != key {
		t.Fatalf("blocked --json does not decode to the exact key: %+v, %v", bo, err)
	}

	actor := "ops-" + strings.Repeat("a", 100_000) + "-bot"
	out := h.ok(with(qg, "skip", "--key", key, "--event", strconv.FormatInt(ids[0], 10), "--reason", "corrupt", "--actor", actor)...)
	if !strings.HasPrefix(out, fmt.Sprintf(`skipped: event %d of key "%s"`, ids[0], shown)) {
		t.Errorf("skip printed %q", out)
	}
	audit := h.ok(with(qg, "audit")...)
	for _, l := range strings.Split(audit, "\n") {
		if len(l) > 400 {
			t.Fatalf("audit prints a line of %d bytes: the actor is not clipped", len(l))
		}
	}
	if !strings.Contains(audit, "ops-") || !strings.Contains(audit, "…") || !strings.Contains(audit, "-bot") || !strings.Contains(audit, shown) {
		t.Errorf("audit does not show the clipped actor's two ends and the key:\n%s", audit)
	}
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	if len(au.Entries) != 1 || au.Entries[0].Actor != actor || au.Entries[0].Key != key {
		t.Errorf("audit --json does not carry the whole actor and the exact key")
	}
}

// The actor of an action defaults to $USER, and to the OS user when $USER
// is unset (it was recorded empty).
func TestActorDefaultsToTheOSUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	delete(h.env, "USER")
	h.ok(with(qg, "dlq", "purge", "--all", "--reason", "spring cleaning")...)
	u, err := user.Current()
	if err != nil {
		t.Skipf("no OS user to compare with: %v", err)
	}
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	if len(au.Entries) != 1 || au.Entries[0].Actor != u.Username || u.Username == "" {
		t.Fatalf("audit = %+v, want the OS user %q as the actor", au.Entries, u.Username)
	}
}

// Errors name the flag, never the library's Go field.
func TestLibraryErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(qg, "work", "--exec", "true", "--max-attempts", "-5"), "invalid --max-attempts -5: it is negative"},
		{with(qg, "work", "--exec", "true", "--concurrency", "-3"), "invalid --concurrency -3"},
		{with(qg, "work", "--exec", "true", "--drain-concurrency", "300"), "invalid --drain-concurrency 300"},
		{with(qg, "work", "--exec", "true", "--backoff-min", "2s", "--backoff-max", "1s"), "invalid --backoff-max 1s: it is less than the minimum (2s): give a positive duration, at least --backoff-min"},
		{with(qg, "setup", "--slots", "1", "--tick-max-lag", "-1s"), "invalid --tick-max-lag -1s"},
	} {
		r := h.fails(cli.ExitUsage, []string{c.want}, c.args...)
		for _, gofield := range []string{"WorkerConfig", "GroupSpec", "Options.", "Client."} {
			if strings.Contains(r.stderr, gofield) {
				t.Errorf("partitionq %s names a Go field (%s): %s", strings.Join(c.args, " "), gofield, r.stderr)
			}
		}
	}
}

// Issue 28: an action whose --event is not the key's head fails (1),
// names the real head, and records nothing, whatever the event is (one
// waiting behind the head, one of another key, one not handled yet, one
// that never existed); "already resolved" is said only of an event that
// was, with how and by whom.
func TestActionsTellTheTruth(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := h.stuckKey(t, "bad")
	head, waiting := strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1], 10)
	h.ok("send", "--queue", "q", "--key", "good", "--payload", "x")
	good := strconv.FormatInt(h.events("q")[3].ID, 10)
	w := h.startWork("--exec", "true", "--backoff-min", "1h")
	waitFor(t, 60*time.Second, "the good key's event handled", func() bool {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		return st.Pending == 0
	})
	if r := w.stop(t); r.code != cli.ExitOK {
		t.Fatal(r)
	}
	h.ok("send", "--queue", "q", "--key", "fresh", "--payload", "y") // no worker runs: not handled yet
	fresh := strconv.FormatInt(h.events("q")[4].ID, 10)

	blockedHead := "the key's head is event " + head + " (blocked); to skip its head, pass --event " + head
	for _, c := range []struct {
		key, event, why, next string
	}{
		{"bad", waiting, "event " + waiting + " waits behind the head", blockedHead},
		{"bad", "99999", "the queue has no event 99999", blockedHead},
		{"bad", good, "event " + good + " is an event of another key", blockedHead},
		{"fresh", fresh, "event " + fresh + " has not been handled yet (it is in the stream, after its slot's position)",
			"the key is not blocked (nothing of it is set aside); nothing needs doing: its events run as they arrive (partitionq key shows its state)"},
	} {
		h.fails(cli.ExitFailed, []string{fmt.Sprintf(`partitionq: event %s is not the head of key %q, and was never resolved: %s; skip changed nothing and recorded nothing; %s`+"\n",
			c.event, c.key, c.why, c.next)}, with(qg, "skip", "--key", c.key, "--event", c.event, "--reason", "wrong")...)
	}
	h.fails(cli.ExitFailed, []string{"event " + waiting + " is not the head", "retry changed nothing"}, with(qg, "retry", "--key", "bad", "--event", waiting)...)
	h.fails(cli.ExitFailed, []string{"event " + waiting + " is not the head", "quarantine changed nothing"},
		with(qg, "quarantine", "--key", "bad", "--event", waiting, "--reason", "wrong")...)
	var au auditOut
	h.json(&au, with(qg, "audit")...)
	if len(au.Entries) != 0 {
		t.Fatalf("refused actions were recorded: %+v", au.Entries)
	}
	if bk, ok := h.blockedKey("bad"); !ok || bk.Head.EventID != ids[0] || bk.Waiting != 2 {
		t.Fatalf("the key changed: %+v %v", bk, ok)
	}

	// The good key's event was handled: already resolved, said so, recorded.
	out := h.ok(with(qg, "skip", "--key", "good", "--event", good, "--reason", "late")...)
	if want := "already resolved: event " + good + ` of key "good" was handled by a worker; nothing changed`; !strings.Contains(out, want) {
		t.Errorf("skip of a handled event printed %q, want %q", out, want)
	}
	var act actionOut
	h.json(&act, with(qg, "skip", "--key", "good", "--event", good, "--reason", "late")...)
	if act.Outcome != "already_resolved" || act.Resolved == nil || act.Resolved.How != "handled" || act.Resolved.At != nil {
		t.Errorf("skip --json of a handled event = %+v", act)
	}
	// The head, skipped by alice, then named again.
	h.ok(with(qg, "skip", "--key", "bad", "--event", head, "--reason", "corrupt", "--actor", "alice")...)
	h.json(&act, with(qg, "skip", "--key", "bad", "--event", head, "--reason", "again")...)
	if r := act.Resolved; act.Outcome != "already_resolved" || r == nil || r.How != "skipped" || r.Actor != "alice" ||
		r.Reason != "skip: corrupt" || r.At == nil || r.DeadLetterID == nil {
		t.Errorf("skip of a skipped head = %+v (resolved %+v)", act, act.Resolved)
	}
	h.json(&au, with(qg, "audit")...)
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action+":"+e.Outcome+":"+e.Key)
	}
	if want := []string{"skip:already_resolved:bad", "skip:skipped:bad", "skip:already_resolved:good", "skip:already_resolved:good"}; !slices.Equal(got, want) {
		t.Errorf("audit trail %v, want %v", got, want)
	}
}
