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
	res, err := b.client.Skip(b.ctx, partitionq.Action{Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Reason: "bad file", Actor: "alice"})
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
	res, err = b.client.Skip(b.ctx, partitionq.Action{Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Actor: "alice", Reason: "again"})
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
