package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// deadLettered sets up q/g with 2 slots and sends, for keys "a" and "b",
// events typed "Bad" (dead-lettered by the handler at once, with the error
// "corrupt <key>-<seq>") and "Good" ones, and waits for the worker to end
// them all; it returns the count of dead letters per key and stops the
// worker. handled counts the successful handler calls.
func (b *bundle) deadLettered(t *testing.T, handled *atomic.Int64) map[string]int {
	t.Helper()
	b.group(t, 2)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if ev.Type == "Bad" {
			return partitionq.DeadLetterNow(fmt.Errorf("corrupt %s-%s", ev.Key, ev.Payload))
		}
		handled.Add(1)
		return nil
	}}
	w := b.worker(t, partitionq.WorkerConfig{Handler: l})
	want := map[string]int{}
	var msgs []partitionq.Message
	for seq := 1; seq <= 6; seq++ {
		for _, k := range []string{"a", "b"} {
			typ := "Good"
			if seq%2 == 0 || k == "a" {
				typ = "Bad"
				want[k]++
			}
			msgs = append(msgs, partitionq.Message{Key: k, Type: typ, Payload: []byte(fmt.Sprint(seq))})
		}
	}
	if _, err := b.client.SendBatch(b.ctx, "q", msgs); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "every event handled or dead-lettered", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && st.DeadLetters == int64(want["a"]+want["b"]) && handled.Load() == int64(len(msgs)-want["a"]-want["b"]), err
	})
	if err := w.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	return want
}

func TestDeadLetterFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var handled atomic.Int64
	want := b.deadLettered(t, &handled) // a: 6 (seq 1..6), b: 3 (seq 2, 4, 6)
	count := func(q partitionq.DeadLetterQuery) int {
		t.Helper()
		q.Queue, q.Group = "q", "g"
		dls, err := b.client.DeadLetters(b.ctx, q)
		if err != nil {
			t.Fatalf("DeadLetters(%+v): %v", q, err)
		}
		return len(dls)
	}
	all, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil || len(all) != want["a"]+want["b"] {
		t.Fatalf("all dead letters: %d, %v", len(all), err)
	}
	// One dead letter of each key (the list's order across the two slots
	// is their commits').
	var pair []int64
	for _, k := range []string{"a", "b"} {
		for _, d := range all {
			if d.Key == k {
				pair = append(pair, d.ID)
				break
			}
		}
	}
	for _, c := range []struct {
		q    partitionq.DeadLetterQuery
		want int
	}{
		{partitionq.DeadLetterQuery{Key: "b"}, 3},
		{partitionq.DeadLetterQuery{Type: "Bad"}, 9},
		{partitionq.DeadLetterQuery{Type: "Good"}, 0},
		{partitionq.DeadLetterQuery{Error: "CORRUPT a-"}, 6}, // ignoring case
		{partitionq.DeadLetterQuery{Error: "b-4"}, 1},
		{partitionq.DeadLetterQuery{Reason: "handler"}, 9},
		{partitionq.DeadLetterQuery{Reason: "max_attempts"}, 0},
		{partitionq.DeadLetterQuery{DeadAfter: all[0].DeadAt.Add(-time.Minute)}, 9},
		{partitionq.DeadLetterQuery{DeadBefore: all[0].DeadAt.Add(-time.Minute)}, 0},
		{partitionq.DeadLetterQuery{IDs: pair}, 2},
		{partitionq.DeadLetterQuery{Key: "a", IDs: pair}, 1},
	} {
		if got := count(c.q); got != c.want {
			t.Errorf("filter %s: %d dead letters, want %d", c.q.Describe(), got, c.want)
		}
	}
	var ve *partitionq.ValidationError
	_, err = b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", DeadAfter: time.Now(), DeadBefore: time.Now().Add(-time.Hour)})
	if !errors.As(err, &ve) {
		t.Fatalf("an empty time range: %v, want a ValidationError", err)
	}
}

func TestReplayMatchingInEventOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var handled atomic.Int64
	want := b.deadLettered(t, &handled)
	match := partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "a"}

	// A request without a filter is refused unless it says All.
	var ve *partitionq.ValidationError
	if _, err := b.client.ReplayMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}}); !errors.As(err, &ve) {
		t.Fatalf("replay without a filter: %v, want a ValidationError", err)
	}
	// Over the limit: refused, nothing changed.
	if _, err := b.client.ReplayMatching(b.ctx, partitionq.BulkRequest{Match: match, Max: 5}); !errors.Is(err, partitionq.ErrTooMany) {
		t.Fatalf("replay of 6 with max 5: %v, want ErrTooMany", err)
	}

	// A dry run lists, in event order, and changes nothing.
	dry, err := b.client.ReplayMatching(b.ctx, partitionq.BulkRequest{Match: match, DryRun: true, Reason: "fixed"})
	if err != nil || !dry.DryRun || dry.Count != want["a"] || len(dry.Items) != want["a"] || dry.AuditID != 0 {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	for i := 1; i < len(dry.Items); i++ {
		if dry.Items[i].EventID <= dry.Items[i-1].EventID {
			t.Fatalf("dry run not in event order: %+v", dry.Items)
		}
	}
	if pend, _ := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "a", Pending: true}); len(pend) != want["a"] {
		t.Fatalf("after a dry run %d of a's dead letters are pending, want %d", len(pend), want["a"])
	}
	if audit, _ := b.client.Audit(b.ctx, "q", "g", 10); len(audit) != 0 {
		t.Fatalf("a dry run wrote the audit trail: %+v", audit)
	}

	// Replay one of them alone first: the bulk replay then leaves it be.
	if _, err := b.client.Replay(b.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: dry.Items[2].ID, Reason: "early", Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.ReplayMatching(b.ctx, partitionq.BulkRequest{Match: match, Reason: "fixed", Actor: "alice"})
	if err != nil || res.Count != want["a"]-1 || res.AlreadyReplayed != 1 || res.AuditID == 0 {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	var last int64
	for i, it := range res.Items {
		if i == 2 {
			if it.Outcome != partitionq.OutcomeAlreadyReplayed {
				t.Fatalf("item 2 = %+v, want already replayed", it)
			}
			continue
		}
		if it.Outcome != partitionq.OutcomeReplayed || it.NewEventID <= last {
			t.Fatalf("item %d = %+v: want replayed, after event %d", i, it, last)
		}
		last = it.NewEventID
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil || len(audit) != 2 {
		t.Fatalf("audit = %+v, %v; want the single replay and the bulk one", audit, err)
	}
	if a := audit[0]; a.Action != "replay" || a.Key != "a" || a.Actor != "alice" || a.Reason != "fixed" ||
		a.Outcome != partitionq.OutcomeReplayed || a.Detail != `5 (already_replayed 1, key="a")` ||
		a.OutcomeText() != `replayed 5 (already_replayed 1, key="a")` {
		t.Fatalf("bulk audit entry = %+v", a)
	}

	// The replays run, a's in their original order.
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	b.worker(t, partitionq.WorkerConfig{Handler: l})
	pgtest.WaitFor(t, 30*time.Second, "the 6 replays of a handled", func() (bool, error) { return len(l.okSeq("a")) == 6, nil })
	if got := l.okSeq("a"); !reflect.DeepEqual(got, []string{"3", "1", "2", "4", "5", "6"}) {
		t.Fatalf("a's replays ran as %v; want 3 (replayed alone first), then 1 2 4 5 6", got)
	}
	if got := l.okSeq("b"); len(got) != 0 {
		t.Fatalf("b's dead letters were replayed: %v", got)
	}
}

func TestPurgeMatching(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var handled atomic.Int64
	want := b.deadLettered(t, &handled)
	match := partitionq.DeadLetterQuery{Queue: "q", Group: "g", Error: "b-"}
	dry, err := b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: match, DryRun: true})
	if err != nil || dry.Count != want["b"] {
		t.Fatalf("dry purge = %+v, %v", dry, err)
	}
	if n, _ := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"}); len(n) != want["a"]+want["b"] {
		t.Fatalf("a dry purge deleted: %d left", len(n))
	}
	res, err := b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: match, Reason: "tenant b gone"})
	if err != nil || res.Count != want["b"] || res.AuditID == 0 {
		t.Fatalf("purge = %+v, %v", res, err)
	}
	left, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil || len(left) != want["a"] {
		t.Fatalf("after the purge: %d left, %v; want a's %d", len(left), err, want["a"])
	}
	for _, d := range left {
		if d.Key != "a" {
			t.Fatalf("purge left %+v", d)
		}
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil || len(audit) != 1 || audit[0].Action != "purge" || audit[0].Key != "b" || audit[0].Outcome != partitionq.OutcomePurged || !strings.HasPrefix(audit[0].Detail, "3 ") {
		t.Fatalf("audit = %+v, %v; want one purge of 3", audit, err)
	}
	// No ids (nil or empty) and no other filter select the whole group:
	// refused without All, nothing deleted.
	for _, ids := range [][]int64{nil, {}} {
		var ve *partitionq.ValidationError
		_, err = b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g", IDs: ids}})
		if !errors.As(err, &ve) || ve.Field != "BulkRequest.Match" || !strings.Contains(ve.Fix, "set All") {
			t.Fatalf("purge with ids %#v and no All: %v, want a *ValidationError asking for All", ids, err)
		}
	}
	// By id.
	res, err = b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g", IDs: []int64{left[0].ID}}})
	if err != nil || res.Count != 1 || len(res.Items) != 1 || res.Items[0].ID != left[0].ID {
		t.Fatalf("purge of dead letter %d = %+v, %v", left[0].ID, res, err)
	}
	// All the others, explicitly.
	res, err = b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true})
	if err != nil || res.Count != want["a"]-1 {
		t.Fatalf("purge --all = %+v, %v", res, err)
	}
}

