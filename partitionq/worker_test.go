package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/test/netproxy"
	"github.com/partitionq/partitionq/test/pgtest"
)

// sameSlotKeys returns two distinct keys that share a slot of n.
func (b *bundle) sameSlotKeys(t *testing.T, n int) (string, string) {
	t.Helper()
	first := map[int]string{}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("key-%d", i)
		s, err := b.client.SlotOf(b.ctx, k, n)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := first[s]; ok {
			return other, k
		}
		first[s] = k
	}
	t.Fatal("no two keys share a slot")
	return "", ""
}

func (b *bundle) send(t *testing.T, key string, seqs ...int) {
	t.Helper()
	for _, s := range seqs {
		if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte(fmt.Sprint(s))}); err != nil {
			t.Fatal(err)
		}
	}
}

type handling struct {
	key     string
	payload string
	attempt int
	ok      bool
}

// handlingLog is a handler whose behaviour a test scripts per event.
type handlingLog struct {
	mu     sync.Mutex
	all    []handling
	decide func(ctx context.Context, ev *partitionq.Event) error
}

func (l *handlingLog) Handle(ctx context.Context, ev *partitionq.Event) error {
	err := l.decide(ctx, ev)
	l.mu.Lock()
	l.all = append(l.all, handling{ev.Key, string(ev.Payload), ev.Attempt, err == nil})
	l.mu.Unlock()
	return err
}

// okSeq returns the payloads handled successfully for key, in order.
func (l *handlingLog) okSeq(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, h := range l.all {
		if h.key == key && h.ok {
			out = append(out, h.payload)
		}
	}
	return out
}

func (l *handlingLog) attempts(key, payload string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, h := range l.all {
		if h.key == key && h.payload == payload {
			out = append(out, h.attempt)
		}
	}
	return out
}

func (l *handlingLog) waitOK(t *testing.T, key string, n int) {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d events of %s handled", n, key), func() (bool, error) {
		return len(l.okSeq(key)) >= n, nil
	})
}

var errBoom = errors.New("boom")

func TestPauseHoldsKeyAndOthersFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	k, other := b.sameSlotKeys(t, 2)
	release := make(chan struct{})
	third := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key == k && string(ev.Payload) == "2" {
			switch ev.Attempt {
			case 1, 2:
				return errBoom
			default: // hold the third attempt until the test has seen the rest flow
				close(third)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}, Limits: partitionq.LimitsConfig{Concurrency: 4}})
	b.send(t, k, 1, 2, 3, 4, 5)
	l.waitOK(t, k, 1)
	// While K#2 is failing, another key of the same slot keeps flowing.
	b.send(t, other, 1, 2, 3)
	l.waitOK(t, other, 3)
	select {
	case <-third:
	case <-time.After(30 * time.Second):
		t.Fatal("no third attempt of K#2")
	}
	if got := l.okSeq(k); !reflect.DeepEqual(got, []string{"1"}) {
		t.Fatalf("while K#2 was unresolved, K handled %v", got)
	}
	bk, err := b.client.BlockedKey(b.ctx, "q", "g", k)
	if err != nil {
		t.Fatal(err)
	}
	if bk.Waiting != 3 || bk.Head.Attempts != 2 || bk.Head.LastError != "boom" || string(bk.Head.Payload) != "2" {
		t.Fatalf("blocked key = %+v, want head 2 with 2 attempts, last error boom, 3 waiting", bk)
	}
	once.Do(func() { close(release) })
	l.waitOK(t, k, 5)
	if got := l.okSeq(k); !reflect.DeepEqual(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("K handled %v, want 1..5 in order", got)
	}
	if got := l.attempts(k, "2"); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Fatalf("K#2 attempts %v, want 1 2 3", got)
	}
	for _, p := range []string{"3", "4", "5"} { // waiting is not failing (H1)
		if got := l.attempts(k, p); !reflect.DeepEqual(got, []int{1}) {
			t.Fatalf("K#%s attempts %v, want [1]", p, got)
		}
	}
	b.waitUnblocked(t)
}

