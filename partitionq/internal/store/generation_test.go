package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/dbtest"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// ---------------------------------------------------------------- Parents

// mod is the mathematical remainder, as the server computes a slot:
// (h % n + n) % n, never negative.
func mod(h, n int) int { return (h%n + n) % n }

// Parents(n, m, j) is exactly the set of old slots (of n) whose keys new
// slot j (of m) holds some of: checked by brute force over the hash values
// h in [-10^6, 10^6] (h's old slot is h mod n, its new slot h mod m), so a
// parent left out (a new slot would start before an old slot it takes keys
// from is handed off, and run a key in two handlers at once) or a slot
// listed that feeds nothing (a new slot would wait for no reason) shows.
// The range holds many periods (lcm(n, m)) of every pair below.
func TestParentsAreTheOldSlotsANewSlotTakesKeysFrom(t *testing.T) {
	type pair struct{ n, m int }
	var pairs []pair
	for n := 1; n <= 6; n++ {
		for m := 1; m <= 6; m++ {
			if n != m {
				pairs = append(pairs, pair{n, m})
			}
		}
	}
	pairs = append(pairs, pair{8, 12}, pair{12, 8}, pair{12, 18}, pair{18, 12}, pair{9, 6}, pair{10, 15}, pair{7, 256}, pair{256, 7},
		pair{64, 256}, pair{256, 64}, pair{255, 256}, pair{100, 150})
	for _, p := range pairs {
		n, m := p.n, p.m
		// feeds[j*n+i]: some h is in old slot i and in new slot j.
		feeds := make([]bool, m*n)
		for h := -1_000_000; h <= 1_000_000; h++ {
			feeds[mod(h, m)*n+mod(h, n)] = true
		}
		for j := range m {
			var want []int
			for i := range n {
				if feeds[j*n+i] {
					want = append(want, i)
				}
			}
			got := store.Parents(n, m, j)
			if !slices.Equal(got, want) {
				t.Errorf("Parents(%d, %d, %d) = %v, want the old slots that feed it, %v", n, m, j, got, want)
			}
			if m%n == 0 && !slices.Equal(got, []int{j % n}) {
				t.Errorf("Parents(%d, %d, %d) = %v: M a multiple of N, want the one slot j mod N = %d", n, m, j, got, j%n)
			}
		}
	}
}

// ---------------------------------------------------------------- one database

// The resize tests share one database with the engine and partitionq's
// schema, made once: making a database and installing the engine costs
// more than any test here. The first test that needs it makes it and
// TestMain drops it. Each test works on a queue of its own, and keeps what
// it checks in a transaction it rolls back where the engine allows.
var shared dbtest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Close(m.Run())) }

// sharedDB returns the package's database (with the engine of
// PARTITIONQ_ENGINE and partitionq's schema) and its engine.
func sharedDB(t *testing.T) (*pgxpool.Pool, *engine.Engine) {
	t.Helper()
	return shared.Get(t)
}

// ---------------------------------------------------------------- resizes

const resizeGroup = "g"

var resizeQueues atomic.Int64

// newGroup sets up, committed, a group of two slots on a queue of its own
// as Client.Setup does (a queue whose ticker ticks as soon as events
// wait, one engine consumer per slot, the first generation), and returns
// the queue's name.
func newGroup(t *testing.T) (context.Context, *pgxpool.Pool, *engine.Engine, string) {
	t.Helper()
	pool, eng := sharedDB(t)
	ctx := context.Background()
	queue := fmt.Sprintf("resize_%d", resizeQueues.Add(1))
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := eng.CreateQueue(ctx, tx, queue); err != nil {
			return err
		}
		if err := eng.SetQueueConfig(ctx, tx, queue, "ticker_max_lag", "1 microsecond"); err != nil {
			return err
		}
		for s := range 2 {
			if _, err := eng.RegisterConsumer(ctx, tx, queue, fmt.Sprintf("%s#%d/2", resizeGroup, s)); err != nil {
				return err
			}
		}
		return store.EnsureGeneration(ctx, tx, eng.Schema(), queue, resizeGroup)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, pool, eng, queue
}

// inTx runs fn in a transaction it rolls back.
func inTx(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	fn(tx)
}

// refused runs fn in a savepoint of tx, rolled back, and returns its error:
// a refusal aborts the transaction it runs in.
func refused(t *testing.T, ctx context.Context, tx pgx.Tx, fn func(sp pgx.Tx) error) error {
	t.Helper()
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sp.Rollback(ctx) }()
	return fn(sp)
}

// gens reads the group's generations, each summed up as
// "<slots>/<number>/<parent>/<resizing>".
func gens(t *testing.T, ctx context.Context, q db.DB, queue string) ([]store.Generation, []string) {
	t.Helper()
	gs, err := store.Generations(ctx, q, queue, resizeGroup)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%d/%d/%d/%v", g.Slots, g.Number, g.Parent, g.Resizing))
	}
	return gs, out
}

