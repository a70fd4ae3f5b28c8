package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

func TestGroupsAndKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, bk := b.blockedWithoutWorker(t) // q/g, 2 slots: k blocked on "2", "3" and "4" behind
	// Another queue with two groups, one of them owned by a worker.
	for _, spec := range []partitionq.GroupSpec{{Queue: "other", Group: "billing", Slots: 3}, {Queue: "other", Group: "audit", Slots: 1}} {
		if _, err := b.client.Setup(b.ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.client.NewWorker(b.ctx, partitionq.WorkerConfig{
		Queue: "other", Group: "billing", Identity: "w-billing",
		Handler:   partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil }),
		Ownership: partitionq.OwnershipConfig{StandbyPoll: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(b.ctx)
	var all []partitionq.GroupOverview
	pgtest.WaitFor(t, 30*time.Second, "billing's 3 slots owned", func() (bool, error) {
		var err error
		all, err = b.client.Groups(b.ctx, partitionq.GroupsQuery{})
		return err == nil && len(all) == 3 && all[1].Owned == 3, err
	})
	want := []partitionq.GroupOverview{
		{Queue: "other", Group: "audit", Slots: 1},
		{Queue: "other", Group: "billing", Slots: 3, Owned: 3, Workers: []string{"w-billing"}},
		{Queue: "q", Group: "g", Slots: 2, SetAside: 3, BlockedKeys: 1},
	}
	for i, g := range all {
		g.Backlog, g.Lag = 0, 0 // the engine's view, checked below
		if g.Queue != want[i].Queue || g.Group != want[i].Group || g.Slots != want[i].Slots || g.Owned != want[i].Owned ||
			len(g.Workers) != len(want[i].Workers) || g.SetAside != want[i].SetAside || g.BlockedKeys != want[i].BlockedKeys ||
			g.DrainingKeys != 0 || g.DeadLetters != 0 || g.Broken != "" {
			t.Errorf("group %d = %+v, want %+v", i, g, want[i])
		}
	}
	if all[1].Workers[0] != "w-billing" {
		t.Errorf("billing's workers = %v", all[1].Workers)
	}
	// One queue's groups: the same overviews, of that queue only.
	other, err := b.client.Groups(b.ctx, partitionq.GroupsQuery{Queue: "other"})
	if err != nil || len(other) != 2 || other[0].Group != "audit" || other[1].Group != "billing" || other[1].Owned != all[1].Owned ||
		other[1].Workers[0] != "w-billing" {
		t.Errorf("Groups of queue other = %+v, %v; want audit, then billing as in every group's list", other, err)
	}
	if qg, err := b.client.Groups(b.ctx, partitionq.GroupsQuery{Queue: "q"}); err != nil || len(qg) != 1 || qg[0].Group != "g" ||
		qg[0].BlockedKeys != 1 || qg[0].SetAside != 3 {
		t.Errorf("Groups of queue q = %+v, %v; want g with its blocked key", qg, err)
	}
	// A queue that does not exist is an error (not an empty list), and so
	// is a name no queue can have.
	if gs, err := b.client.Groups(b.ctx, partitionq.GroupsQuery{Queue: "nosuch"}); !errors.Is(err, partitionq.ErrNoSuchQueue) ||
		!strings.Contains(err.Error(), `no such queue "nosuch": run partitionq setup`) {
		t.Errorf("Groups of a missing queue = %v, %v; want ErrNoSuchQueue saying to run setup", gs, err)
	}
	if _, err := b.client.Groups(b.ctx, partitionq.GroupsQuery{Queue: "no such"}); !errors.Is(err, partitionq.ErrInvalid) {
		t.Errorf("Groups of an invalid queue name: %v; want ErrInvalid", err)
	}

	// The blocked key, found.
	ki, err := b.client.Key(b.ctx, "q", "g", "k")
	if err != nil {
		t.Fatal(err)
	}
	if ki.Slot != bk.Slot || ki.State != partitionq.KeyBlocked || ki.Blocked == nil || ki.Blocked.Head.ID != bk.Head.ID ||
		len(ki.SetAside) != 3 || !ki.SetAside[0].Head || string(ki.SetAside[2].Payload) != "4" || ki.Owner != nil || ki.DeadLetterCount != 0 {
		t.Fatalf("Key(k) = %+v", ki)
	}
	// Skip its head: it drains, with one dead letter.
	if _, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: bk.Head.ID, Reason: "corrupt"}); err != nil {
		t.Fatal(err)
	}
	ki, err = b.client.Key(b.ctx, "q", "g", "k")
	if err != nil || ki.State != partitionq.KeyDraining || len(ki.SetAside) != 2 || !ki.SetAside[0].Head ||
		ki.DeadLetterCount != 1 || ki.PendingDeadLetters != 1 || len(ki.DeadLetters) != 1 || ki.DeadLetters[0].EventID != bk.Head.ID {
		t.Fatalf("Key(k) after the skip = %+v, %v", ki, err)
	}
	all, err = b.client.Groups(b.ctx, partitionq.GroupsQuery{})
	if err != nil || all[2].DrainingKeys != 1 || all[2].BlockedKeys != 0 || all[2].DeadLetters != 1 {
		t.Fatalf("q/g after the skip = %+v, %v", all[2], err)
	}
	// A key never seen flows; its slot's owner is shown.
	ki, err = b.client.Key(b.ctx, "other", "billing", "nobody")
	if err != nil || ki.State != partitionq.KeyFlowing || ki.Blocked != nil || len(ki.SetAside) != 0 || ki.Owner == nil || ki.Owner.Name != "w-billing" {
		t.Fatalf("Key(nobody) = %+v, %v", ki, err)
	}
	if _, err := b.client.Key(b.ctx, "q", "nosuch", "k"); err == nil {
		t.Fatal("Key on a group that does not exist: no error")
	}
}