// sendBThenA sends B's event 1, then A's events 1 to 5, in one
// transaction: one batch.
func (b *bundle) sendBThenA(t *testing.T) {
	t.Helper()
	ms := []partitionq.Message{{Key: "B", Type: "T", Payload: []byte("1")}}
	for i := 1; i <= 5; i++ {
		ms = append(ms, partitionq.Message{Key: "A", Type: "T", Payload: []byte(fmt.Sprint(i))})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
}

// A key that fails in a batch is drained while the batch still runs: its
// parked events are written with the batch's progress, not at the batch's
// end, so a slow key of the same batch does not hold them. Key B's only
// event is handled first and returns only once A's last event has been
// handled; A's first event fails once. Before, A's parked events waited for
// B's event to return (the batch's end), which waited for them: B gave up
// after 20 s and the test failed.
func TestABlockedKeyDrainsWhileItsBatchRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	aDone := make(chan struct{})
	var once sync.Once
	var bWaited atomic.Bool
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		switch {
		case ev.Key == "A" && string(ev.Payload) == "1" && ev.Attempt == 1:
			return errBoom
		case ev.Key == "A" && string(ev.Payload) == "5":
			once.Do(func() { close(aDone) })
		case ev.Key == "B":
			select {
			case <-aDone:
				bWaited.Store(true)
			case <-time.After(20 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond},
		Limits: partitionq.LimitsConfig{Concurrency: 4}})
	b.sendBThenA(t)
	l.waitOK(t, "B", 1)
	if !bWaited.Load() {
		t.Fatalf("A's parked events were not drained while B's event held the batch open: A handled %v", l.okSeq("A"))
	}
	if got := l.okSeq("A"); !reflect.DeepEqual(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("A handled %v, want 1..5 in order", got)
	}
	if got := l.attempts("A", "1"); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Fatalf("A#1 attempts %v, want 1 2", got)
	}
	for _, p := range []string{"2", "3", "4", "5"} { // waiting is not failing (H1)
		if got := l.attempts("A", p); !reflect.DeepEqual(got, []int{1}) {
			t.Fatalf("A#%s attempts %v, want [1]", p, got)
		}
	}
	b.waitUnblocked(t)
}

// waitUnblocked waits until the group has no blocked key and no set-aside event.
func (b *bundle) waitUnblocked(t *testing.T) {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, "no blocked keys", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for _, s := range st.SlotStatus {
			if s.BlockedKeys > 0 || s.SetAside > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestSkipUnblocksInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if ev.Key == "k" && string(ev.Payload) == "2" {
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	b.send(t, "k", 1, 2, 3, 4)
	var bk partitionq.BlockedKey
	pgtest.WaitFor(t, 30*time.Second, "k blocked with 3 events behind", func() (bool, error) {
		var err error
		bk, err = b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == 2 && bk.Head.Attempts >= 2, err
	})
	prev, err := b.client.Preview(b.ctx, "q", "g", "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(prev) != 3 || !prev[0].Head || string(prev[1].Payload) != "3" || string(prev[2].Payload) != "4" {
		t.Fatalf("preview = %+v", prev)
	}
	res, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Reason: "bad file", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != partitionq.OutcomeSkipped || res.EventID != bk.Head.ID {
		t.Fatalf("skip = %+v", res)
	}
	l.waitOK(t, "k", 3)
	if got := l.okSeq("k"); !reflect.DeepEqual(got, []string{"1", "3", "4"}) {
		t.Fatalf("k handled %v, want 1 3 4", got)
	}
	// Idempotent: the same skip again reports the head as resolved.
	res, err = b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Actor: "alice", Reason: "again"})
	if err != nil || res.Outcome != partitionq.OutcomeAlreadyResolved {
		t.Fatalf("second skip = %+v, %v; want already resolved", res, err)
	}
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != bk.Head.ID || dls[0].Reason != "skip: bad file" || dls[0].Actor != "alice" || dls[0].LastError != "boom" {
		t.Fatalf("dead letters = %+v", dls)
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 2 || audit[1].Action != "skip" || audit[1].Outcome != "skipped" || audit[1].Actor != "alice" || audit[1].DBRole == "" {
		t.Fatalf("audit = %+v", audit)
	}
	b.waitUnblocked(t)
}

func TestMaxAttemptsDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if string(ev.Payload) == "2" {
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{MaxAttempts: 3, BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond}})
	b.send(t, "k", 1, 2, 3)
	l.waitOK(t, "k", 2)
	if got := l.okSeq("k"); !reflect.DeepEqual(got, []string{"1", "3"}) {
		t.Fatalf("k handled %v, want 1 3", got)
	}
	if got := l.attempts("k", "2"); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Fatalf("k#2 attempts %v, want 1 2 3", got)
	}
	dls, err := b.client.DeadLetters(b.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Reason != "max_attempts" || dls[0].Attempts != 3 || string(dls[0].Payload) != "2" {
		t.Fatalf("dead letters = %+v", dls)
	}
	b.waitUnblocked(t)
}

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
				res, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Actor: "test", Reason: "test"})
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

