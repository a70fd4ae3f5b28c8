package partitionq_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// blockedWithoutWorker leaves key k of q/g blocked on its event "2", with
// "3" and "4" waiting behind it, and no worker running.
func (b *bundle) blockedWithoutWorker(t *testing.T) (*handlingLog, partitionq.BlockedKey) {
	t.Helper()
	b.group(t, 2)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if string(ev.Payload) == "2" {
			return errBoom
		}
		return nil
	}}
	w := b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}})
	b.send(t, "k", 1, 2, 3, 4)
	var bk partitionq.BlockedKey
	pgtest.WaitFor(t, 30*time.Second, "k blocked with 2 events behind", func() (bool, error) {
		var err error
		bk, err = b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == 2, err
	})
	if err := w.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	return l, bk
}

// After a skip, the key drains its waiting events;
// until a worker runs them its head is an event that never failed. Such a
// key is draining, not blocked, and an action that names no event refuses
// it: a second "skip the head" must never dead-letter a healthy event.
func TestDrainingKeyIsNotSkippedByAccident(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, bk := b.blockedWithoutWorker(t)
	if bk.State != partitionq.KeyBlocked || bk.Head.Attempts != 1 || bk.Head.LastError != "boom" {
		t.Fatalf("blocked key = %+v, want blocked on a head that failed once", bk)
	}
	act := partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", Reason: "corrupt", Actor: "alice"}
	res, err := b.client.Act(b.ctx, act)
	if err != nil || res.Outcome != partitionq.OutcomeSkipped || res.EventID != bk.Head.ID {
		t.Fatalf("first skip = %+v, %v", res, err)
	}

	// The key now drains: its head ("3") never failed.
	next, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
	if err != nil {
		t.Fatal(err)
	}
	if next.State != partitionq.KeyDraining || next.Head.Attempts != 0 || next.Head.LastError != "" || string(next.Head.Payload) != "3" || next.Waiting != 1 {
		t.Fatalf("after the skip: %+v, want draining on event 3 with 1 waiting", next)
	}
	list, err := b.client.BlockedKeys(b.ctx, "q", "g")
	if err != nil || len(list) != 1 || list[0].State != partitionq.KeyDraining {
		t.Fatalf("BlockedKeys = %+v, %v; want k draining", list, err)
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if s := st.SlotStatus[next.Slot]; s.BlockedKeys != 0 || s.DrainingKeys != 1 || s.SetAside != 2 {
		t.Fatalf("status of slot %d = %+v, want 0 blocked, 1 draining, 2 set aside", next.Slot, s)
	}

	// Every action that names no event refuses it, and changes nothing.
	for _, name := range []partitionq.AuditAction{partitionq.AuditSkip, partitionq.AuditRetry, partitionq.AuditQuarantine} {
		a := act
		a.Action = name
		res, err := b.client.Act(b.ctx, a)
		var de *partitionq.DrainingError
		if !errors.As(err, &de) || de.EventID != next.Head.ID || de.Action != name {
			t.Fatalf("%s of a draining key without naming its head: %+v, %v; want a DrainingError for event %d", name, res, err, next.Head.ID)
		}
		if msg := err.Error(); !strings.Contains(msg, "has never failed") || !strings.Contains(msg, "HeadID") {
			t.Errorf("%s: the refusal does not say what to do: %q", name, msg)
		}
	}
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil || len(dls) != 1 || string(dls[0].Payload) != "2" {
		t.Fatalf("dead letters = %+v, %v; want only the skipped event 2", dls, err)
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit = %+v, %v; want the first skip only (refusals change nothing)", audit, err)
	}

	// Naming the event is the operator's explicit choice: it goes through.
	act.HeadID = next.Head.ID
	if res, err := b.client.Act(b.ctx, act); err != nil || res.Outcome != partitionq.OutcomeSkipped {
		t.Fatalf("skip naming the draining head = %+v, %v", res, err)
	}

	// A worker drains the rest, in order.
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}})
	l.waitOK(t, "k", 2)
	if got := l.okSeq("k"); !reflect.DeepEqual(got, []string{"1", "4"}) {
		t.Fatalf("k handled %v, want 1 4", got)
	}
	b.waitUnblocked(t)
}