// A bulk replay that fails part way (here a trigger refuses to mark the
// third dead letter) leaves nothing done: no dead letter marked, no replay
// event in the queue, no audit entry.
func TestReplayMatchingIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var handled atomic.Int64
	b.deadLettered(t, &handled)
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "a"})
	if err != nil || len(dls) != 6 {
		t.Fatalf("a's dead letters: %d, %v", len(dls), err)
	}
	if _, err := b.pool.Exec(b.ctx, fmt.Sprintf(`
		create function pq_test_refuse() returns trigger language plpgsql as $$
		begin raise exception 'refused by the test'; end $$;
		create trigger pq_test_refuse before update on partitionq.dead_letter
		   for each row when (new.id = %d) execute function pq_test_refuse();`, dls[2].ID)); err != nil {
		t.Fatal(err)
	}
	_, err = b.client.ReplayMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "a"}, Reason: "fixed"})
	if err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("replay with a refused update: %v", err)
	}
	if pend, _ := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Pending: true}); len(pend) != 9 {
		t.Fatalf("after the failed replay %d dead letters are pending, want all 9", len(pend))
	}
	if audit, _ := b.client.Audit(b.ctx, "q", "g", 10); len(audit) != 0 {
		t.Fatalf("the failed replay left audit entries: %+v", audit)
	}
	// No replay event reaches a worker.
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	b.worker(t, partitionq.WorkerConfig{Handler: l})
	b.send(t, "a", 99)
	pgtest.WaitFor(t, 30*time.Second, "the marker event handled", func() (bool, error) { return len(l.okSeq("a")) > 0, nil })
	if got := l.okSeq("a"); !reflect.DeepEqual(got, []string{"99"}) {
		t.Fatalf("a's events after the failed replay: %v, want only the marker 99", got)
	}
}