// Bounded pause: a key blocked longer than MaxBlocked is dead-lettered
// (MaxBlocked.DeadLetter) and goes on, or is only flagged.
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
				Retry:   partitionq.RetryConfig{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, MaxBlocked: partitionq.BlockedLimit{After: 300 * time.Millisecond, DeadLetter: deadLetter}},
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

func TestOrderAndCompleteness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec, Limits: partitionq.LimitsConfig{Concurrency: 8}})
	const keys, rounds = 200, 25
	sent := b.sendRounds(t, keys, rounds)
	rec.waitTotal(t, keys*rounds)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.total != keys*rounds {
		t.Fatalf("handled %d events, sent %d", rec.total, keys*rounds)
	}
	for id, n := range rec.ids {
		if n != 1 {
			t.Errorf("event %d handled %d times on the happy path", id, n)
		}
	}
	for key, want := range sent {
		if got := rec.byKey[key]; !reflect.DeepEqual(got, want) {
			t.Fatalf("key %s handled %v, sent %v", key, got, want)
		}
	}
	slotsUsed := map[int]bool{}
	for key, s := range rec.slotOf {
		want, err := b.client.SlotOf(b.ctx, key, 4)
		if err != nil {
			t.Fatal(err)
		}
		if s != want {
			t.Errorf("key %s handled on slot %d, SlotOf says %d", key, s, want)
		}
		slotsUsed[s] = true
	}
	if len(slotsUsed) != 4 {
		t.Errorf("only slots %v were used", slotsUsed)
	}
}

// Different keys are handled at once, inside one slot and across slots:
// every handler waits until all of them are inside, which only happens if
// the worker runs them in parallel (a serial worker fails the wait).
func TestKeysRunInParallel(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("slots=%d", n), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, n)
			const keys = 4
			var mu sync.Mutex
			inside := map[string]bool{}
			all, ended := make(chan struct{}), make(chan struct{})
			l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
				mu.Lock()
				inside[ev.Key] = true
				if len(inside) == keys {
					close(all)
				}
				mu.Unlock()
				select {
				case <-all:
					return nil
				case <-ended:
					return errBoom
				case <-ctx.Done():
					return ctx.Err()
				}
			}}
			b.worker(t, partitionq.WorkerConfig{Handler: l, Limits: partitionq.LimitsConfig{Concurrency: keys, HandlerTimeout: time.Minute}})
			t.Cleanup(func() { close(ended) }) // runs before the worker's stop: let waiting handlers go
			// One transaction, so one batch per slot: a slot finishes a batch
			// before it reads the next, so events split over two batches
			// could never be inside at once.
			var ms []partitionq.Message
			for k := range keys {
				ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", k), Type: "T", Payload: []byte("1")})
			}
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Fatal(err)
			}
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("only %d of %d keys were ever inside the handler at once", len(inside), keys)
			}
		})
	}
}

