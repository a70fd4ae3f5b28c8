package runner_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// head returns key's head in slot s (nil: the key has nothing parked).
func (g *groupRig) head(s int, key string) *parked.Head {
	g.t.Helper()
	hs, err := parked.Heads(g.ctx, g.pool, g.eng, []parked.Slot{g.slot(s)}, &key)
	if err != nil {
		g.t.Fatal(err)
	}
	if len(hs) == 0 {
		return nil
	}
	return &hs[0]
}

// A blocked key's head is retried (drained) once its next attempt is due,
// and its waiting events run after it; a head whose next attempt is not
// due is left alone: no attempt, its failure record as it was.
func TestADueHeadIsRetriedANotDueOneIsNot(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var c calls
	r := g.start(g.config([]int{0}, runner.Pause, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Attempt > 1 {
			return nil
		}
		switch rc.Event.Data {
		case "soon1":
			return &runner.Result{Err: errors.New("soon1 fails once"), RetryAfter: 100 * time.Millisecond}
		case "late1":
			return &runner.Result{Err: errors.New("late1 fails once"), RetryAfter: time.Hour}
		}
		return nil
	})))
	ids := g.send("soon", "late", "soon", "late")
	soon1, late1, soon2, late2 := ids[0], ids[1], ids[2], ids[3]
	waitFor(t, "soon's events ran after its head's retry", func() bool {
		s := c.of("soon")
		return len(s) == 3 && s[2].ok
	})
	s := c.of("soon")
	if s[0].id != soon1 || s[0].attempt != 1 || s[0].ok || s[1].id != soon1 || s[1].attempt != 2 || !s[1].ok || s[2].id != soon2 {
		t.Errorf("soon ran %+v; want its head failing, its head's second attempt, then its waiting event %d", s, soon2)
	}
	waitFor(t, "soon has nothing parked", func() bool { return g.head(0, "soon") == nil })
	if l := c.of("late"); len(l) != 1 || l[0].id != late1 || l[0].attempt != 1 {
		t.Errorf("late ran %+v; want only its head's first attempt: its next one is an hour away", l)
	}
	h := g.head(0, "late")
	if h == nil || h.ID != late1 || h.Failure == nil || h.Failure.Due || h.Failure.Attempts != 1 || h.Failure.Wait < 50*time.Minute {
		t.Fatalf("late's head %+v (failure %+v); want event %d, not due for about an hour, 1 attempt", h, h.Failure, late1)
	}
	if p := g.parkedIDs(0, "late"); !slices.Equal(p, []int64{late1, late2}) {
		t.Errorf("late's parked events %v, want [%d %d]", p, late1, late2)
	}
	if n := r.stats[0].Failed.Load(); n != 2 {
		t.Errorf("Stats.Failed = %d, want 2", n)
	}
}

// A slot's next owner starts from the blocked keys in the retry queue: a
// key blocked under its previous owner stays blocked (its new events wait
// behind its head, which is not due), while the other keys run.
func TestANewOwnerKeepsAKeyBlocked(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	fail := func(rc runner.Call) *runner.Result {
		if rc.Event.Key == "a" {
			return &runner.Result{Err: errors.New("a fails"), RetryAfter: time.Hour}
		}
		return nil
	}
	var first calls
	r1 := g.start(g.config([]int{0}, runner.Pause, first.handler(fail)))
	a1 := g.send("a")[0]
	g.waitRead(0)
	r1.stop()

	var second calls
	g.start(g.config([]int{0}, runner.Pause, second.handler(nil))) // a's events would succeed now
	ids := g.send("a", "b")
	g.waitRead(0)
	if got := second.list(); len(got) != 1 || got[0].id != ids[1] {
		t.Errorf("the next owner ran %+v; want only b's event %d: a is blocked behind %d", got, ids[1], a1)
	}
	if p := g.parkedIDs(0, "a"); !slices.Equal(p, []int64{a1, ids[0]}) {
		t.Errorf("a's parked events %v, want [%d %d]", p, a1, ids[0])
	}
}

// An event that fails MaxAttempts times is dead-lettered with its
// attempts and error; its key then goes on with its next event.
func TestMaxAttemptsDeadLettersTheHead(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var c calls
	cfg := g.config([]int{0}, runner.Pause, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Event.Data == "a1" {
			return &runner.Result{Err: errors.New("a1 always fails")}
		}
		return nil
	}))
	cfg.MaxAttempts = 3
	r := g.start(cfg)
	ids := g.send("a", "a")
	waitFor(t, "a's second event ran", func() bool {
		a := c.of("a")
		return len(a) > 0 && a[len(a)-1].id == ids[1]
	})
	a := c.of("a")
	if len(a) != 4 || a[0].attempt != 1 || a[1].attempt != 2 || a[2].attempt != 3 || a[3].id != ids[1] {
		t.Errorf("a ran %+v; want a1's attempts 1, 2, 3, then a2", a)
	}
	dls, err := store.ListDeadLetters(g.ctx, g.pool, store.DeadLetterFilter{Queue: g.queue, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EvID != ids[0] || dls[0].Attempts != 3 || dls[0].Reason != "max_attempts" || dls[0].LastError != "a1 always fails" {
		t.Errorf("dead letters %+v; want a1 (%d) after 3 attempts, reason max_attempts", dls, ids[0])
	}
	waitFor(t, "a has nothing parked", func() bool { return g.head(0, "a") == nil })
	if n := r.stats[0].DeadLettered.Load(); n != 1 {
		t.Errorf("Stats.DeadLettered = %d, want 1", n)
	}
}
