package demo

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The failure model is a pure function of the event, close to the rate
// asked for, and a tenth of the failing events are poison.
func TestFate(t *testing.T) {
	t.Parallel()
	const n = 200_000
	failing, poison := 0, 0
	for seq := range n {
		f, p := fate("run1", "tenant-007", seq, 0.02)
		if f2, p2 := fate("run1", "tenant-007", seq, 0.02); f2 != f || p2 != p {
			t.Fatalf("seq %d: fate is not stable", seq)
		}
		if f < 0 || f > 3 {
			t.Fatalf("seq %d: %d failures, want 0 to 3", seq, f)
		}
		if f > 0 || p {
			failing++
		}
		if p {
			poison++
		}
	}
	if got := float64(failing) / n; math.Abs(got-0.02) > 0.002 {
		t.Errorf("failing share %.4f, want about 0.02", got)
	}
	if got := float64(poison) / float64(failing); math.Abs(got-PoisonShare) > 0.03 {
		t.Errorf("poison share of failing %.3f, want about %.1f", got, PoisonShare)
	}
	if f, p := fate("run1", "tenant-007", 1, 0); f != 0 || p {
		t.Errorf("fail rate 0: got %d failures, poison %v", f, p)
	}
}

// Each tenant's events are numbered 0, 1, 2, ... in the order they are
// made, and overwrite or delete only files the tenant has.
func TestProducerEventsAreConsistentPerTenant(t *testing.T) {
	t.Parallel()
	cfg := Config{Queue: "q", Group: "g", Tenants: 5, Rate: 100}.WithDefaults()
	p := newProducer(nil, cfg, "run1", newLedger())
	have := map[string]map[string]bool{}
	next := map[string]int{}
	for i := range 5000 {
		var b batch
		if i%500 == 0 {
			p.burst(&b)
		}
		tn := p.pick()
		typ, pl := p.next(tn)
		p.add(&b, tn, typ, pl)
		for _, m := range b.msgs {
			var pl payload
			if err := json.Unmarshal(m.Payload, &pl); err != nil {
				t.Fatal(err)
			}
			if pl.Seq != next[m.Key] {
				t.Fatalf("%s: seq %d, want %d", m.Key, pl.Seq, next[m.Key])
			}
			next[m.Key]++
			files := have[m.Key]
			if files == nil {
				files = map[string]bool{}
				have[m.Key] = files
			}
			switch m.Type {
			case FileCreated:
				files[pl.Path] = true
			case FileOverwritten, FileDeleted:
				if !files[pl.Path] {
					t.Fatalf("%s: %s of %s, which it does not have", m.Key, m.Type, pl.Path)
				}
				if m.Type == FileDeleted {
					delete(files, pl.Path)
				}
			default:
				t.Fatalf("unknown type %q", m.Type)
			}
		}
	}
	if len(next) != 5 {
		t.Errorf("%d tenants sent events, want all 5", len(next))
	}
}