// A drain of a blocked key cut short by a fault runs again only what was in
// flight: the events it handled were recorded as done as it went (the
// worker's progress flushes, and one more before it resolves them), so the
// next drain resolves them without running them. Here every session of the
// database is terminated while the drain's handler holds event 40 of the
// key's 60; the drain, its transaction lost unnoticed, goes on to the end of
// its run; every event ran once (the head twice: it failed first), and
// nothing is left behind.
func TestDrainResumesAfterAFault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	var mu sync.Mutex
	runs := map[int]int{}
	inside := make(chan struct{})
	release := make(chan struct{})
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		seq, _ := strconv.Atoi(string(ev.Payload))
		mu.Lock()
		runs[seq]++
		n := runs[seq]
		mu.Unlock()
		switch {
		case seq == 0 && n == 1:
			return errors.New("the head fails once: the key blocks, its later events wait")
		case seq == 40 && n == 1:
			close(inside)
			<-release // outlives the fault on purpose
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{BackoffMin: 200 * time.Millisecond, BackoffMax: 200 * time.Millisecond}})
	var ms []partitionq.Message
	for i := range 60 {
		ms = append(ms, partitionq.Message{Key: "k", Type: "T", Payload: []byte(strconv.Itoa(i))})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain never reached event 40")
	}
	// Events 0-39 are handled; once the flushes recorded them, the fault.
	pgtest.WaitFor(t, 10*time.Second, "the drain's handled events recorded as done", func() (bool, error) {
		return b.count(t, `select count(*) from partitionq.slot_done where batch_id = 0`) == 40, nil
	})
	if _, err := b.pool.Exec(b.ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	b.pool.Reset() // the test's own sessions were terminated too
	close(release)
	pgtest.WaitFor(t, 30*time.Second, "every event handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return runs[59] > 0, nil
	})
	pgtest.WaitFor(t, 10*time.Second, "the key unblocked, nothing left behind", func() (bool, error) {
		_, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if !errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return b.count(t, `select count(*) from partitionq.slot_done`)+b.count(t, `select count(*) from pgq.retry_queue`) == 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	var wrong []string
	for i := range 60 {
		want := 1
		if i == 0 {
			want = 2
		}
		if runs[i] != want {
			wrong = append(wrong, fmt.Sprintf("event %d ran %d times, want %d", i, runs[i], want))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("after a fault in a drain: %v", wrong)
	}
}

// Events a batch parked are written before the batch ends (with the
// progress that resolves them in the batch). A worker stopped with the
// batch open and its slow event in flight hands the batch to the next
// worker, which repeats only that event: it skips the parked events in
// the batch, and drains them once from the retry queue, in order.
func TestEventsParkedBeforeTheBatchEndsSurviveATakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	var mu sync.Mutex
	runs := map[string]int{}
	var order []string
	inKey := map[string]bool{}
	overlaps := 0
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		name := ev.Key + string(ev.Payload)
		mu.Lock()
		if inKey[ev.Key] {
			overlaps++
		}
		inKey[ev.Key] = true
		runs[name]++
		n := runs[name]
		mu.Unlock()
		defer func() {
			mu.Lock()
			inKey[ev.Key] = false
			mu.Unlock()
		}()
		switch {
		case name == "A1" && n == 1:
			return errBoom
		case name == "B1" && n == 1:
			<-ctx.Done() // holds the batch open until the worker stops
			return ctx.Err()
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		return nil
	})
	cfg := partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{BackoffMin: time.Second, BackoffMax: time.Second},
		Limits: partitionq.LimitsConfig{ShutdownTimeout: 100 * time.Millisecond}}
	w1 := b.worker(t, cfg)
	b.sendBThenA(t)
	pgtest.WaitFor(t, 10*time.Second, "A's events parked while the batch is open", func() (bool, error) {
		return b.count(t, `select count(*) from pgq.retry_queue`) == 5 && b.count(t, `select count(*) from pgq.subscription where sub_batch is not null`) == 1, nil
	})
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if open := b.count(t, `select count(*) from pgq.subscription where sub_batch is not null`); open != 1 {
		t.Fatalf("%d batches open after the stop, want the one left to the next worker", open)
	}
	b.worker(t, cfg)
	pgtest.WaitFor(t, 30*time.Second, "every event handled, nothing left behind", func() (bool, error) {
		mu.Lock()
		done := runs["A5"] > 0 && runs["B1"] > 1
		mu.Unlock()
		return done && b.count(t, `select count(*) from pgq.retry_queue`) == 0 && b.count(t, `select count(*) from pgq.subscription where sub_batch is not null`) == 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"A1": 2, "A2": 1, "A3": 1, "A4": 1, "A5": 1, "B1": 2}
	for name, n := range want {
		if runs[name] != n {
			t.Errorf("%s ran %d times, want %d (runs %v)", name, runs[name], n, runs)
		}
	}
	var a []string
	for _, x := range order {
		if x[0] == 'A' {
			a = append(a, x)
		}
	}
	if !reflect.DeepEqual(a, []string{"A1", "A2", "A3", "A4", "A5"}) {
		t.Errorf("A handled %v, want A1..A5 in order", a)
	}
	if overlaps != 0 {
		t.Errorf("%d overlapping runs of a key", overlaps)
	}
}

