package security_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// consumeSQL is what consuming takes at the engine: a batch of a slot.
const consumeSQL = `select pgq.next_batch('q', 'g#0/2')`

// The producer sends (Send, SendBatch, SendTx, partitionq send) and does
// nothing else: it cannot consume, read the retry queue or the dead letters,
// nor act on keys. A worker started with the producer's role handles nothing.
func TestProducerOnlySends(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.pool("producer", 4)
	log := &pgtest.SyncBuffer{}
	pc := e.client("producer", 8, log)

	t.Run("can send", func(t *testing.T) {
		if _, err := pc.Send(e.ctx, "q", partitionq.Message{Key: "a", Payload: []byte("1")}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if _, err := pc.SendBatch(e.ctx, "q", []partitionq.Message{{Key: "a", Payload: []byte("2")}, {Key: "b"}}); err != nil {
			t.Fatalf("SendBatch: %v", err)
		}
		if err := pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
			_, err := pc.SendTx(e.ctx, tx, "q", partitionq.Message{Key: "a", Payload: []byte("3")})
			return err
		}); err != nil {
			t.Fatalf("SendTx: %v", err)
		}
		if code, out, errs := e.cli("producer", `{"key":"c","payload":{"n":1}}`+"\n", "send", "--queue", "q"); code != cli.ExitOK {
			t.Fatalf("partitionq send as producer: exit %d\n%s%s", code, out, errs)
		}
		// Whether its queue exists: an empty batch says, and so does
		// Groups, whose first read is the catalog's.
		if _, err := pc.SendBatch(e.ctx, "nosuch", nil); !errors.Is(err, partitionq.ErrNoSuchQueue) {
			t.Fatalf("an empty batch to a missing queue as producer: %v, want ErrNoSuchQueue", err)
		}
		if _, err := pc.SendBatch(e.ctx, "q", nil); err != nil {
			t.Fatalf("an empty batch to q as producer: %v", err)
		}
		if _, err := pc.Groups(e.ctx, partitionq.GroupsQuery{Queue: "nosuch"}); !errors.Is(err, partitionq.ErrNoSuchQueue) {
			t.Fatalf("Groups of a missing queue as producer: %v, want ErrNoSuchQueue", err)
		}
	})

	t.Run("can send once", func(t *testing.T) {
		first, err := pc.Send(e.ctx, "q", partitionq.Message{Key: "a", Payload: []byte("once"), DedupID: "req-1"})
		if err != nil || first.Duplicate {
			t.Fatalf("Send with a dedup id: %+v, %v", first, err)
		}
		res, err := pc.SendBatch(e.ctx, "q", []partitionq.Message{{Key: "a", DedupID: "req-1"}, {Key: "b", DedupID: "req-2"}, {Key: "b", DedupID: "req-2"}})
		if err != nil || !res[0].Duplicate || res[0].ID != first.ID || res[1].Duplicate || !res[2].Duplicate {
			t.Fatalf("SendBatch with dedup ids: %+v, %v", res, err)
		}
		// In SQL (any language): the same records, the same duplicates.
		var id, again int64
		var dup, dupAgain bool
		if err := pool.QueryRow(e.ctx, `select * from partitionq.send('q', 'a', 'T', 'x', dedup_id => 'req-1')`).Scan(&id, &dup); err != nil || !dup || id != first.ID {
			t.Fatalf("partitionq.send of a dedup id sent by Send, as producer: %d, %v, %v; want a duplicate of %d", id, dup, err, first.ID)
		}
		if err := pool.QueryRow(e.ctx, `select * from partitionq.send('q', 'd', dedup_id => 'req-sql')`).Scan(&id, &dup); err != nil || dup {
			t.Fatalf("partitionq.send as producer: %d, %v, %v", id, dup, err)
		}
		if err := pool.QueryRow(e.ctx, `select * from partitionq.send('q', 'd', dedup_id => 'req-sql')`).Scan(&again, &dupAgain); err != nil || !dupAgain || again != id {
			t.Fatalf("partitionq.send again as producer: %d, %v, %v; want a duplicate of %d", again, dupAgain, err, id)
		}
		_, err = pool.Exec(e.ctx, `select partitionq.fence('q/g/2/0/1')`)
		denied(t, "partitionq.fence as producer", err)
		in := `{"key":"c","dedup_id":"req-3"}` + "\n" + `{"key":"c","dedup_id":"req-3"}` + "\n"
		if code, out, errs := e.cli("producer", in, "send", "--queue", "q"); code != cli.ExitOK || !strings.Contains(out, "line 2: duplicate of event") {
			t.Fatalf("partitionq send with dedup ids as producer: exit %d\n%s%s", code, out, errs)
		}
	})

	t.Run("cannot consume or look", func(t *testing.T) {
		refused := []string{consumeSQL, `select count(*) from partitionq.dead_letter`, `select pgq.create_queue('other')`, `select pgq.ticker()`,
			`select count(*) from partitionq.dedup`, `select partitionq.expire_dedup(10)`,
			`insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at) values ('q', 'forged', 'a', 1, now(), now() + interval '1 day')`,
			`update partitionq.dedup set ev_id = 1`, `delete from partitionq.dedup`,
			`insert into partitionq.queue_config values ('q', interval '7 days')`}
		if e.db.Schema == "pgq" { // PgQue grants select on its retry queue to PUBLIC
			refused = append(refused, `select count(*) from pgq.retry_queue`)
		}
		for _, sql := range refused {
			_, err := pool.Exec(e.ctx, e.db.SQL(sql))
			denied(t, sql, err)
		}
		if e.db.Schema == "pgq" { // on PgQue the retry queue is readable by PUBLIC, and nothing is blocked yet
			_, err := pc.BlockedKeys(e.ctx, "q", "g")
			denied(t, "BlockedKeys", err)
		}
		_, err := pc.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
		denied(t, "DeadLetters", err)
		_, err = pc.Groups(e.ctx, partitionq.GroupsQuery{Queue: "q"})
		denied(t, "Groups", err)
		_, err = pc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "a", Reason: "test"})
		denied(t, "Act skip", err)
	})

	t.Run("a worker with its role handles nothing", func(t *testing.T) {
		h := &handler{}
		w, err := pc.NewWorker(e.ctx, partitionq.WorkerConfig{
			Queue: "q", Group: "g", Handler: h,
			Limits:    partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond},
			Ownership: partitionq.OwnershipConfig{StandbyPoll: 100 * time.Millisecond},
		})
		if err != nil {
			t.Fatalf("NewWorker (it only reads the public catalog): %v", err)
		}
		// It cannot even register a lease, so it never takes a slot.
		denied(t, "Start with the producer role", w.Start(e.ctx))
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.calls != 0 {
			t.Fatalf("a worker as producer handled %d events", h.calls)
		}
	})
}