// A key whose failed head runs out of attempts at once (DeadLetterNow)
// drains its waiting events; the worker leaves no failure behind for them.
func TestKeyDrainingAfterDeadLetterNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	release := make(chan struct{})
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		switch string(ev.Payload) {
		case "1":
			return partitionq.DeadLetterNow(errBoom)
		case "2":
			select { // hold the drain of the key's next event
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l})
	if _, err := b.client.SendBatch(b.ctx, "q", []partitionq.Message{{Key: "k", Payload: []byte("1")}, {Key: "k", Payload: []byte("2")}, {Key: "k", Payload: []byte("3")}}); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "k draining", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.State == partitionq.KeyDraining && string(bk.Head.Payload) == "2", err
	})
	close(release)
	l.waitOK(t, "k", 2)
	b.waitUnblocked(t)
}

// A dropped group's dead letters and audit trail
// stay within reach (list, show, replay, purge, audit) without setting the
// group up again, which would register consumers that hold back the
// queue's table rotation.
func TestDroppedGroupRecordsStayReachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, bk := b.blockedWithoutWorker(t)
	if _, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Reason: "corrupt"}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.DropGroup(b.ctx, partitionq.DropGroupRequest{Queue: "q", Group: "g", Force: true, Reason: "moving to 8 slots"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Group(b.ctx, "q", "g"); !errors.Is(err, partitionq.ErrNoSuchGroup) {
		t.Fatalf("after the drop: %v", err)
	}
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters of the dropped group = %+v, %v", dls, err)
	}
	if d, err := b.client.DeadLetterByID(b.ctx, "q", "g", dls[0].ID); err != nil || d.EventID != bk.Head.ID {
		t.Fatalf("dead letter %d of the dropped group = %+v, %v", dls[0].ID, d, err)
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil || len(audit) != 2 || audit[0].Action != "drop_group" || audit[1].Action != "skip" {
		t.Fatalf("audit of the dropped group = %+v, %v", audit, err)
	}
	rp, err := b.client.Replay(b.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: dls[0].ID, Reason: "fixed", Actor: "alice"})
	if err != nil || rp.Outcome != partitionq.OutcomeReplayed || rp.NewEventID <= bk.Head.ID {
		t.Fatalf("replay of a dropped group's dead letter = %+v, %v", rp, err)
	}
	if pr, err := b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true, Reason: "done"}); err != nil || pr.Count != 1 {
		t.Fatalf("purge of the dropped group = %+v, %v", pr, err)
	}
	// None of it registered a consumer of the group again.
	var consumers int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select count(*) from pgq.get_consumer_info('q') where consumer_name like 'g#%'`)).Scan(&consumers); err != nil || consumers != 0 {
		t.Fatalf("consumers of the dropped group: %d, %v", consumers, err)
	}
	// A group that never existed is still unknown.
	if _, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "nosuch"}); !errors.Is(err, partitionq.ErrNoSuchGroup) {
		t.Fatalf("dead letters of a group that never was: %v", err)
	}
	if _, err := b.client.Audit(b.ctx, "nosuchqueue", "g", 10); !errors.Is(err, partitionq.ErrNoSuchQueue) {
		t.Fatalf("audit of a queue that never was: %v", err)
	}
}

// An action that cannot get a lock it needs within its lock timeout (here
// the engine mover's table lock, held by another session as the ticker's
// retry mover holds it) fails with ErrHeadBusy and changes nothing; once the
// lock is free the same action goes through.
func TestActionOnALockedRetryQueueIsBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, bk := b.blockedWithoutWorker(t)
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx)
	if _, err := holder.Exec(b.ctx, b.db.SQL(`lock table pgq.retry_queue in share update exclusive mode`)); err != nil {
		t.Fatal(err)
	}
	a := partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: bk.Key, Reason: "busy test", Actor: "tester"}
	if _, err := b.client.Act(b.ctx, a); !errors.Is(err, partitionq.ErrHeadBusy) {
		t.Fatalf("skip while the retry queue is locked: %v, want ErrHeadBusy", err)
	}
	if dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"}); err != nil || len(dls) != 0 {
		t.Fatalf("a busy skip left dead letters: %d, %v", len(dls), err)
	}
	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Act(b.ctx, a)
	if err != nil || res.Outcome != partitionq.OutcomeSkipped {
		t.Fatalf("skip once the lock is free: %+v, %v", res, err)
	}
}

func TestQuarantineAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	var mu sync.Mutex
	poisoned := true
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Key == "k" && string(ev.Payload) == "1" && poisoned {
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	b.send(t, "k", 1, 2, 3)
	pgtest.WaitFor(t, 30*time.Second, "k blocked with 2 waiting", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == 2, err
	})
	res, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditQuarantine, Queue: "q", Group: "g", Key: "k", Reason: "tenant deleted"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != partitionq.OutcomeQuarantined || res.Count != 3 {
		t.Fatalf("quarantine = %+v", res)
	}
	if _, err := b.client.BlockedKey(b.ctx, "q", "g", "k"); !errors.Is(err, partitionq.ErrNotBlocked) {
		t.Fatalf("after quarantine: %v, want ErrNotBlocked", err)
	}
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil || len(dls) != 3 {
		t.Fatalf("dead letters %d, %v; want 3", len(dls), err)
	}
	mu.Lock()
	poisoned = false
	mu.Unlock()
	// Replay in order: each goes to the tail of the key's order.
	for _, d := range dls {
		r, err := b.client.Replay(b.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: d.ID, Reason: "fixed", Actor: "bob"})
		if err != nil || r.Outcome != partitionq.OutcomeReplayed {
			t.Fatalf("replay %d: %+v %v", d.ID, r, err)
		}
	}
	l.waitOK(t, "k", 3)
	if got := l.okSeq("k"); !reflect.DeepEqual(got, []string{"1", "2", "3"}) {
		t.Fatalf("replayed k handled %v", got)
	}
	r, err := b.client.Replay(b.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: dls[0].ID, Reason: "again", Actor: "bob"})
	if err != nil || r.Outcome != partitionq.OutcomeAlreadyReplayed {
		t.Fatalf("second replay: %+v %v", r, err)
	}
	pr, err := b.client.PurgeMatching(b.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true, Reason: "done", Actor: "bob"})
	if err != nil || pr.Count != 3 {
		t.Fatalf("purge = %+v, %v", pr, err)
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 100)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[partitionq.AuditAction]int{}
	for _, a := range audit {
		actions[a.Action]++
	}
	if !reflect.DeepEqual(actions, map[partitionq.AuditAction]int{partitionq.AuditQuarantine: 1, partitionq.AuditReplay: 4, partitionq.AuditPurge: 1}) {
		t.Fatalf("audit actions = %v", actions)
	}
}

func TestRetryNowBringsAttemptForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if ev.Attempt == 1 {
			return errBoom
		}
		return nil
	}}
	// A backoff of an hour: only "retry now" can bring the retry.
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: time.Hour, BackoffMax: time.Hour}})
	b.send(t, "k", 1)
	pgtest.WaitFor(t, 30*time.Second, "k blocked", func() (bool, error) {
		_, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil, err
	})
	res, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditRetry, Queue: "q", Group: "g", Key: "k"})
	if err != nil || res.Outcome != partitionq.OutcomeRetryScheduled {
		t.Fatalf("retry now = %+v, %v", res, err)
	}
	l.waitOK(t, "k", 1)
}