// stmtCounter counts the statements of a pool's sessions that contain a
// piece of SQL.
type stmtCounter struct {
	nextBatch, lastTick atomic.Int64
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(d.SQL, "next_batch_custom"):
		c.nextBatch.Add(1)
	case strings.Contains(d.SQL, "max(t.tick_id)"):
		c.lastTick.Add(1)
	}
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A worker at rest whose slots have never had a batch polls for new ticks
// (one cheap read for all its slots) and opens no batches until a tick
// comes: each poll must not try every slot's next_batch again.
func TestIdleWorkerOpensNoBatchesUntilATick(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	count := &stmtCounter{}
	cfg.ConnConfig.Tracer = count // the worker's own pool is made from this configuration
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: db, pool: pool, client: client, ctx: ctx}
	b.group(t, 8) // the consumers start level with the queue's newest tick (create_queue makes one)
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	w, err := client.NewWorker(ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: l, Limits: partitionq.LimitsConfig{PollInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	// Let start-up settle (the first look for batches, the first polls),
	// then count over many polls.
	pgtest.WaitFor(t, 30*time.Second, "the first polls", func() (bool, error) { return count.nextBatch.Load() > 0 && count.lastTick.Load() >= 5, nil })
	opened, polls := count.nextBatch.Load(), count.lastTick.Load()
	pgtest.WaitFor(t, 30*time.Second, "40 polls for new ticks", func() (bool, error) { return count.lastTick.Load() >= polls+40, nil })
	if n := count.nextBatch.Load() - opened; n > 2 {
		t.Fatalf("the idle worker tried to open batches %d times in 40 polls with no new tick, want at most 2", n)
	}
	// A tick wakes it: the slots open batches again and handle what came.
	if _, err := client.Send(ctx, "q", partitionq.Message{Key: "k", Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	if err := client.TickOnce(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "the event sent after the rest", func() (bool, error) { return len(l.okSeq("k")) == 1, nil })
}

// Per-tick cost follows the slots that have events, not N: with 64 slots,
// ticks every 10 ms and events of two keys only, a tick opens a batch for
// the cohort of idle slots (one probe) and one per slot with events, not
// 64; the idle slots' consumers still follow (moved to where the busy
// slots are within the bound docs/tuning.md states), and every event is
// handled in order.
func TestIdleSlotsOpenNoBatchPerTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 64)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec})
	k1, k2 := "tenant-1", "tenant-2"
	batches := func() int64 {
		var n int64
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select last_value from pgq.batch_id_seq`)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ticks := func() int64 {
		var n int64
		if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select max(tick_id) from pgq.tick`)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(seq int) {
		for _, k := range []string{k1, k2} {
			if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: k, Payload: []byte(fmt.Sprint(seq))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Warm up: every slot has been opened once, the cohort formed.
	for seq := range 20 {
		send(seq)
		time.Sleep(10 * time.Millisecond)
	}
	rec.waitTotal(t, 40)
	b0, t0 := batches(), ticks()
	for seq := 20; seq < 120; seq++ {
		send(seq)
		time.Sleep(10 * time.Millisecond)
	}
	rec.waitTotal(t, 240)
	db, dt := batches()-b0, ticks()-t0
	t.Logf("%d batches opened over %d ticks at N = 64 with 2 keys sending: %.1f a tick", db, dt, float64(db)/float64(dt))
	if dt < 20 {
		t.Fatalf("only %d ticks in the window: the test measured nothing", dt)
	}
	if perTick := float64(db) / float64(dt); perTick > 6 {
		t.Errorf("%.1f batches opened per tick with 2 slots of 64 having events, want at most 6 (a probe and the busy slots, not 64)", perTick)
	}
	// Every slot's consumer follows the busiest slots': once the sends have
	// stopped, the idle slots' consumers are moved (without a batch) to
	// the tick the busy slots finished last, within the idle bound (about
	// a second). (Lag itself, the age of a slot's last tick, grows for
	// every slot alike once ticks stop: a bound on it would measure how
	// quickly this test gets here.)
	pgtest.WaitFor(t, 10*time.Second, "every slot's consumer at the busy slots' last tick", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		if len(st.SlotStatus) != 64 {
			return false, fmt.Errorf("status listed %d slots, want 64", len(st.SlotStatus))
		}
		var furthest int64
		for _, s := range st.SlotStatus {
			furthest = max(furthest, s.Position)
		}
		for _, s := range st.SlotStatus {
			if s.Position != furthest {
				return false, nil
			}
		}
		return true, nil
	})
	for _, k := range []string{k1, k2} {
		got := rec.byKey[k]
		for i, p := range got {
			if p != fmt.Sprint(i) {
				t.Fatalf("key %s handled %v, not in order", k, got)
			}
		}
	}
}