// The worker consumes: it takes batches, handles events in order, parks a
// failing key's events in the retry queue, retries the head (writing the
// failure records), drains the key once the head succeeds, and writes dead
// letters. It cannot send, act on keys, replay or read the audit trail.
func TestWorkerConsumesOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.scene() // everything in it was done by the worker's role
	if got := sc.h.got("t"); !slices.Equal(got, []string{"once-t", "t-1"}) {
		t.Fatalf("key t handled %v", got)
	}
	var failures, attempts int
	if err := e.admin.QueryRow(e.ctx, `select count(*), coalesce(max(attempts), 0) from partitionq.failure`).Scan(&failures, &attempts); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "the worker to retry the heads", func() (bool, error) {
		err := e.admin.QueryRow(e.ctx, `select count(*), coalesce(min(attempts), 0) from partitionq.failure`).Scan(&failures, &attempts)
		return failures == 2 && attempts >= 3, err
	})
	wc := e.client("worker", 4, nil)
	before := e.state()
	_, err := wc.Send(e.ctx, "q", partitionq.Message{Key: "x"})
	denied(t, "Send", err)
	_, err = wc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", Reason: "test"})
	denied(t, "Act skip", err)
	_, err = wc.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: sc.deadP})
	denied(t, "Replay", err)
	_, err = wc.PurgeMatching(e.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true})
	denied(t, "PurgeMatching", err)
	_, err = wc.Audit(e.ctx, "q", "g", 10)
	denied(t, "Audit", err)
	// A mistyped group: the worker may not read the groups to name them
	// (it cannot count their dead letters), and is told so, not that the
	// queue has none.
	if code, out, errs := e.cli("worker", "", "work", "--queue", "q", "--group", "gx", "--exec", "true"); code != cli.ExitFailed ||
		!strings.Contains(errs, `no such consumer group "gx" on queue "q": check the name (partitionq groups lists the groups, as a role that may read them)`) {
		t.Errorf("work --group gx as worker: exit %d\n%s%s", code, out, errs)
	}
	_, err = e.pool("worker", 2).Exec(e.ctx, e.db.SQL(`select pgq.create_queue('other')`))
	denied(t, "create_queue", err)
	_, err = e.pool("worker", 2).Exec(e.ctx, `select * from partitionq.send('q', 'x')`)
	denied(t, "partitionq.send", err)
	// A handler's fence: the worker's role may check it (a slot nobody
	// owns at that epoch is refused as not owned, not as not allowed).
	_, err = e.pool("worker", 2).Exec(e.ctx, `select partitionq.fence('q/g/99/0/1')`)
	refused(t, "partitionq.fence of a slot not owned, as worker", err, "PQ001")
	if after := e.state(); after != before {
		t.Fatalf("refused actions changed the state: %+v -> %+v", before, after)
	}
}

