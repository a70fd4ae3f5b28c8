package partitionq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// takeOver makes "another worker" the owner of slot 0 at a new epoch, as a
// takeover does, while the real owner still runs its handlers and still
// holds a lease of its own: a zombie, forced, not hoped for. The other
// worker's row has a lease that does not run out, so the zombie cannot take
// the slot back.
func (b *bundle) takeOver(t *testing.T) {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(b.ctx, `insert into partitionq.worker (identity, lease_until, backend_pid, schema_version)
		values ('the new owner', clock_timestamp() + interval '1 hour', pg_backend_pid(), (select max(version) from partitionq.schema_version)) returning id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `update partitionq.slot set worker_id = $1, epoch = epoch + 1 where queue = 'q' and grp = 'g' and slot = 0`, id); err != nil {
		t.Fatal(err)
	}
}

// gate is a handler that blocks the event with payload "gated" until
// released, and does what then says.
type gate struct {
	inside  chan *partitionq.Event
	release chan struct{}
	then    func(ctx context.Context, ev *partitionq.Event) error
}

func newGate(then func(ctx context.Context, ev *partitionq.Event) error) *gate {
	return &gate{inside: make(chan *partitionq.Event, 10), release: make(chan struct{}), then: then}
}

func (g *gate) Handle(ctx context.Context, ev *partitionq.Event) error {
	if string(ev.Payload) == "gated" {
		g.inside <- ev
		<-g.release // ignores ctx on purpose: it returns after the takeover
	}
	return g.then(ctx, ev)
}

func (b *bundle) openBatch(t *testing.T) bool {
	t.Helper()
	var open bool
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select sub_batch is not null from pgq.subscription`)).Scan(&open); err != nil {
		t.Fatal(err)
	}
	return open
}

func (b *bundle) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(sql)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A worker that lost its slot while a handler ran commits nothing more for
// it: not the batch's finish (a success), not the park of a failed head, not
// a dead letter. Each write is refused by the epoch check in its own
// transaction; the batch stays open for the slot's new owner.
func TestZombieCommitsNothing(t *testing.T) {
	t.Parallel()
	for name, then := range map[string]func(context.Context, *partitionq.Event) error{
		"finish":      func(context.Context, *partitionq.Event) error { return nil },
		"park":        func(context.Context, *partitionq.Event) error { return errors.New("boom") },
		"dead letter": func(context.Context, *partitionq.Event) error { return partitionq.DeadLetterNow(errors.New("poison")) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, 1)
			g := newGate(then)
			w := b.worker(t, partitionq.WorkerConfig{Handler: g, Ownership: partitionq.OwnershipConfig{LeaseDuration: time.Hour}})
			if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("gated")}); err != nil {
				t.Fatal(err)
			}
			<-g.inside
			b.takeOver(t)
			close(g.release)
			// The worker finds out at its next transaction for the slot (the
			// finish) and stops the slot; nothing of it was written.
			pgtest.WaitFor(t, 10*time.Second, "the zombie to give the slot up", func() (bool, error) {
				return !w.Stats()[0].Owned, nil
			})
			if !b.openBatch(t) {
				t.Fatal("the zombie finished the batch")
			}
			if n := b.count(t, `select count(*) from pgq.retry_queue`); n != 0 {
				t.Fatalf("the zombie parked %d events", n)
			}
			if n := b.count(t, `select count(*) from partitionq.dead_letter`); n != 0 {
				t.Fatalf("the zombie wrote %d dead letters", n)
			}
			if n := b.count(t, `select count(*) from partitionq.slot_progress where batch_id is not null and done_below > 0`); n != 0 {
				t.Fatalf("the zombie recorded progress of the batch")
			}
		})
	}
}

// A zombie's drain of a blocked key commits nothing: the head stays parked,
// its failure record and the waiting events unchanged.
func TestZombieDrainCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	failing := true
	g := newGate(func(context.Context, *partitionq.Event) error { return nil })
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		if failing && string(ev.Payload) == "gated" {
			return errors.New("not yet")
		}
		return g.Handle(ctx, ev)
	})
	w := b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{BackoffMin: time.Hour}, Ownership: partitionq.OwnershipConfig{LeaseDuration: time.Hour}})
	if _, err := b.client.SendBatch(b.ctx, "q", []partitionq.Message{{Key: "k", Payload: []byte("gated")}, {Key: "k", Payload: []byte("next")}}); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 10*time.Second, "k blocked", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && bk.Waiting == 1, err
	})
	failing = false
	if _, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditRetry, Queue: "q", Group: "g", Key: "k", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	<-g.inside // the drain runs the head, holding its row lock
	b.takeOver(t)
	close(g.release)
	pgtest.WaitFor(t, 10*time.Second, "the zombie to give the slot up", func() (bool, error) { return !w.Stats()[0].Owned, nil })
	bk, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
	if err != nil || bk.Waiting != 1 || bk.Head.Attempts != 1 {
		t.Fatalf("after the zombie's drain: %+v, %v; want the head still parked with its one failure and one event waiting", bk, err)
	}
}

// A handler's own write checked with CheckOwner fails once the slot was
// taken over: the fencing token in the handler's transaction.
func TestCheckOwnerFencesTheHandlersWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	if _, err := b.pool.Exec(b.ctx, `create table effects (ev_id bigint primary key)`); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	g := newGate(func(ctx context.Context, ev *partitionq.Event) error {
		err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `insert into effects values ($1)`, ev.ID); err != nil {
				return err
			}
			return b.client.CheckOwner(context.Background(), tx, ev)
		})
		result <- err
		return err
	})
	b.worker(t, partitionq.WorkerConfig{Handler: g, Ownership: partitionq.OwnershipConfig{LeaseDuration: time.Hour}})
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("gated")}); err != nil {
		t.Fatal(err)
	}
	ev := <-g.inside
	if ev.Epoch == 0 {
		t.Fatal("the event carries no fencing token")
	}
	b.takeOver(t)
	close(g.release)
	if err := <-result; !errors.Is(err, partitionq.ErrNotOwner) {
		t.Fatalf("the zombie's write: %v, want ErrNotOwner", err)
	}
	if n := b.count(t, `select count(*) from effects`); n != 0 {
		t.Fatalf("the zombie's write committed (%d rows)", n)
	}
}

// An exactly-once handler (TxHandler) of a zombie commits nothing: its
// write and the event's completion roll back together.
func TestZombieTxHandlerCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	if _, err := b.pool.Exec(b.ctx, `create table effects (ev_id bigint primary key)`); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}, 1), make(chan struct{})
	w := b.worker(t, partitionq.WorkerConfig{
		Handler: partitionq.InTx(partitionq.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, ev *partitionq.Event) error {
			if _, err := tx.Exec(ctx, `insert into effects values ($1)`, ev.ID); err != nil {
				return err
			}
			inside <- struct{}{}
			<-release
			return nil
		})),
		Ownership: partitionq.OwnershipConfig{LeaseDuration: time.Hour},
	})
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	<-inside
	b.takeOver(t)
	close(release)
	pgtest.WaitFor(t, 10*time.Second, "the zombie to give the slot up", func() (bool, error) { return !w.Stats()[0].Owned, nil })
	if n := b.count(t, `select count(*) from effects`); n != 0 {
		t.Fatalf("the zombie's write committed (%d rows)", n)
	}
	if n := b.count(t, `select count(*) from partitionq.slot_done`); n != 0 {
		t.Fatalf("the zombie recorded its event as done")
	}
}