// tickNow makes the engine tick queue q now (its ticker_max_lag is 1ms):
// it ticks until the queue's tick count grows.
func (b *bundle) tickNow(t *testing.T) {
	t.Helper()
	before := b.count(t, `select count(*) from pgq.tick`)
	pgtest.WaitFor(t, 10*time.Second, "a tick", func() (bool, error) {
		if err := b.client.TickOnce(b.ctx); err != nil {
			return false, err
		}
		return b.count(t, `select count(*) from pgq.tick`) > before, nil
	})
}

// engineBatches is how many engine batches the database has opened.
func (b *bundle) engineBatches(t *testing.T) int {
	t.Helper()
	return b.count(t, `select last_value from pgq.batch_id_seq`)
}

// A slot that is behind takes every tick it is behind by as one batch,
// judged by its own lag (the engine's min_interval), not one batch per tick.
func TestSlotBehindCatchesUpInOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 1, TickMaxLag: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // ten ticks of five events each, before any worker runs
		var ms []partitionq.Message
		for j := range 5 {
			ms = append(ms, partitionq.Message{Key: "k", Payload: []byte(fmt.Sprint(i*5 + j))})
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		b.tickNow(t)
	}
	before := b.engineBatches(t)
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: l, Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the 50 events handled", func() (bool, error) { return len(l.okSeq("k")) == 50, nil })
	if n := b.engineBatches(t) - before; n > 2 {
		t.Fatalf("the slot behind by 10 ticks opened %d batches to catch up, want 1 (2 at most)", n)
	}
	for i, p := range l.okSeq("k") {
		if p != fmt.Sprint(i) {
			t.Fatalf("out of order: %v", l.okSeq("k"))
		}
	}
}

// A slot of a group's old generation never takes a batch past the resize's
// cutover tick, even when it is behind (and would merge ticks): the events
// sent before the resize are handled by the old generation's slots, those
// sent after its cutover by the new generation's.
func TestOldSlotsStopAtTheCutover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2, TickMaxLag: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	send := func(phase string) {
		var ms []partitionq.Message
		for k := range 10 {
			for j := range 2 {
				ms = append(ms, partitionq.Message{Key: fmt.Sprint("k", k), Type: phase, Payload: []byte(fmt.Sprint(j))})
			}
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
	}
	send("before")
	b.tickNow(t)
	b.tickNow(t)
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	b.tickNow(t) // the cutover: the first tick that sees the resize
	send("after")
	b.tickNow(t)
	b.tickNow(t)
	var mu sync.Mutex
	wrong := []string{}
	handled := 0
	h := partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		handled++
		if want := map[string]int{"before": 2, "after": 4}[ev.Type]; ev.Slots != want {
			wrong = append(wrong, fmt.Sprintf("%s event %d of %s handled by a slot of %d", ev.Type, ev.ID, ev.Key, ev.Slots))
		}
		return nil
	})
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h, Limits: partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	ticks, done := make(chan struct{}), make(chan struct{}) // the workers need ticks to see the handoffs through
	go func() {
		defer close(done)
		for {
			select {
			case <-ticks:
				return
			case <-time.After(20 * time.Millisecond):
				b.client.TickOnce(b.ctx) // the next one tries again
			}
		}
	}()
	defer func() { close(ticks); <-done }()
	pgtest.WaitFor(t, 60*time.Second, "the 40 events handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return handled >= 40, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(wrong) > 0 || handled != 40 {
		t.Fatalf("%d handlings; across the cutover: %v", handled, wrong)
	}
}