// A run in which an operator skips a blocked tenant's head mid-run still
// checks OK, with the skip counted.
func TestRunWithSkip(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(PoolSize)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := partitionq.NewClient(t.Context(), pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Many failures, poison ones never running out of attempts soon: some
	// tenant is blocked for long enough to skip.
	d, err := New(c, Config{Queue: "files", Group: "storage", Tenants: 8, Rate: 100, Slots: 2, Concurrency: 2,
		FailRate: 0.2, MaxAttempts: 50, BackoffMin: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond, TickMaxLag: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(t.Context()); !errors.Is(err, ErrQueueExists) {
		t.Fatalf("second Setup: %v, want ErrQueueExists", err)
	}
	runCtx, stopRun := context.WithCancel(t.Context())
	defer stopRun()
	if err := d.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background()) // stopped below on the normal path

	// Skip poison heads (attempts > 3 means poison: transient failures
	// succeed by the fourth attempt) until one skip went through.
	skipped := 0
	pgtest.WaitFor(t, 30*time.Second, "a poison head skipped", func() (bool, error) {
		bks, err := c.BlockedKeys(t.Context(), "files", "storage")
		if err != nil {
			return false, err
		}
		for _, bk := range bks {
			if bk.Head.Attempts < 4 {
				continue
			}
			res, err := c.Act(t.Context(), partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "files", Group: "storage", Key: bk.Key, HeadID: bk.Head.ID, Reason: "test"})
			if errors.Is(err, partitionq.ErrHeadBusy) {
				continue
			}
			if err != nil {
				return false, err
			}
			if res.Outcome == partitionq.OutcomeSkipped {
				skipped++
			}
		}
		return skipped > 0, nil
	})
	stopRun()
	if err := d.StopProducing(); err != nil {
		t.Fatal(err)
	}
	// What poison is left: skip it all, so that the run resolves.
	waitCtx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	go func() {
		for waitCtx.Err() == nil {
			bks, _ := c.BlockedKeys(waitCtx, "files", "storage")
			for _, bk := range bks {
				if bk.Head.Attempts >= 4 {
					c.Act(waitCtx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "files", Group: "storage", Key: bk.Key, HeadID: bk.Head.ID, Reason: "test"}) // retried
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if err := d.WaitResolved(waitCtx, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := d.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := d.Check(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Sent == 0 || res.Handled+res.Dead != res.Sent || res.DeadBy["skipped"] == 0 {
		t.Fatalf("check: %s, dead by %v: want OK, every event handled or dead, some skipped", res, res.DeadBy)
	}
}

// Dead letters replayed in the middle of a real run
// (as dlq replay, or r in the console, does), some replays failing and
// dying again, one replayed again, and a skip: the wait ends, nothing is
// counted twice, and the check knows replays (it said "99 order
// violations" and the wait showed "-1 events left").
func TestRunWithReplay(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(PoolSize)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := partitionq.NewClient(t.Context(), pool, partitionq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Many failures, few attempts: dead letters (poison events, which fail
	// every time) come fast, and a poison one's replay dies again; the
	// others succeed by their fourth attempt.
	d, err := New(c, Config{Queue: "files", Group: "storage", Tenants: 6, Rate: 100, Slots: 2, Concurrency: 2,
		FailRate: 0.3, MaxAttempts: 4, BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, TickMaxLag: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(t.Context())
	defer stopRun()
	if err := d.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background()) // stopped below on the normal path

	q := partitionq.DeadLetterQuery{Queue: "files", Group: "storage", Limit: 1000}
	replayed := map[int64]bool{}
	replayAll := func() (int, error) { // what an operator does with dlq replay
		dls, err := c.DeadLetters(t.Context(), q)
		if err != nil {
			return 0, err
		}
		for _, dl := range dls {
			if dl.ReplayID != nil || replayed[dl.ID] {
				continue
			}
			if _, err := c.Replay(t.Context(), partitionq.ReplayRequest{Queue: "files", Group: "storage", ID: dl.ID, Reason: "test", Actor: "tester"}); err != nil {
				return 0, err
			}
			replayed[dl.ID] = true
		}
		return len(replayed), nil
	}
	// While the producer runs: a skip of a head that is failing now (one
	// that would succeed on a later attempt, so that its replay does)...
	pgtest.WaitFor(t, 30*time.Second, "a failing head skipped", func() (bool, error) {
		bks, err := c.BlockedKeys(t.Context(), "files", "storage")
		if err != nil {
			return false, err
		}
		for _, bk := range bks {
			e, ours := d.led.event(bk.Head.ID)
			if bk.State != partitionq.KeyBlocked || !ours {
				continue
			}
			if _, poison := fate(d.run, e.key, e.seq, d.cfg.FailRate); poison {
				continue
			}
			res, err := c.Act(t.Context(), partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "files", Group: "storage", Key: bk.Key, HeadID: bk.Head.ID, Reason: "test"})
			if errors.Is(err, partitionq.ErrHeadBusy) {
				continue
			}
			if err != nil {
				return false, err
			}
			if res.Outcome == partitionq.OutcomeSkipped {
				return true, nil
			}
		}
		return false, nil
	})
	// ...then replays of the dead letters, and of the replays that died again.
	pgtest.WaitFor(t, 60*time.Second, "dead letters replayed mid-run, a replay's among them", func() (bool, error) {
		n, err := replayAll()
		if err != nil {
			return false, err
		}
		dls, err := c.DeadLetters(t.Context(), q)
		if err != nil {
			return false, err
		}
		again := 0
		for _, dl := range dls {
			if _, ours := d.led.event(dl.EventID); !ours && dl.ReplayID != nil {
				again++
			}
		}
		return n >= 4 && again >= 1, nil
	})
	stopRun()
	if err := d.StopProducing(); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := d.WaitResolved(waitCtx, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if left, err := d.Unresolved(t.Context()); err != nil || left != 0 {
		t.Fatalf("unresolved after the wait: %d, %v", left, err)
	}
	if err := d.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := d.Check(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rp := res.Replays
	if !res.OK() || res.Handled+res.Dead != res.Sent || rp.Replays < 4 || rp.Handled+rp.Dead != rp.Replays || rp.Dead == 0 || rp.Handled == 0 || res.DeadBy["skipped"] == 0 {
		t.Fatalf("check: %s; replays %+v; dead by %v: want OK, every event and replay handled or dead, some replays handled and some dead again, a skip", res.Report, rp, res.DeadBy)
	}
}

// The replay rules can fail: a tenant's event handled while its replay is
// failing, and a replay run before an event sent before it was resolved,
// are violations; a clean log is not.
func TestCheckReplays(t *testing.T) {
	t.Parallel()
	// Events 1 to 3 of key k are sent before event 1 dies (its last
	// failed call ends at tick 5); event 4 after.
	byID := map[int64]sentEvent{1: {key: "k", seq: 0, at: 1}, 2: {key: "k", seq: 1, at: 1}, 3: {key: "k", seq: 2, at: 1}, 4: {key: "k", seq: 3, at: 6}}
	dead := map[int64]bool{1: true}
	replay := map[int64]int64{10: 1} // event 10 replays dead letter of event 1
	fail1 := []call{{id: 1, key: "k", begin: 2, end: 3}, {id: 1, key: "k", begin: 4, end: 5}}
	cases := []struct {
		name       string
		log        []call
		violations int
	}{
		{"in order", slices.Concat(fail1, []call{{id: 2, key: "k", seq: 1, ok: true, begin: 6, end: 7}, {id: 3, key: "k", seq: 2, ok: true, begin: 8, end: 9},
			{id: 10, key: "k", begin: 10, end: 11}, {id: 10, key: "k", ok: true, begin: 12, end: 13}, {id: 4, key: "k", seq: 3, ok: true, begin: 14, end: 15}}), 0},
		{"handled while the replay fails", slices.Concat(fail1, []call{{id: 2, key: "k", seq: 1, ok: true, begin: 6, end: 7}, {id: 3, key: "k", seq: 2, ok: true, begin: 8, end: 9},
			{id: 10, key: "k", begin: 10, end: 11}, {id: 4, key: "k", seq: 3, ok: true, begin: 12, end: 13}, {id: 10, key: "k", ok: true, begin: 14, end: 15}}), 1},
		{"replay overtakes", slices.Concat(fail1, []call{{id: 10, key: "k", ok: true, begin: 6, end: 7},
			{id: 2, key: "k", seq: 1, ok: true, begin: 8, end: 9}, {id: 3, key: "k", seq: 2, ok: true, begin: 10, end: 11}, {id: 4, key: "k", seq: 3, ok: true, begin: 12, end: 13}}), 2},
	}
	for _, c := range cases {
		r := checkReplays(byID, c.log, dead, replay)
		if r.Violations != c.violations || r.Replays != 1 || r.Handled != 1 || r.Lost != 0 {
			t.Errorf("%s: %+v, want %d violations and the replay handled", c.name, r, c.violations)
		}
	}
	if r := checkReplays(byID, fail1, dead, replay); r.Lost != 1 || r.OK() {
		t.Errorf("a replay never handled nor dead: %+v, want lost", r)
	}
}
