package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Status counts each slot's unfinished events exactly under skew: 90% of
// the events on one key. Before any worker runs every event is pending on
// its key's slot; while the hot key's handler is held after 300 of its
// events, its slot's pending is exactly what is left of it (the recorded
// progress of the open batch: a watermark stopped at the held event, and
// the other keys' events resolved above it), and the other slots are at 0.
func TestStatusPendingExactUnderSkew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, hotEvents, coldKeys, coldEach = 4, 900, 50, 2
	b.group(t, n)
	want := make([]int64, n)
	hotSlot, err := b.client.SlotOf(b.ctx, "hot", n)
	if err != nil {
		t.Fatal(err)
	}
	var ms []partitionq.Message
	for i := range hotEvents {
		ms = append(ms, partitionq.Message{Key: "hot", Type: "T", Payload: []byte(fmt.Sprint(i))})
		if i%(hotEvents/(coldKeys*coldEach)) == 0 { // the cold keys' events interleaved with the hot ones
			k := fmt.Sprintf("cold-%d", len(ms)%coldKeys)
			ms = append(ms, partitionq.Message{Key: k, Type: "T", Payload: []byte("c")})
		}
	}
	for _, m := range ms {
		s, err := b.client.SlotOf(b.ctx, m.Key, n)
		if err != nil {
			t.Fatal(err)
		}
		want[s]++
	}
	sentAt := time.Now()
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, s := range st.SlotStatus {
		if s.Pending != want[i] {
			t.Errorf("before any worker: slot %d pending %d, want %d", i, s.Pending, want[i])
		}
		if (s.Pending > 0) != (s.Oldest > 0) {
			t.Errorf("slot %d: pending %d but oldest %s", i, s.Pending, s.Oldest)
		}
		total += s.Pending
	}
	if st.Pending != total || total != int64(len(ms)) {
		t.Errorf("group pending %d, slots' sum %d, sent %d", st.Pending, total, len(ms))
	}

	const handleFirst = 300
	release := make(chan struct{})
	var released sync.Once
	unhold := func() { released.Do(func() { close(release) }) }
	var hotDone atomic.Int64
	var once sync.Once
	held := make(chan struct{})
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key != "hot" {
			return nil
		}
		if hotDone.Load() == handleFirst {
			once.Do(func() { close(held) })
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		hotDone.Add(1)
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Limits: partitionq.LimitsConfig{Concurrency: 8}})
	t.Cleanup(unhold) // before the worker's stop, which waits for the handler
	<-held
	wantHot := want[hotSlot] - handleFirst - (want[hotSlot] - hotEvents) // the hot slot's cold keys are done too
	var last partitionq.GroupStatus
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("slot %d pending %d, the others 0", hotSlot, wantHot), func() (bool, error) {
		last, err = b.client.Status(b.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for i, s := range last.SlotStatus {
			if (i == hotSlot && s.Pending != wantHot) || (i != hotSlot && s.Pending != 0) {
				return false, nil
			}
			if i != hotSlot && want[i] > 0 && s.SinceFinish < 0 { // its batch is done: its finish follows
				return false, nil
			}
		}
		return true, nil
	})
	hs := last.SlotStatus[hotSlot]
	if !hs.InBatch || hs.Oldest < time.Since(sentAt)-time.Second || hs.Oldest <= 0 {
		t.Errorf("held hot slot: in batch %v, oldest unfinished %s (sent %s ago)", hs.InBatch, hs.Oldest, time.Since(sentAt))
	}
	for i, s := range last.SlotStatus {
		if i != hotSlot && want[i] > 0 && (s.SinceFinish < 0 || s.SinceFinish > time.Minute || s.Oldest != 0) {
			t.Errorf("slot %d done: since last finish %s, oldest %s", i, s.SinceFinish, s.Oldest)
		}
	}
	// The minute's rate counts whole seconds: once the current one passed,
	// it holds every event the hot slot handled.
	doneHot := float64(want[hotSlot] - wantHot)
	pgtest.WaitFor(t, 10*time.Second, fmt.Sprintf("slot %d: %v handled in the minute", hotSlot, doneHot), func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && math.Abs(st.SlotStatus[hotSlot].Rates.Handled1m*60-doneHot) < 1e-6, err
	})
	unhold()
	pgtest.WaitFor(t, 30*time.Second, "nothing pending", func() (bool, error) {
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && st.Pending == 0, err
	})
}