// The operator skips, retries, quarantines and replays, and sees what the
// viewer sees; each action is audited under its database role. It cannot
// consume, nor purge dead letters (the owner's job).
func TestOperatorActs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.scene()
	oc := e.client("operator", 4, nil)

	t.Run("looks", func(t *testing.T) {
		bk, err := oc.BlockedKeys(e.ctx, "q", "g")
		if err != nil || len(bk) != 2 {
			t.Fatalf("BlockedKeys: %d, %v", len(bk), err)
		}
		if pv, err := oc.Preview(e.ctx, "q", "g", "k", 10); err != nil || len(pv) != 3 {
			t.Fatalf("Preview: %d, %v", len(pv), err)
		}
		if _, err := oc.Status(e.ctx, "q", "g"); err != nil {
			t.Errorf("Status: %v", err)
		}
	})
	t.Run("retry now", func(t *testing.T) {
		res, err := oc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditRetry, Queue: "q", Group: "g", Key: "k", HeadID: sc.headK})
		if err != nil || res.Outcome != partitionq.OutcomeRetryScheduled {
			t.Fatalf("RetryNow: %+v, %v", res, err)
		}
	})
	t.Run("skip", func(t *testing.T) {
		var res partitionq.ActionResult
		pgtest.WaitFor(t, 30*time.Second, "skip of k", func() (bool, error) {
			var err error
			res, err = oc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: sc.headK, Reason: "test"})
			if errors.Is(err, partitionq.ErrHeadBusy) {
				return false, nil
			}
			return err == nil, err
		})
		if res.Outcome != partitionq.OutcomeSkipped {
			t.Fatalf("Skip: %+v", res)
		}
		pgtest.WaitFor(t, 30*time.Second, "k's waiting events handled", func() (bool, error) {
			return slices.Equal(sc.h.got("k"), []string{"k-1", "k-2"}), nil
		})
		// Named again: resolved, by whom (the dead letter); an id the queue
		// never had is refused. Both read through event_fate.
		res, err := oc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: sc.headK, Reason: "again"})
		if err != nil || res.Outcome != partitionq.OutcomeAlreadyResolved || res.Resolved == nil || res.Resolved.How != partitionq.ResolvedSkipped {
			t.Fatalf("Skip of the skipped head: %+v, %v", res, err)
		}
		_, err = oc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: 1 << 40, Reason: "wrong"})
		var nh *partitionq.NotHeadError
		if !errors.As(err, &nh) || nh.Why != fmt.Sprintf("the queue has no event %d", int64(1)<<40) {
			t.Fatalf("Skip of an event the queue never had: %v", err)
		}
	})
	t.Run("quarantine", func(t *testing.T) {
		var res partitionq.ActionResult
		pgtest.WaitFor(t, 30*time.Second, "quarantine of k2", func() (bool, error) {
			var err error
			res, err = oc.Act(e.ctx, partitionq.ActionRequest{Action: partitionq.AuditQuarantine, Queue: "q", Group: "g", Key: "k2", HeadID: sc.headK2, Reason: "test"})
			if errors.Is(err, partitionq.ErrHeadBusy) {
				return false, nil
			}
			return err == nil, err
		})
		if res.Outcome != partitionq.OutcomeQuarantined || res.Count != 2 {
			t.Fatalf("Quarantine: %+v", res)
		}
	})
	t.Run("replay", func(t *testing.T) {
		res, err := oc.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: sc.deadP, Reason: "test"})
		if err != nil || res.Outcome != partitionq.OutcomeReplayed {
			t.Fatalf("Replay: %+v, %v", res, err)
		}
	})
	t.Run("bulk replay", func(t *testing.T) {
		res, err := oc.ReplayMatching(e.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g", Key: "k2", Pending: true}, Reason: "test"})
		if err != nil || res.Count != 2 || res.AuditID == 0 {
			t.Fatalf("ReplayMatching of k2's quarantined events: %+v, %v", res, err)
		}
	})
	t.Run("audited under its role", func(t *testing.T) {
		es, err := oc.Audit(e.ctx, "q", "g", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			t.Fatal("no audit entries")
		}
		for _, a := range es {
			if a.DBRole != e.login("operator") || a.Actor != "operator-person" {
				t.Errorf("audit entry %+v: want role %s, actor operator-person", a, e.login("operator"))
			}
		}
	})
	t.Run("cannot consume or purge", func(t *testing.T) {
		_, err := e.pool("operator", 2).Exec(e.ctx, e.db.SQL(consumeSQL))
		denied(t, "next_batch", err)
		before := e.state()
		_, err = oc.PurgeMatching(e.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true})
		denied(t, "PurgeMatching", err)
		// A worker may dead-letter more meanwhile; a purge would only remove.
		if after := e.state(); after.dead < before.dead {
			t.Fatalf("a refused purge removed dead letters: %d -> %d", before.dead, after.dead)
		}
	})
}