// queryCounter counts the statements a pool runs.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Groups and Key cost a fixed number of queries: the same for one group of
// 2 slots as for 12 groups of up to 64 slots on 3 queues (not a query per
// group or per slot), and Groups the number its doc says: seven, ten when
// some key is parked, one more for one queue's groups.
func TestGroupsQueriesAreFlat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _ = b.blockedWithoutWorker(t) // q/g, 2 slots, one key blocked
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := partitionq.NewClient(b.ctx, pool, partitionq.Config{EngineSchema: b.client.EngineSchema()})
	if err != nil {
		t.Fatal(err)
	}
	cost := func(fn func() error) int64 {
		t.Helper()
		before := counter.n.Load()
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		return counter.n.Load() - before
	}
	allGroups := func() error { _, err := c.Groups(b.ctx, partitionq.GroupsQuery{}); return err }
	key := func() error { _, err := c.Key(b.ctx, "q", "g", "k"); return err }
	small, smallKey := cost(allGroups), cost(key)
	for i := range 11 {
		spec := partitionq.GroupSpec{Queue: fmt.Sprintf("q%d", i%3), Group: fmt.Sprintf("g%d", i), Slots: 4 << (i % 5)}
		if _, err := b.client.Setup(b.ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	var all []partitionq.GroupOverview
	big := cost(func() error { var err error; all, err = c.Groups(b.ctx, partitionq.GroupsQuery{}); return err })
	if len(all) != 12 {
		t.Fatalf("Groups found %d groups, want 12", len(all))
	}
	if big != small || smallKey != cost(key) {
		t.Fatalf("Groups: %d queries for 1 group, %d for 12; Key: %d then %d: want them flat", small, big, smallKey, cost(key))
	}
	// q/g has a parked key, q0's groups none.
	parkedQueue := cost(func() error { _, err := c.Groups(b.ctx, partitionq.GroupsQuery{Queue: "q"}); return err })
	var q0 []partitionq.GroupOverview
	quietQueue := cost(func() error {
		var err error
		q0, err = c.Groups(b.ctx, partitionq.GroupsQuery{Queue: "q0"})
		return err
	})
	if len(q0) != 4 {
		t.Fatalf("Groups of queue q0 found %d groups, want 4", len(q0))
	}
	if big != 10 || parkedQueue != 11 || quietQueue != 8 {
		t.Fatalf("Groups: %d queries (a key parked), %d for one queue with a parked key, %d for one without: want 10, 11 and 8 (its doc and cli.md say so)",
			big, parkedQueue, quietQueue)
	}
	t.Logf("Groups: %d queries (a key parked); Key: %d queries", big, smallKey)
}