// consumers lists the group's engine consumers.
func consumers(t *testing.T, ctx context.Context, q db.DB, eng *engine.Engine, queue string) []string {
	t.Helper()
	subs, err := eng.Subscriptions(ctx, q, queue, resizeGroup+"#")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range subs {
		out = append(out, s.Consumer)
	}
	return out
}

// One resize of a group at a time: while one is in flight another is
// refused (PQ007) with a message naming the resize in flight and the two
// ways out; Generations reports both generations, the new one resizing,
// with who started it and why.
func TestStartResizeRefusesASecondResizeWhileOneIsInFlight(t *testing.T) {
	ctx, pool, eng, queue := newGroup(t)
	inTx(t, ctx, pool, func(tx pgx.Tx) {
		_, before := gens(t, ctx, tx, queue)
		if !slices.Equal(before, []string{"2/1/0/false"}) {
			t.Fatalf("generations of a new group = %v, want [2/1/0/false]", before)
		}
		gen, err := store.StartResize(ctx, tx, eng.Schema(), queue, resizeGroup, 4, "alice", "more room")
		if err != nil {
			t.Fatal(err)
		}
		if gen != 2 {
			t.Errorf("the resize made generation %d, want 2", gen)
		}
		gs, got := gens(t, ctx, tx, queue)
		if !slices.Equal(got, []string{"2/1/0/false", "4/2/2/true"}) {
			t.Fatalf("generations = %v, want [2/1/0/false 4/2/2/true]", got)
		}
		var role string
		if err := tx.QueryRow(ctx, `select session_user`).Scan(&role); err != nil {
			t.Fatal(err)
		}
		if g := gs[1]; g.Actor != "alice" || g.Reason != "more room" || g.CreatedBy != role || g.Cutover != 0 {
			t.Errorf("the new generation = %+v; want actor alice, reason more room, created by %s, no cutover yet", g, role)
		}
		sig, err := store.Signature(ctx, tx, queue, resizeGroup)
		if err != nil {
			t.Fatal(err)
		}
		if sig != "2:0:false,4:0:true" {
			t.Errorf("signature = %q, want 2:0:false,4:0:true", sig)
		}

		for _, slots := range []int{8, 4, 2} {
			err := refused(t, ctx, tx, func(sp pgx.Tx) error {
				_, err := store.StartResize(ctx, sp, eng.Schema(), queue, resizeGroup, slots, "bob", "")
				return err
			})
			if db.Code(err) != store.CodeResizing {
				t.Errorf("a second resize to %d: %v, want SQLSTATE %s", slots, err, store.CodeResizing)
				continue
			}
			msg := db.Message(err)
			for _, part := range []string{"is being resized from 2 to 4 slots", "(by " + role + ")", "resize --wait", "resize --abort"} {
				if !strings.Contains(msg, part) {
					t.Errorf("the refusal %q does not say %q", msg, part)
				}
			}
		}
		if _, got := gens(t, ctx, tx, queue); !slices.Equal(got, []string{"2/1/0/false", "4/2/2/true"}) {
			t.Errorf("generations after the refusals = %v, want them unchanged", got)
		}
	})
}

// A resize to the slot count the group has is refused (PQ008): there is
// nothing to resize.
func TestStartResizeRefusesTheSlotCountTheGroupHas(t *testing.T) {
	ctx, pool, eng, queue := newGroup(t)
	inTx(t, ctx, pool, func(tx pgx.Tx) {
		_, err := store.StartResize(ctx, tx, eng.Schema(), queue, resizeGroup, 2, "alice", "")
		if db.Code(err) != store.CodeSameSlots {
			t.Errorf("a resize from 2 to 2 slots: %v, want SQLSTATE %s", err, store.CodeSameSlots)
		}
	})
}

