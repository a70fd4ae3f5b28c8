package partitionq_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

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
