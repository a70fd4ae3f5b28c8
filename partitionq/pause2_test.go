package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// A skip issued while the worker is inside the head's handler waits for
// the handler's outcome: it never yields both "handled" and "skipped".
func TestSkipDuringHandlerNeverBoth(t *testing.T) {
	t.Parallel()
	for _, handlerSucceeds := range []bool{true, false} {
		t.Run(fmt.Sprintf("handler_succeeds=%v", handlerSucceeds), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, 1)
			inside := make(chan struct{}, 1)
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
				if string(ev.Payload) != "2" {
					return nil
				}
				if ev.Attempt == 1 {
					return errBoom
				}
				select { // the retry: hold it inside the handler
				case inside <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				if handlerSucceeds {
					return nil
				}
				return errBoom
			}}
			b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Second}})
			b.send(t, "k", 1, 2, 3)
			select {
			case <-inside:
			case <-time.After(30 * time.Second):
				t.Fatal("the retry of k#2 never started")
			}
			bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
			if err != nil {
				t.Fatal(err)
			}
			type skipRes struct {
				res partitionq.ActionResult
				err error
			}
			done := make(chan skipRes, 1)
			go func() {
				res, err := b.client.Skip(b.ctx, partitionq.Action{Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Actor: "test", Reason: "test"})
				done <- skipRes{res, err}
			}()
			// The skip must wait for the handler: prove it is waiting on
			// the head's row lock before releasing the handler.
			pgtest.WaitFor(t, 10*time.Second, "the skip to wait on the head's lock", func() (bool, error) {
				var n int
				err := b.pool.QueryRow(b.ctx, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).Scan(&n)
				return n > 0, err
			})
			select {
			case r := <-done:
				t.Fatalf("skip returned while the handler was running: %+v %v", r.res, r.err)
			default:
			}
			once.Do(func() { close(release) })
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			handled := reflect.DeepEqual(l.attemptsOK("k", "2"), []int{2})
			dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
			if err != nil {
				t.Fatal(err)
			}
			skipped := len(dls) == 1 && dls[0].EventID == bk.Head.ID
			if handled == skipped {
				t.Fatalf("handled=%v skipped=%v: exactly one must hold", handled, skipped)
			}
			want := partitionq.OutcomeSkipped
			if handlerSucceeds {
				want = partitionq.OutcomeAlreadyResolved
			}
			if r.res.Outcome != want || handled != handlerSucceeds {
				t.Fatalf("skip outcome %s (handled=%v), want %s", r.res.Outcome, handled, want)
			}
			if handlerSucceeds && (r.res.Resolved == nil || r.res.Resolved.How != partitionq.ResolvedHandled) {
				t.Fatalf("skip of a head the worker handled meanwhile: resolved %+v, want handled", r.res.Resolved)
			}
			if len(dls) > 1 {
				t.Fatalf("dead letters = %+v", dls)
			}
			l.waitOK(t, "k", 2+boolInt(handlerSucceeds))
			b.waitUnblocked(t)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (l *handlingLog) attemptsOK(key, payload string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, h := range l.all {
		if h.key == key && h.payload == payload && h.ok {
			out = append(out, h.attempt)
		}
	}
	return out
}

// H2, the re-injection window: with the engine's retry mover running all
// the time and fresh events of the key arriving while its head is retried,
// no fresh event may overtake the head. A design that let the mover
// re-inject the head would fail this test.
func TestNoOvertakeWhileHeadRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	var mu sync.Mutex
	failuresLeft := 5
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if string(ev.Payload) == "1" {
			mu.Lock()
			defer mu.Unlock()
			if failuresLeft > 0 {
				failuresLeft--
				return errBoom
			}
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond}})
	// Hammer the engine's mover, as pgqd would at its shortest period.
	moverCtx, stopMover := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for moverCtx.Err() == nil {
			if err := b.client.TickOnce(moverCtx); err != nil && moverCtx.Err() == nil {
				t.Errorf("tick: %v", err)
				return
			}
		}
	}()
	b.send(t, "k", 1)
	for i := 2; i <= 60; i++ { // fresh events keep arriving during the retries
		b.send(t, "k", i)
	}
	l.waitOK(t, "k", 60)
	stopMover()
	wg.Wait()
	got := l.okSeq("k")
	for i, p := range got {
		if p != fmt.Sprint(i+1) {
			t.Fatalf("k handled out of order at %d: %v", i, got)
		}
	}
	if got := l.attempts("k", "1"); len(got) != 6 {
		t.Fatalf("head attempts %v, want 6", got)
	}
	b.waitUnblocked(t)
}