// The viewer reads everything the console and status show, and nothing it
// tries changes anything: skip, retry, quarantine, replay, purge and send
// are refused by PostgreSQL, through the library and through the command
// (the console uses the same calls).
func TestViewerOnlyLooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.scene()
	vc := e.client("viewer", 4, nil)

	t.Run("looks", func(t *testing.T) {
		if gs, err := vc.Groups(e.ctx, partitionq.GroupsQuery{Queue: "q"}); err != nil || len(gs) != 1 || gs[0].BlockedKeys != 2 || gs[0].DeadLetters != 1 {
			t.Errorf("Groups of queue q: %+v, %v", gs, err)
		}
		if bk, err := vc.BlockedKeys(e.ctx, "q", "g"); err != nil || len(bk) != 2 {
			t.Errorf("BlockedKeys: %d, %v", len(bk), err)
		}
		if pv, err := vc.Preview(e.ctx, "q", "g", "k", 10); err != nil || len(pv) != 3 {
			t.Errorf("Preview: %d, %v", len(pv), err)
		}
		if dls, err := vc.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"}); err != nil || len(dls) != 1 {
			t.Errorf("DeadLetters: %d, %v", len(dls), err)
		}
		if _, err := vc.DeadLetterByID(e.ctx, "q", "g", sc.deadP); err != nil {
			t.Errorf("DeadLetterByID: %v", err)
		}
		if _, err := vc.Audit(e.ctx, "q", "g", 10); err != nil {
			t.Errorf("Audit: %v", err)
		}
		if gs, err := vc.Groups(e.ctx, partitionq.GroupsQuery{}); err != nil || len(gs) != 1 || gs[0].BlockedKeys != 2 || gs[0].DeadLetters != 1 {
			t.Errorf("Groups: %+v, %v", gs, err)
		}
		if ki, err := vc.Key(e.ctx, "q", "g", "k"); err != nil || ki.State != partitionq.KeyBlocked || len(ki.SetAside) != 3 {
			t.Errorf("Key: %+v, %v", ki, err)
		}
		if dry, err := vc.ReplayMatching(e.ctx, partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true, DryRun: true}); err != nil || dry.Count != 1 {
			t.Errorf("ReplayMatching dry run: %+v, %v", dry, err)
		}
		for _, args := range [][]string{{"blocked", "--queue", "q", "--group", "g", "--json"}, {"dlq", "list", "--queue", "q", "--group", "g", "--json"},
			{"groups", "--json"}, {"key", "--queue", "q", "--group", "g", "--key", "k", "--json"}} {
			if code, out, errs := e.cli("viewer", "", args...); code != cli.ExitOK {
				t.Errorf("partitionq %s as viewer: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
			}
		}
	})
	t.Run("status", func(t *testing.T) {
		st, err := vc.Status(e.ctx, "q", "g")
		if err != nil {
			t.Fatalf("Status as viewer: %v\n(slot owners come from pg_stat_activity, which shows another role's "+
				"backend_start and client_addr as NULL to a role without pg_read_all_stats; "+
				"partitionq/internal/ownership.Owners scans them into non-nullable fields)", err)
		}
		owned := 0
		for _, s := range st.SlotStatus {
			if s.Owner != nil {
				owned++
			}
		}
		if owned != 2 {
			t.Errorf("Status as viewer shows %d owned slots, want 2", owned)
		}
		if code, out, errs := e.cli("viewer", "", "status", "--queue", "q", "--group", "g", "--json"); code != cli.ExitOK {
			t.Errorf("partitionq status as viewer: exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("changes nothing", func(t *testing.T) {
		before := e.state()
		a := partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "k", HeadID: sc.headK, Reason: "viewer tries"}
		_, err := vc.Act(e.ctx, a)
		denied(t, "skip", err)
		a.Action = partitionq.AuditRetry
		_, err = vc.Act(e.ctx, a)
		denied(t, "retry now", err)
		a.Action, a.Key, a.HeadID = partitionq.AuditQuarantine, "k2", sc.headK2
		_, err = vc.Act(e.ctx, a)
		denied(t, "quarantine", err)
		_, err = vc.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: sc.deadP, Reason: "viewer tries"})
		denied(t, "Replay", err)
		bulk := partitionq.BulkRequest{Match: partitionq.DeadLetterQuery{Queue: "q", Group: "g"}, All: true, Reason: "viewer tries"}
		_, err = vc.ReplayMatching(e.ctx, bulk)
		denied(t, "ReplayMatching", err)
		_, err = vc.PurgeMatching(e.ctx, bulk)
		denied(t, "PurgeMatching", err)
		_, err = vc.Send(e.ctx, "q", partitionq.Message{Key: "k"})
		denied(t, "Send", err)
		_, err = e.pool("viewer", 2).Exec(e.ctx, e.db.SQL(consumeSQL))
		denied(t, "next_batch", err)
		for _, args := range [][]string{
			{"skip", "--queue", "q", "--group", "g", "--key", "k", "--reason", "viewer tries"},
			{"retry", "--queue", "q", "--group", "g", "--key", "k"},
			{"quarantine", "--queue", "q", "--group", "g", "--key", "k2", "--reason", "viewer tries"},
		} {
			code, out, errs := e.cli("viewer", "", args...)
			if code != cli.ExitFailed || !strings.Contains(errs, "permission denied") {
				t.Errorf("partitionq %s as viewer: exit %d, want 1 with permission denied\n%s%s", strings.Join(args, " "), code, out, errs)
			}
		}
		if after := e.state(); after != before {
			t.Fatalf("the viewer's refused actions changed the state: %+v -> %+v", before, after)
		}
	})
}

