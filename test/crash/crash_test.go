package crash

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Two worker processes on the same slots: only the owner processes; kill -9
// the owner and the standby takes over within seconds; order holds across
// the takeover.
func TestOwnershipTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	a := e.start(t, "-slots", "0,1,2,3") // pinned to every slot: the second one stands by
	pgtest.WaitFor(t, 10*time.Second, "A to own all 4 slots", func() (bool, error) {
		o := e.owners(t)
		return len(o) == 4 && o[0] == int32(a.pid()) && o[1] == int32(a.pid()) && o[2] == int32(a.pid()) && o[3] == int32(a.pid()), nil
	})
	b := e.start(t, "-slots", "0,1,2,3")
	sent := map[string]int{}
	batch := func(from, to int) {
		var evs []sentEvent
		for s := from; s < to; s++ {
			for k := 0; k < 20; k++ {
				key := fmt.Sprintf("tenant-%d", k)
				evs = append(evs, sentEvent{key: key, seq: s})
				sent[key] = to
			}
		}
		e.send(t, evs)
	}
	batch(0, 10)
	pgtest.WaitFor(t, 30*time.Second, "200 events handled", func() (bool, error) { return e.resolved(t) == 200, nil })
	var others int
	if err := e.pool.QueryRow(e.ctx, `select count(*) from pq_run_log where pid <> $1`, a.pid()).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Fatalf("the standby handled %d events while A owned every slot", others)
	}
	// Every batch of the 200 finished (not only handled): nothing may repeat.
	pgtest.WaitFor(t, 10*time.Second, "A to finish its batches", func() (bool, error) {
		st, err := e.client.Status(e.ctx, "q", "g")
		if err != nil {
			return false, err
		}
		for _, s := range st.SlotStatus {
			if s.InBatch || s.QueuePending > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	killedAt := time.Now()
	a.kill()
	pgtest.WaitFor(t, 15*time.Second, "B to take over all 4 slots", func() (bool, error) {
		o := e.owners(t)
		return len(o) == 4 && o[0] == int32(b.pid()) && o[1] == int32(b.pid()) && o[2] == int32(b.pid()) && o[3] == int32(b.pid()), nil
	})
	t.Logf("takeover after kill -9: %s", time.Since(killedAt).Round(10*time.Millisecond))
	batch(10, 20)
	pgtest.WaitFor(t, 30*time.Second, "400 events handled", func() (bool, error) { return e.resolved(t) == 400, nil })
	if err := e.pool.QueryRow(e.ctx, `select count(*) from pq_run_log where seq >= 10 and pid <> $1`, b.pid()).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Fatalf("%d later events were handled by another process than B", others)
	}
	if r := e.check(t, sent); !r.OK() || r.Repeats != 0 {
		t.Fatalf("%s: %v", r, r.Examples)
	}
}

// At least 20 random kill -9 of worker processes during a run of 6,000
// events over 100 keys with about 2% failing events (and a few that never
// succeed and become dead letters), under the pause policy. Afterwards every
// event was handled or is a dead letter, and no event was handled while an
// earlier event of its key was unresolved.
func TestRandomKillsKeepOrderAndLoseNothing(t *testing.T) {
	t.Parallel()
	keys, perKey, minKills := 100, 60, 20
	if testing.Short() {
		keys, perKey, minKills = 50, 40, 5
	}
	e := newEnv(t, 4)
	rng := rand.New(rand.NewPCG(1, 2))
	var evs []sentEvent
	sent := map[string]int{}
	failing, poison := 0, 0
	for s := 0; s < perKey; s++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("tenant-%d", k)
			f := 0
			switch x := rng.IntN(1000); {
			case x < 3:
				f, poison = 1000, poison+1 // never succeeds: dead letter after max attempts
			case x < 20:
				f, failing = 1+rng.IntN(2), failing+1
			}
			evs = append(evs, sentEvent{key: key, seq: s, f: f})
			sent[key] = perKey
		}
	}
	args := [][]string{{"-slots", "0,1"}, {"-slots", "2,3"}, {"-slots", "all"}}
	procs := make([]*proc, len(args))
	for i, a := range args {
		procs[i] = e.start(t, append(a, "-max-attempts", "4")...)
	}
	kills := 0
	next := 0
	for next < len(evs) || kills < minKills {
		if next < len(evs) {
			end := min(next+300, len(evs))
			e.send(t, evs[next:end])
			next = end
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond) // let work happen between kills
		i := rng.IntN(len(procs))
		procs[i].kill()
		kills++
		procs[i] = e.start(t, append(args[i], "-max-attempts", "4")...)
	}
	total := keys * perKey
	pgtest.WaitFor(t, 4*time.Minute, fmt.Sprintf("all %d events resolved", total), func() (bool, error) {
		return e.resolved(t) >= total, nil
	})
	r := e.check(t, sent)
	t.Logf("%d kills; %d failing events, %d poison; %s", kills, failing, poison, r)
	if !r.OK() {
		if os.Getenv("PQ_KEEP_DB") != "" {
			t.Logf("database kept: %s", e.db.URL)
			select {}
		}
		t.Fatalf("%s: %v", r, r.Examples)
	}
	if r.Dead != poison {
		t.Fatalf("%d dead letters, want the %d poison events", r.Dead, poison)
	}
}

// A blocked key stays blocked across a kill -9 of its worker and a restart
// on another process: the state lives in the engine, not in the process.
func TestBlockedKeySurvivesKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	a := e.start(t)
	e.send(t, []sentEvent{{key: "k", seq: 0}, {key: "k", seq: 1, f: 1000}, {key: "k", seq: 2}, {key: "k", seq: 3}})
	var before partitionq.BlockedKey
	pgtest.WaitFor(t, 30*time.Second, "k blocked with 2 waiting and 2 attempts", func() (bool, error) {
		var err error
		before, err = e.client.BlockedKey(e.ctx, "q", "g", "k")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return err == nil && before.Waiting == 2 && before.Head.Attempts >= 2, err
	})
	a.kill()
	after, err := e.client.BlockedKey(e.ctx, "q", "g", "k")
	if err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	if after.Head.ID != before.Head.ID || after.Waiting != 2 {
		t.Fatalf("after kill -9 the block changed: %+v, was %+v", after, before)
	}
	e.start(t) // another process takes the slot
	pgtest.WaitFor(t, 30*time.Second, "the new worker to retry the head", func() (bool, error) {
		bk, err := e.client.BlockedKey(e.ctx, "q", "g", "k")
		return err == nil && bk.Head.Attempts > after.Head.Attempts, err
	})
	var laterHandled int
	if err := e.pool.QueryRow(e.ctx, `select count(*) from pq_run_log where key = 'k' and seq > 1`).Scan(&laterHandled); err != nil {
		t.Fatal(err)
	}
	if laterHandled != 0 {
		t.Fatalf("%d later events of k were handled while it was blocked", laterHandled)
	}
	if _, err := e.client.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: before.Head.ID, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "k's waiting events handled", func() (bool, error) { return e.resolved(t) == 4, nil })
	if r := e.check(t, map[string]int{"k": 4}); !r.OK() {
		t.Fatalf("%s: %v", r, r.Examples)
	}
}
