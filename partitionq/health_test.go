package partitionq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// owned counts the slots w owns now.
func owned(w *partitionq.Worker) int {
	n := 0
	for _, s := range w.Stats() {
		if s.Owned {
			n++
		}
	}
	return n
}

// wantErr fails unless err is an error that mentions want.
func wantErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want an error mentioning %q", what, err, want)
	}
}

// A worker is neither live nor ready before it starts; once started it is
// both, and so is a standby that owns no slot; while it stops it is live
// but not ready; once stopped, neither.
func TestWorkerLiveAndReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	held := make(chan struct{})
	running := make(chan struct{}, 1)
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if ev.Key == "hold" {
			running <- struct{}{}
			<-held
		}
		return nil
	})

	owner, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Live before Start", owner.Live(), "has not started")
	wantErr(t, "Ready before Start", owner.Ready(), "has not started")

	// Both pinned to both slots: the first owns them, the second stands by
	// (identical workers without pins would share them).
	owner = b.worker(t, partitionq.WorkerConfig{Handler: h, Identity: "owner", Pins: []int{0, 1},
		Limits: partitionq.LimitsConfig{ShutdownTimeout: time.Minute}})
	pgtest.WaitFor(t, 30*time.Second, "the owner ready with both slots", func() (bool, error) {
		return owner.Ready() == nil && owned(owner) == 2, nil
	})
	if err := owner.Live(); err != nil {
		t.Fatalf("a ready worker is not live: %v", err)
	}

	standby := b.worker(t, partitionq.WorkerConfig{Handler: h, Identity: "standby", Pins: []int{0, 1}})
	pgtest.WaitFor(t, 30*time.Second, "the standby ready", func() (bool, error) { return standby.Ready() == nil, nil })
	if n := owned(standby); n != 0 {
		t.Fatalf("the standby owns %d slots while the owner runs both", n)
	}
	if err := standby.Live(); err != nil {
		t.Fatalf("the standby is not live: %v", err)
	}

	// A stop that waits for a handler: live, not ready.
	b.send(t, "hold", 1)
	<-running
	stopped := make(chan error, 1)
	go func() { stopped <- owner.Stop(context.Background()) }()
	pgtest.WaitFor(t, 30*time.Second, "the stopping owner not ready", func() (bool, error) {
		return owner.Ready() != nil, nil
	})
	wantErr(t, "Ready while stopping", owner.Ready(), "is stopping")
	if err := owner.Live(); err != nil {
		t.Fatalf("a stopping worker is not live: %v", err)
	}
	close(held)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Live after Stop", owner.Live(), "has stopped")
	wantErr(t, "Ready after Stop", owner.Ready(), "has stopped")

	// The standby takes the slots the owner released, and stays ready.
	pgtest.WaitFor(t, 30*time.Second, "the standby owning both slots", func() (bool, error) {
		return owned(standby) == 2 && standby.Ready() == nil, nil
	})
}

// LivenessTimeout defaults to a minute, or twice a longer lease, and may
// not be shorter than twice the lease.
func TestLivenessTimeoutValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	h := partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil })
	for _, c := range []struct {
		lease, liveness time.Duration
		bad             bool
	}{
		{0, 0, false},
		{time.Minute, 0, false}, // the default follows the lease: 2m
		{5 * time.Second, 10 * time.Second, false},
		{5 * time.Second, 9 * time.Second, true},
		{0, -time.Second, true},
	} {
		_, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{Queue: "q", Group: "g", Handler: h,
			Limits:    partitionq.LimitsConfig{LivenessTimeout: c.liveness},
			Ownership: partitionq.OwnershipConfig{LeaseDuration: c.lease}})
		var ve *partitionq.ValidationError
		switch {
		case c.bad && (!errors.As(err, &ve) || ve.Field != "WorkerConfig.Limits.LivenessTimeout"):
			t.Errorf("lease %s, liveness timeout %s: %v, want a *ValidationError naming WorkerConfig.Limits.LivenessTimeout", c.lease, c.liveness, err)
		case !c.bad && err != nil:
			t.Errorf("lease %s, liveness timeout %s: %v", c.lease, c.liveness, err)
		}
	}
}