// The viewer and the operator count every slot's pending events (Status)
// without a right on the event tables: on PgQ they cannot read an event's
// payload there; on PgQue the engine grants its event tables to PUBLIC, so
// any role reads them (docs/security.md says so), and the test pins that
// too, so that a change of the engine's grants is seen.
func TestPendingCountedWithoutReadingPayloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scene() // events handled, blocked, dead: the worker's role did it all
	var table string
	if err := e.admin.QueryRow(e.ctx, e.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = 'q'`)).Scan(&table); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"viewer", "operator"} {
		c := e.client(role, 4, nil)
		st, err := c.Status(e.ctx, "q", "g")
		if err != nil {
			t.Fatalf("Status as %s: %v", role, err)
		}
		if st.PendingMax != st.Pending {
			t.Errorf("Status as %s: pending %d to %d, want exact", role, st.Pending, st.PendingMax)
		}
		var data string
		err = e.pool(role, 1).QueryRow(e.ctx, `select coalesce(max(ev_data), '') from `+table).Scan(&data)
		if e.db.Schema == "pgq" {
			denied(t, role+": select ev_data from the queue's event table", err)
		} else if err != nil {
			t.Errorf("%s on PgQue: the event tables are PUBLIC's there, yet: %v", role, err)
		}
	}
}