// Handlers that query the database through the pool the client was given
// (the common case) never wait on the worker's own connections: a worker
// holding a transaction per slot and per blocked key being drained, each
// waiting on a handler, must not be able to starve those handlers of a
// connection. The pool here is as small as a pool can be (one connection),
// and many keys block at once, so every drain runs while handlers need the
// pool.
func TestHandlersSharingThePoolNeverStarve(t *testing.T) {
	t.Parallel()
	b := setupPool(t, 1)
	pool := b.pool
	b.group(t, 2)

	const keys, perKey = 24, 4
	var mu sync.Mutex
	failed := map[string]bool{}
	var timedOut atomic.Int64
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		if _, err := pool.Exec(ctx, `select 1`); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				timedOut.Add(1)
			}
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !failed[ev.Key] { // every key's first event fails once: every key blocks
			failed[ev.Key] = true
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{
		Handler: l,
		Retry:   partitionq.RetryConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
		Limits:  partitionq.LimitsConfig{Concurrency: 8, DrainConcurrency: 8, HandlerTimeout: 5 * time.Second},
	})
	var ms []partitionq.Message
	for i := range perKey {
		for k := range keys {
			ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", k), Payload: []byte(fmt.Sprint(i))})
		}
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		pgtest.WaitFor(t, 60*time.Second, "the events of "+key, func() (bool, error) {
			if n := timedOut.Load(); n > 0 {
				return false, fmt.Errorf("%d handler calls waited their whole timeout for a pool connection", n)
			}
			return len(l.okSeq(key)) >= perKey, nil
		})
		if got, want := fmt.Sprint(l.okSeq(key)), "[0 1 2 3]"; got != want {
			t.Fatalf("%s handled as %s, want %s", key, got, want)
		}
	}
}

// The slots of a worker read their batches together; a slot whose handler
// is stuck must not hold the others: with its key's events piling up past
// what a slot keeps in memory, the other slot's events of the same batch
// are all handled while it is stuck, and the stuck key's events follow in
// order once it is released.
func TestStuckSlotDoesNotHoldTheSharedRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	var slow, fast string
	for i := 0; slow == "" || fast == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		s, err := b.client.SlotOf(b.ctx, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 && slow == "" {
			slow = k
		} else if s == 1 && fast == "" {
			fast = k
		}
	}
	release := make(chan struct{})
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key == slow && string(ev.Payload) == "0" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}}
	const perKey = 5000 // more than a slot holds in memory (about 3,000)
	var ms []partitionq.Message
	for i := 0; i < perKey; i++ {
		ms = append(ms, partitionq.Message{Key: slow, Payload: []byte(fmt.Sprint(i))}, partitionq.Message{Key: fast, Payload: []byte(fmt.Sprint(i))})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil { // one transaction: one batch for both slots
		t.Fatal(err)
	}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Limits: partitionq.LimitsConfig{Concurrency: 4}})
	pgtest.WaitFor(t, 60*time.Second, "the fast slot's events while the other slot is stuck", func() (bool, error) {
		return len(l.okSeq(fast)) == perKey, nil
	})
	if n := len(l.okSeq(slow)); n != 0 {
		t.Fatalf("%d events of the stuck key handled before its head", n)
	}
	close(release)
	pgtest.WaitFor(t, 60*time.Second, "the stuck key's events", func() (bool, error) { return len(l.okSeq(slow)) == perKey, nil })
	for _, k := range []string{slow, fast} {
		for i, p := range l.okSeq(k) {
			if p != fmt.Sprint(i) {
				t.Fatalf("%s: event %d handled as %s: out of order", k, i, p)
			}
		}
	}
}

// Stop takes no new event, gives running handlers ShutdownTimeout, leaves a
// batch not fully handled open (the next worker gets it again: nothing is
// lost) and releases the slots. With progress recorded (the default) the
// next worker runs only the events not done; without, the whole batch.
func TestGracefulShutdownLeavesBatchOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		disable bool
		want    []string
	}{{"progress", false, []string{"2", "3"}}, {"no progress", true, []string{"1", "2", "3"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testGracefulShutdown(t, tc.disable, tc.want)
		})
	}
}

func testGracefulShutdown(t *testing.T, disableProgress bool, want []string) {
	b := setup(t)
	b.group(t, 1)
	inside := make(chan struct{}, 10)
	l1 := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		if string(ev.Payload) == "2" {
			inside <- struct{}{}
			<-ctx.Done() // a handler that ignores shutdown until cancelled
			return ctx.Err()
		}
		return nil
	}}
	w1, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{
		Queue: "q", Group: "g", Handler: l1,
		DisableProgress: disableProgress, Ticker: &partitionq.TickerConfig{Interval: 10 * time.Millisecond},
		Limits: partitionq.LimitsConfig{Concurrency: 1, PollInterval: 10 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	var ms []partitionq.Message
	for _, p := range []string{"1", "2", "3"} {
		ms = append(ms, partitionq.Message{Key: "k", Payload: []byte(p)})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil { // one batch
		t.Fatal(err)
	}
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler of 2 never ran")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w1.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return after the shutdown timeout")
	}
	if err := w1.Stop(context.Background()); err != nil { // safe twice
		t.Fatal(err)
	}
	<-w1.Done()
	if got := l1.okSeq("k"); !reflect.DeepEqual(got, []string{"1"}) {
		t.Fatalf("before the stop k handled %v, want [1]", got)
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if s := st.SlotStatus[0]; s.Owner != nil || !s.InBatch {
		t.Fatalf("after stop: owner %+v, open batch %v; want no owner and the batch left open", s.Owner, s.InBatch)
	}
	// The next worker gets the same batch: nothing is lost, and only what
	// was not done runs again (all of it without progress).
	l2 := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return nil }}
	b.worker(t, partitionq.WorkerConfig{Handler: l2, DisableProgress: disableProgress})
	l2.waitOK(t, "k", len(want))
	if got := l2.okSeq("k"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart k handled %v, want %v", got, want)
	}
	pgtest.WaitFor(t, 10*time.Second, "batch finished", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && !st.SlotStatus[0].InBatch, err
	})
}