// The rates Status reports come from the database and match a steady load:
// 100 events a second for 11 seconds, one in ten failing (dead-lettered at
// its first attempt). The truth is what the handler did: its calls are
// timed, and Status's rates over the last 10 s and minute (whole seconds
// before the current one) must be within 10% of the calls in those seconds.
func TestStatusRatesSteadyLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	var mu sync.Mutex
	var okAt, failAt []time.Time
	errBad := errors.New("bad event")
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Type == "Bad" {
			failAt = append(failAt, time.Now())
			return errBad
		}
		okAt = append(okAt, time.Now())
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{MaxAttempts: 1}})
	const perTick, every, seconds = 5, 50 * time.Millisecond, 11
	tk := time.NewTicker(every)
	defer tk.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < seconds*time.Second {
		<-tk.C
		ms := make([]partitionq.Message, perTick)
		for i := range ms {
			typ := "Good"
			if (sent+i)%10 == 0 {
				typ = "Bad"
			}
			ms[i] = partitionq.Message{Key: fmt.Sprintf("k%d", (sent+i)%37), Type: typ, Payload: []byte("{}")}
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		sent += perTick
	}
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	now := st.At.Truncate(time.Second)
	mu.Lock()
	in := func(ts []time.Time, w time.Duration) float64 {
		n := 0
		for _, at := range ts {
			if !at.Before(now.Add(-w)) && at.Before(now) {
				n++
			}
		}
		return float64(n) / w.Seconds()
	}
	truth := partitionq.Rates{Handled10s: in(okAt, 10*time.Second), Failed10s: in(failAt, 10*time.Second),
		Handled1m: in(okAt, time.Minute), Failed1m: in(failAt, time.Minute)}
	mu.Unlock()
	t.Logf("sent %.0f/s; handler: %+v; status: %+v", float64(perTick)/every.Seconds(), truth, st.Rates)
	within := func(what string, got, want float64) {
		if want <= 0 || math.Abs(got-want) > 0.1*want {
			t.Errorf("%s: %.2f/s, the handler did %.2f/s: not within 10%%", what, got, want)
		}
	}
	within("handled over 10 s", st.Rates.Handled10s, truth.Handled10s)
	within("failed over 10 s", st.Rates.Failed10s, truth.Failed10s)
	within("handled over 1 min", st.Rates.Handled1m, truth.Handled1m)
	within("failed over 1 min", st.Rates.Failed1m, truth.Failed1m)
	var sum partitionq.Rates
	for _, s := range st.SlotStatus {
		if s.Rates.Handled10s <= 0 {
			t.Errorf("slot %d: no handled rate", s.Slot)
		}
		sum.Handled10s += s.Rates.Handled10s
		sum.Failed1m += s.Rates.Failed1m
	}
	if math.Abs(sum.Handled10s-st.Rates.Handled10s) > 1e-9 || math.Abs(sum.Failed1m-st.Rates.Failed1m) > 1e-9 {
		t.Errorf("group rates %+v are not the sum of the slots' %+v", st.Rates, sum)
	}
}

// An event the engine's retry mover puts back into the stream belongs to
// the consumer that retried it (ev_owner): it counts for that slot only,
// never for another group reading the same queue, whose pending stays the
// number of events sent.
func TestStatusPendingCountsOnlyOwnRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "other", Slots: 3}); err != nil {
		t.Fatal(err)
	}
	var calls sync.Map // event id -> *atomic.Int32
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		n, _ := calls.LoadOrStore(ev.ID, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 && ev.Key == "retried" {
			return errors.New("first attempt fails")
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{Policy: partitionq.PolicyRetryLater, BackoffMin: 50 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	var ms []partitionq.Message
	for i := range 19 {
		ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte("{}")})
	}
	ms = append(ms, partitionq.Message{Key: "retried", Type: "T", Payload: []byte("{}")})
	ids, err := b.client.SendBatch(b.ctx, "q", ms)
	if err != nil {
		t.Fatal(err)
	}
	retried := ids[len(ids)-1].ID
	pgtest.WaitFor(t, 30*time.Second, "the retried event handled again, and group g done", func() (bool, error) {
		n, ok := calls.Load(retried)
		if !ok || n.(*atomic.Int32).Load() < 2 {
			return false, nil
		}
		st, err := b.client.Status(b.ctx, "q", "g")
		return err == nil && st.Pending == 0, err
	})
	st, err := b.client.Status(b.ctx, "q", "other")
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != int64(len(ms)) {
		t.Errorf("group other: %d pending, want the %d events sent (the retried copy is g's)", st.Pending, len(ms))
	}
}