// An abort before the cutover leaves the group as it was (one generation,
// its N returned), records it in the audit trail, and lets a new resize
// start; with no resize in flight there is nothing to abort.
func TestAbortResizeKeepsTheOldGeneration(t *testing.T) {
	ctx, pool, eng, queue := newGroup(t)
	inTx(t, ctx, pool, func(tx pgx.Tx) {
		err := refused(t, ctx, tx, func(sp pgx.Tx) error {
			_, err := store.AbortResize(ctx, sp, eng.Schema(), queue, resizeGroup, "alice", "")
			return err
		})
		if db.Code(err) != store.CodeNotTrue {
			t.Errorf("an abort with no resize in flight: %v, want SQLSTATE %s", err, store.CodeNotTrue)
		}
		if _, err := store.StartResize(ctx, tx, eng.Schema(), queue, resizeGroup, 4, "alice", ""); err != nil {
			t.Fatal(err)
		}
		n, err := store.AbortResize(ctx, tx, eng.Schema(), queue, resizeGroup, "bob", "changed my mind")
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("the abort kept %d slots, want 2", n)
		}
		if _, got := gens(t, ctx, tx, queue); !slices.Equal(got, []string{"2/1/0/false"}) {
			t.Errorf("generations after the abort = %v, want [2/1/0/false]", got)
		}
		entries, err := store.ListAudit(ctx, tx, queue, resizeGroup, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Action != "resize" || entries[0].Outcome != "aborted: 2 to 4 slots" ||
			entries[0].Actor != "bob" || entries[0].Reason != "changed my mind" {
			t.Errorf("the newest audit entry = %+v; want bob's resize, aborted: 2 to 4 slots, changed my mind", entries)
		}
		gen, err := store.StartResize(ctx, tx, eng.Schema(), queue, resizeGroup, 8, "alice", "")
		if err != nil {
			t.Fatalf("a resize after the abort: %v", err)
		}
		if gen != 3 { // 2 was the aborted one's: a number names one generation only
			t.Errorf("the resize after the abort made generation %d, want 3", gen)
		}
	})
}