// HandlerTimeout bounds a handler call: a call that waits on its context
// sees it end with DeadlineExceeded at about the timeout, the call counts
// as a failure, and the event runs again (pause policy) with the key held
// until then; a call that does not look at its context has the deadline too.
func TestHandlerTimeoutEndsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	const timeout = 100 * time.Millisecond
	var sawErr atomic.Value
	var waited, leftIn atomic.Int64
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		if left := time.Until(d); left > timeout || left <= 0 {
			leftIn.Store(int64(left))
			return errors.New("deadline not within the timeout")
		}
		if string(ev.Payload) == "0" && ev.Attempt == 1 {
			start := time.Now()
			<-ctx.Done()
			waited.Store(int64(time.Since(start)))
			sawErr.Store(ctx.Err())
			return ctx.Err()
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond}, Limits: partitionq.LimitsConfig{HandlerTimeout: timeout}})
	b.send(t, "k", 0, 1)
	pgtest.WaitFor(t, 30*time.Second, "both events handled", func() (bool, error) { return len(l.okSeq("k")) >= 2, nil })
	if n := leftIn.Load(); n != 0 {
		t.Fatalf("a call's deadline was %s away, want within %s", time.Duration(n), timeout)
	}
	if err, _ := sawErr.Load().(error); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the waiting call's context ended with %v, want DeadlineExceeded", err)
	}
	if w := time.Duration(waited.Load()); w < timeout/2 {
		t.Fatalf("the waiting call's context ended after %s, before its timeout %s", w, timeout)
	}
	if got := l.okSeq("k"); got[0] != "0" || got[1] != "1" {
		t.Fatalf("k handled as %v, want [0 1]", got)
	}
	if a := l.attempts("k", "0"); len(a) < 2 || a[0] != 1 || a[1] != 2 {
		t.Fatalf("attempts of event 0 = %v, want 1 (timed out) then 2", a)
	}
}

// A worker's own connections time out on a server they cannot reach
// although the client's pool sets no connect_timeout: the worker gives up
// the attempt, logs it and tries again, instead of waiting forever.
func TestWorkerConnectAttemptsTimeOut(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	px, url := netproxy.Front(t, b.db.URL)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != 0 {
		t.Skipf("the test server's connection string sets connect_timeout (%s)", cfg.ConnConfig.ConnectTimeout)
	}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs pgtest.SyncBuffer
	c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g",
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}

	px.Freeze() // the worker's pool has no connection yet: every attempt hangs
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Resume()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	pgtest.WaitFor(t, 4*connstr.ConnectTimeoutDefault, "the slot to give up a connection attempt", func() (bool, error) {
		l := logs.String()
		return strings.Contains(l, "registering the worker failed; retrying") && strings.Contains(l, "timeout"), nil
	})
}

func TestDrainConcurrencyValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	// A worker-wide number (not per slot), from 1 to 256, whatever Concurrency is.
	for _, bad := range []int{-1, 257} {
		_, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: newRecorder(t), Limits: partitionq.LimitsConfig{Concurrency: 4, DrainConcurrency: bad}})
		if !errors.Is(err, partitionq.ErrInvalid) {
			t.Fatalf("DrainConcurrency %d: %v", bad, err)
		}
	}
	if _, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: newRecorder(t), Limits: partitionq.LimitsConfig{Concurrency: 4, DrainConcurrency: 32}}); err != nil {
		t.Fatal(err)
	}
}
