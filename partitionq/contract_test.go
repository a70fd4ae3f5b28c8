// The contract suite: the library's public promises (parallelism, fixed slots, bad input, hostile strings, an untouched engine) checked through the whole API, so it is named for the contract, not one file.

package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// With a blocking handler: keys on different slots, and two keys on one slot
// (concurrency > 1), are inside the handler at the same time; two events of
// one key never are.
func TestParallelism(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	a1, a2 := b.sameSlotKeys(t, 2) // same slot
	sa, err := b.client.SlotOf(b.ctx, a1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var other string
	for i := 0; other == ""; i++ {
		k := fmt.Sprintf("other-%d", i)
		if s, _ := b.client.SlotOf(b.ctx, k, 2); s != sa {
			other = k
		}
	}
	var mu sync.Mutex
	inside := map[string]int{}
	maxSameKey := 0
	allIn := make(chan struct{})
	release := make(chan struct{})
	var once, relOnce sync.Once
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		mu.Lock()
		inside[ev.Key]++
		maxSameKey = max(maxSameKey, inside[ev.Key])
		if inside[a1] > 0 && inside[a2] > 0 && inside[other] > 0 {
			once.Do(func() { close(allIn) })
		}
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		mu.Lock()
		inside[ev.Key]--
		mu.Unlock()
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Limits: partitionq.LimitsConfig{Concurrency: 4}})
	t.Cleanup(func() { relOnce.Do(func() { close(release) }) }) // runs before the worker's stop
	// One transaction, so one batch per slot: in-slot concurrency is among
	// the events of the batch the slot is in (a slot takes its next batch
	// when every event of the current one is resolved).
	var ms []partitionq.Message
	for _, k := range []string{a1, a2, other} {
		for i := 1; i <= 3; i++ {
			ms = append(ms, partitionq.Message{Key: k, Payload: []byte(fmt.Sprint(i))})
		}
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	select {
	case <-allIn:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("never all three keys inside the handler at once: %v", inside)
	}
	relOnce.Do(func() { close(release) })
	b.waitCaughtUp(t)
	mu.Lock()
	defer mu.Unlock()
	if maxSameKey != 1 {
		t.Fatalf("%d events of one key were inside the handler at once", maxSameKey)
	}
}