// The cutover is the first tick that sees the resize committed (0 before
// it, with nothing registered); at it the new slots' consumers are
// registered and the old slots' subscriptions recorded for the new slots'
// reads. An abort then unregisters the new consumers, and the old
// generation goes on. The engine's ticks need commits: this test's queue
// keeps what it did.
func TestCutoverRegistersTheNewSlotsAtTheFirstTickThatSeesTheResize(t *testing.T) {
	ctx, pool, eng, queue := newGroup(t)
	old := []string{"g#0/2", "g#1/2"}
	if _, err := store.StartResize(ctx, pool, eng.Schema(), queue, resizeGroup, 4, "alice", ""); err != nil {
		t.Fatal(err)
	}
	tick, err := store.Cutover(ctx, pool, eng.Schema(), queue, resizeGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tick != 0 {
		t.Errorf("cutover %d before any tick after the resize, want 0", tick)
	}
	if got := consumers(t, ctx, pool, eng, queue); !slices.Equal(got, old) {
		t.Errorf("consumers before the cutover = %v, want %v", got, old)
	}
	// The engine ticks a queue with an event waiting.
	if _, err := eng.Insert(ctx, pool, queue, engine.NewEvent{Key: "k", Type: "T", Data: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TickAndAnnounce(ctx, pool); err != nil {
		t.Fatal(err)
	}
	last, err := eng.LastTick(ctx, pool, queue)
	if err != nil {
		t.Fatal(err)
	}
	if tick, err = store.Cutover(ctx, pool, eng.Schema(), queue, resizeGroup, 1); err != nil {
		t.Fatal(err)
	}
	if tick == 0 || tick != last {
		t.Fatalf("cutover %d after a tick that sees the resize, want that tick, %d", tick, last)
	}
	if got, want := consumers(t, ctx, pool, eng, queue), []string{"g#0/2", "g#0/4", "g#1/2", "g#1/4", "g#2/4", "g#3/4"}; !slices.Equal(got, want) {
		t.Errorf("consumers at the cutover = %v, want %v", got, want)
	}
	if again, err := store.Cutover(ctx, pool, eng.Schema(), queue, resizeGroup, 1); err != nil || again != tick {
		t.Errorf("the cutover read again: %d, %v; want the same tick %d", again, err, tick)
	}
	gs, got := gens(t, ctx, pool, queue)
	if !slices.Equal(got, []string{"2/1/0/false", "4/2/2/true"}) {
		t.Fatalf("generations = %v, want [2/1/0/false 4/2/2/true]", got)
	}
	subs, err := eng.Subscriptions(ctx, pool, queue, resizeGroup+"#")
	if err != nil {
		t.Fatal(err)
	}
	var oldSubs []int32
	for _, s := range subs {
		if strings.HasSuffix(s.Consumer, "/2") {
			oldSubs = append(oldSubs, s.SubID)
		}
	}
	parentSubs := slices.Clone(gs[1].ParentSubs)
	slices.Sort(parentSubs)
	slices.Sort(oldSubs)
	if gs[1].Cutover != tick || !slices.Equal(parentSubs, oldSubs) {
		t.Errorf("the new generation: cutover %d, parent subscriptions %v; want %d, %v", gs[1].Cutover, gs[1].ParentSubs, tick, oldSubs)
	}
	remaining, err := lease.RemainingSlots(ctx, pool, queue, resizeGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(remaining) != 2 || !remaining[0] || !remaining[1] {
		t.Errorf("old slots not handed off = %v, want 0 and 1", remaining)
	}

	if _, err := store.AbortResize(ctx, pool, eng.Schema(), queue, resizeGroup, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if got := consumers(t, ctx, pool, eng, queue); !slices.Equal(got, old) {
		t.Errorf("consumers after the abort = %v, want %v", got, old)
	}
	if _, got := gens(t, ctx, pool, queue); !slices.Equal(got, []string{"2/1/0/false"}) {
		t.Errorf("generations after the abort = %v, want [2/1/0/false]", got)
	}
}

// A resize past its cutover hands its old slots off one by one, each by
// its owner at its epoch; once one is handed off the resize can no longer
// be aborted (PQ009), and the last handoff completes it: the new
// generation alone, its resize over, the old consumers gone.
func TestAResizePastItsFirstHandoffCanOnlyComplete(t *testing.T) {
	ctx, pool, eng, queue := newGroup(t)
	old := []string{"g#0/2", "g#1/2"}
	if _, err := store.StartResize(ctx, pool, eng.Schema(), queue, resizeGroup, 4, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Insert(ctx, pool, queue, engine.NewEvent{Key: "k", Type: "T", Data: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TickAndAnnounce(ctx, pool); err != nil {
		t.Fatal(err)
	}
	cutover, err := store.Cutover(ctx, pool, eng.Schema(), queue, resizeGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cutover == 0 {
		t.Fatal("no cutover after a tick that sees the resize")
	}
	// The old slots drain to the cutover, as a worker's batches do (bounded
	// at it), and are owned at epoch 5.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		infos, err := eng.NextBatches(ctx, tx, queue, old, 0)
		if err != nil {
			return err
		}
		if infos, err = eng.BoundBatches(ctx, tx, queue, infos, cutover); err != nil {
			return err
		}
		var ids []int64
		for _, b := range infos {
			if b.ID != 0 {
				ids = append(ids, b.ID)
			}
		}
		if _, err := eng.FinishBatches(ctx, tx, ids); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `with w as (insert into partitionq.worker (identity, lease_until, schema_version)
			                              values ('store_test', now() + interval '1 hour', $1) returning id)
			update partitionq.slot s set worker_id = w.id, epoch = 5, since = now() from w
			 where s.queue = $2 and s.grp = $3 and s.generation = 1`, store.Latest(), queue, resizeGroup)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := eng.Positions(ctx, pool, queue, old); err != nil || !slices.Equal(pos, []int64{cutover, cutover}) {
		t.Fatalf("the old slots stand at %v (%v), want the cutover %d", pos, err, cutover)
	}

	inTx(t, ctx, pool, func(tx pgx.Tx) {
		if _, err := store.Handoff(ctx, tx, eng.Schema(), queue, resizeGroup, 0, 4); db.Code(err) != "PQ001" {
			t.Errorf("a handoff at another epoch: %v, want SQLSTATE PQ001 (not the owner)", err)
		}
	})
	done, err := store.Handoff(ctx, pool, eng.Schema(), queue, resizeGroup, 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if done {
		t.Error("the handoff of the first of two old slots completed the resize")
	}
	remaining, err := lease.RemainingSlots(ctx, pool, queue, resizeGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(remaining) != 1 || !remaining[1] {
		t.Errorf("old slots not handed off = %v, want slot 1 alone", remaining)
	}
	_, err = store.AbortResize(ctx, pool, eng.Schema(), queue, resizeGroup, "alice", "")
	if db.Code(err) != store.CodePastCutover {
		t.Errorf("an abort after a handoff: %v, want SQLSTATE %s", err, store.CodePastCutover)
	}

	if done, err = store.Handoff(ctx, pool, eng.Schema(), queue, resizeGroup, 1, 5); err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Error("the handoff of the last old slot did not complete the resize")
	}
	if _, got := gens(t, ctx, pool, queue); !slices.Equal(got, []string{"4/2/2/false"}) {
		t.Errorf("generations after the resize = %v, want [4/2/2/false]", got)
	}
	if sig, err := store.Signature(ctx, pool, queue, resizeGroup); err != nil || sig != fmt.Sprintf("4:%d:false", cutover) {
		t.Errorf("signature after the resize = %q (%v), want 4:%d:false", sig, err, cutover)
	}
	if got, want := consumers(t, ctx, pool, eng, queue), []string{"g#0/4", "g#1/4", "g#2/4", "g#3/4"}; !slices.Equal(got, want) {
		t.Errorf("consumers after the resize = %v, want %v", got, want)
	}
	if remaining, err := lease.RemainingSlots(ctx, pool, queue, resizeGroup, 1); err != nil || len(remaining) != 0 {
		t.Errorf("old slots after the resize = %v (%v), want none", remaining, err)
	}
}
