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

func TestDropGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	l := &handlingLog{decide: func(context.Context, *partitionq.Event) error { return errBoom }}
	w := b.worker(t, partitionq.WorkerConfig{Handler: l, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}})
	b.send(t, "k", 1, 2)
	pgtest.WaitFor(t, 30*time.Second, "k blocked", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == 1, err
	})
	drop := partitionq.DropGroupRequest{Queue: "q", Group: "g", Reason: "moving to 8 slots"}
	if err := b.client.DropGroup(b.ctx, drop); err == nil || !strings.Contains(err.Error(), "live worker") {
		t.Fatalf("drop while a worker runs: %v", err)
	}
	if err := w.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.client.DropGroup(b.ctx, drop); err == nil || !strings.Contains(err.Error(), "2 events set aside") {
		t.Fatalf("drop with events set aside: %v", err)
	}
	drop.Force = true
	if err := b.client.DropGroup(b.ctx, drop); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Group(b.ctx, "q", "g"); !errors.Is(err, partitionq.ErrNoSuchGroup) {
		t.Fatalf("after drop: %v", err)
	}
	var rq int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select count(*) from pgq.retry_queue`)).Scan(&rq); err != nil || rq != 0 {
		t.Fatalf("retry queue rows after a forced drop: %d, %v", rq, err)
	}
	// A new group with another N can be set up on the same queue.
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 8}); err != nil {
		t.Fatal(err)
	}
}