// waitCaughtUp waits until, by the engine's account, every slot has read
// everything and nothing is set aside.
func (b *bundle) waitCaughtUp(t *testing.T) partitionq.GroupStatus {
	t.Helper()
	var st partitionq.GroupStatus
	pgtest.WaitFor(t, 30*time.Second, "every slot caught up", func() (bool, error) {
		var err error
		st, err = b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for _, s := range st.SlotStatus {
			if s.QueuePending > 0 || s.InBatch || s.SetAside > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	return st
}

func TestFixedN(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	// Setup again with the same N is idempotent.
	res, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 4})
	if err != nil || res.Registered != 0 || res.QueueCreated || res.Slots != 4 {
		t.Fatalf("second setup: %+v, %v", res, err)
	}
	_, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 8})
	var mm *partitionq.SlotCountMismatchError
	if !errors.As(err, &mm) || mm.Existing != 4 || mm.Requested != 8 {
		t.Fatalf("setup with another N: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "4 slots, not 8") {
		t.Fatalf("the error does not name both values: %s", msg)
	}
	_, err = b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", SlotCount: 8, Handler: newRecorder(t)})
	if !errors.As(err, &mm) || mm.Existing != 4 || mm.Requested != 8 {
		t.Fatalf("worker with another N: %v", err)
	}
	g, err := b.client.Group(b.ctx, "q", "g")
	if err != nil || g.Slots != 4 || !reflect.DeepEqual(g.Consumers, []string{"g#0/4", "g#1/4", "g#2/4", "g#3/4"}) {
		t.Fatalf("group = %+v, %v", g, err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	invalid := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, partitionq.ErrInvalid) {
			t.Errorf("%s: %v, want a validation error", what, err)
			return
		}
		var ve *partitionq.ValidationError
		if !errors.As(err, &ve) || ve.Problem == "" || ve.Fix == "" {
			t.Errorf("%s: %v does not say what is wrong and what to do", what, err)
		}
	}
	for _, n := range []int{0, -1, partitionq.MaxSlots + 1, 1 << 30} {
		_, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q2", Group: "g", Slots: n})
		invalid(fmt.Sprintf("N=%d", n), err)
	}
	for _, name := range []string{"", "a b", "q'; drop table x; --", "é", strings.Repeat("a", 49), "-x", "g#1/2", "x/y"} {
		_, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: name, Group: "g", Slots: 1})
		invalid("queue "+name, err)
		_, err = b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: name, Slots: 1})
		invalid("group "+name, err)
	}
	for _, key := range []string{"", "a\x00b", "\xff\xfe", strings.Repeat("k", partitionq.MaxKeyLen+1)} {
		_, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: key, Payload: []byte("{}")})
		invalid(fmt.Sprintf("key %q", key), err)
	}
	_, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("a\x00")})
	invalid("NUL payload", err)
	// A bad message in a batch: nothing of the batch is sent, and the error names it.
	_, err = b.client.SendBatch(b.ctx, "q", []partitionq.Message{{Key: "ok", Payload: []byte("1")}, {Key: "bad\x00", Payload: []byte("2")}})
	var be *partitionq.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, partitionq.ErrInvalid) {
		t.Fatalf("bad batch: %v", err)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select count(*) from pgq.event_1`)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d events written by rejected sends", n)
	}
	if _, err := b.client.Send(b.ctx, "nosuch", partitionq.Message{Key: "k"}); !errors.Is(err, partitionq.ErrNoSuchQueue) {
		t.Fatalf("send to a missing queue: %v", err)
	}
	// An empty batch sends nothing and checks the queue (a producer's check).
	if _, err := b.client.SendBatch(b.ctx, "nosuch", nil); !errors.Is(err, partitionq.ErrNoSuchQueue) {
		t.Fatalf("an empty batch to a missing queue: %v, want ErrNoSuchQueue", err)
	}
	if res, err := b.client.SendBatch(b.ctx, "q", nil); err != nil || len(res) != 0 {
		t.Fatalf("an empty batch to q: %v, %v; want nothing sent and no error", res, err)
	}
	if _, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "nosuch", Handler: newRecorder(t)}); !errors.Is(err, partitionq.ErrNoSuchGroup) {
		t.Fatalf("worker of a missing group: %v", err)
	}
	for name, cfg := range map[string]partitionq.WorkerConfig{
		"no handler":   {Queue: "q", Group: "g"},
		"concurrency":  {Queue: "q", Group: "g", Handler: newRecorder(t), Limits: partitionq.LimitsConfig{Concurrency: -1}},
		"policy":       {Queue: "q", Group: "g", Handler: newRecorder(t), Retry: partitionq.RetryConfig{Policy: "drop"}},
		"slots":        {Queue: "q", Group: "g", Handler: newRecorder(t), Pins: []int{2}},
		"backoff":      {Queue: "q", Group: "g", Handler: newRecorder(t), Retry: partitionq.RetryConfig{BackoffMin: time.Minute, BackoffMax: time.Second}},
		"max attempts": {Queue: "q", Group: "g", Handler: newRecorder(t), Retry: partitionq.RetryConfig{MaxAttempts: -2}},
	} {
		_, err := b.client.NewWorker(b.ctx, cfg)
		invalid(name, err)
	}
}

// Quotes and SQL in keys, types and payloads are stored and handled
// literally, never executed.
func TestHostileStringsAreData(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec})
	hostile := []string{`'; drop table pgq.queue; --`, `" or 1=1 --`, `$1`, `\x00`, `%s%n`, "ev_extra1) or (true", `); select pg_sleep(10); --`}
	var ms []partitionq.Message
	for _, h := range hostile {
		ms = append(ms, partitionq.Message{Key: h, Type: h, Payload: []byte(h)})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	rec.waitTotal(t, len(hostile))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, h := range hostile {
		if got := rec.byKey[h]; !reflect.DeepEqual(got, []string{h}) {
			t.Errorf("key %q handled %v", h, got)
		}
	}
	var queues int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select count(*) from pgq.queue`)).Scan(&queues); err != nil || queues != 1 {
		t.Fatalf("queue table: %d, %v", queues, err)
	}
}

// The engine's functions are identical before and after setup and a run.
func TestEngineUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	defs := func() map[string]string {
		rows, err := b.pool.Query(b.ctx, `select p.oid::regprocedure::text, pg_get_functiondef(p.oid)
			from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = $1 and p.prokind = 'f'`, b.db.Schema)
		if err != nil {
			t.Fatal(err)
		}
		m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var kv [2]string
			err := r.Scan(&kv[0], &kv[1])
			return kv, err
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range m {
			out[kv[0]] = kv[1]
		}
		return out
	}
	before := defs()
	if len(before) < 40 {
		t.Fatalf("only %d engine functions found", len(before))
	}
	b.group(t, 4)
	l := &handlingLog{decide: func(_ context.Context, ev *partitionq.Event) error {
		if string(ev.Payload) == "1" && ev.Attempt == 1 {
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 5 * time.Millisecond}})
	b.send(t, "k", 1, 2)
	l.waitOK(t, "k", 2)
	if err := b.client.TickOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	after := defs()
	if !reflect.DeepEqual(before, after) {
		for sig, def := range after {
			if before[sig] != def {
				t.Errorf("engine function %s changed or was added", sig)
			}
		}
		t.Fatalf("engine functions changed: %d before, %d after", len(before), len(after))
	}
}
