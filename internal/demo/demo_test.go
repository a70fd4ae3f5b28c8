package demo

import (
	"context"
	"encoding/json"
	"errors"
	"math"
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
	cfg.MaxConns = int32(PoolConns)
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
	defer d.Stop(context.Background()) //nolint:errcheck // stopped below on the normal path

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
			res, err := c.Skip(t.Context(), partitionq.Action{Queue: "files", Group: "storage", Key: bk.Key, HeadID: bk.Head.ID, Reason: "test"})
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
					c.Skip(waitCtx, partitionq.Action{Queue: "files", Group: "storage", Key: bk.Key, HeadID: bk.Head.ID, Reason: "test"}) //nolint:errcheck // retried
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
