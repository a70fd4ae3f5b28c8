package partitionq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

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