// H6: a hot blocked key. 10,000 events pile up behind a head that is retried
// again and again; each waiting event is set aside exactly once and keeps
// its attempt count, however often the head is retried.
func TestHotBlockedKeyMovesEachEventOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("hot key test sends 10,000 events")
	}
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	hot, other := b.sameSlotKeys(t, 2)
	var heldMu sync.Mutex
	held := true
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		heldMu.Lock()
		defer heldMu.Unlock()
		if ev.Key == hot && string(ev.Payload) == "0" && held {
			return errBoom
		}
		return nil
	}}
	w := b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 2 * time.Millisecond, BackoffMax: 20 * time.Millisecond}})
	const waiting = 10000
	var ms []partitionq.Message
	for i := 0; i <= waiting; i++ {
		ms = append(ms, partitionq.Message{Key: hot, Payload: []byte(fmt.Sprint(i))})
		if i%100 == 0 { // the other key of the slot keeps flowing
			ms = append(ms, partitionq.Message{Key: other, Payload: []byte(fmt.Sprint(i / 100))})
		}
		if len(ms) >= 500 {
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Fatal(err)
			}
			ms = nil
		}
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	l.waitOK(t, other, waiting/100+1)
	var bk partitionq.BlockedKey
	pgtest.WaitFor(t, 60*time.Second, "all events set aside behind the head", func() (bool, error) {
		var err error
		bk, err = b.client.BlockedKey(b.ctx, "q", "g", hot)
		return err == nil && bk.Waiting == waiting, err
	})
	// Let the head fail many more times while the backlog waits.
	attemptsAtFull := bk.Head.Attempts
	pgtest.WaitFor(t, 60*time.Second, "20 more failed attempts of the head", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", hot)
		return err == nil && bk.Head.Attempts >= attemptsAtFull+20, err
	})
	var maxRetry int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select coalesce(max(ev_retry), 0) from pgq.retry_queue where ev_extra1 = $1 and ev_data <> '0'`), hot).Scan(&maxRetry); err != nil {
		t.Fatal(err)
	}
	if maxRetry != 0 {
		t.Fatalf("a waiting event has ev_retry %d: waiting counted as failing (H1)", maxRetry)
	}
	heldMu.Lock()
	held = false
	heldMu.Unlock()
	l.waitOK(t, hot, waiting+1)
	var setAside int64
	for _, s := range w.Stats() {
		setAside += s.SetAside
	}
	headAttempts := len(l.attempts(hot, "0"))
	t.Logf("hot key: %d waiting events, head tried %d times, events set aside %d times in all (%.3f per waiting event)",
		waiting, headAttempts, setAside, float64(setAside)/waiting)
	if setAside != waiting {
		t.Fatalf("waiting events were set aside %d times, want exactly %d (once each)", setAside, waiting)
	}
	got := l.okSeq(hot)
	for i, p := range got {
		if p != fmt.Sprint(i) {
			t.Fatalf("hot key handled out of order at %d", i)
		}
	}
	b.waitUnblocked(t)
}

// Happy path: without failures, nothing is left in the retry queue, the
// failure records or the dead letters.
func TestHappyPathLeavesNoState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec})
	b.sendRounds(t, 50, 10)
	rec.waitTotal(t, 500)
	var rq, fl, dl int
	err := b.pool.QueryRow(b.ctx, b.db.SQL(`select (select count(*) from pgq.retry_queue), (select count(*) from partitionq.failure),
		(select count(*) from partitionq.dead_letter)`)).Scan(&rq, &fl, &dl)
	if err != nil {
		t.Fatal(err)
	}
	if rq+fl+dl != 0 {
		t.Fatalf("retry queue %d, failures %d, dead letters %d: want all 0", rq, fl, dl)
	}
}

func TestSkipPolicyDoesNotBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		switch {
		case string(ev.Payload) == "2" && ev.Attempt == 1:
			return errBoom
		case string(ev.Payload) == "3":
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{
		Handler: l,
		Retry:   partitionq.RetryConfig{Policy: partitionq.PolicyRetryLater, MaxAttempts: 2, BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond},
	})
	// One batch: the retry of 2 is only written when that batch finishes.
	var ms []partitionq.Message
	for i := 1; i <= 4; i++ {
		ms = append(ms, partitionq.Message{Key: "k", Payload: []byte(fmt.Sprint(i))})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	l.waitOK(t, "k", 3)
	// 4 went on without waiting for 2's retry; 2 came back through the engine's retry.
	if got := l.okSeq("k"); !reflect.DeepEqual(got, []string{"1", "4", "2"}) {
		t.Fatalf("k handled %v, want 1 4 2", got)
	}
	pgtest.WaitFor(t, 30*time.Second, "k#3 dead-lettered after 2 attempts", func() (bool, error) {
		dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
		return len(dls) == 1 && string(dls[0].Payload) == "3" && dls[0].Attempts == 2, err
	})
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
	res, err := b.client.Quarantine(b.ctx, partitionq.Action{Queue: "q", Group: "g", Key: "k", Reason: "tenant deleted"})
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
	res, err := b.client.RetryNow(b.ctx, partitionq.Action{Queue: "q", Group: "g", Key: "k"})
	if err != nil || res.Outcome != partitionq.OutcomeRetryScheduled {
		t.Fatalf("retry now = %+v, %v", res, err)
	}
	l.waitOK(t, "k", 1)
}

// Bounded pause: a key blocked longer than MaxBlocked is dead-lettered
// (MaxBlockedDeadLetter) and goes on, or is only flagged.
func TestBoundedPause(t *testing.T) {
	t.Parallel()
	for _, deadLetter := range []bool{true, false} {
		t.Run(fmt.Sprintf("dead_letter=%v", deadLetter), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, 1)
			l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
				if string(ev.Payload) == "1" {
					return errBoom
				}
				return nil
			}}
			b.worker(t, partitionq.WorkerConfig{
				Handler: l,
				Retry:   partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, MaxBlocked: 300 * time.Millisecond, MaxBlockedDeadLetter: deadLetter},
			})
			b.send(t, "k", 1, 2)
			if deadLetter {
				l.waitOK(t, "k", 1)
				dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
				if err != nil || len(dls) != 1 || dls[0].Reason != "max_blocked" || string(dls[0].Payload) != "1" {
					t.Fatalf("dead letters = %+v, %v", dls, err)
				}
				b.waitUnblocked(t)
				return
			}
			pgtest.WaitFor(t, 30*time.Second, "k flagged", func() (bool, error) {
				bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
				if errors.Is(err, partitionq.ErrNotBlocked) {
					return false, nil
				}
				return err == nil && bk.Flagged, err
			})
			if got := l.okSeq("k"); len(got) != 0 {
				t.Fatalf("a flagged key went on: %v", got)
			}
		})
	}
}
