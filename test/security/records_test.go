package security_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The dead letters and the audit trail are append-only for every role of
// sql/roles.sql and attributable: written only through partitionq's record
// functions, which take the role from session_user and refuse what is not
// true (docs/security.md, "Records nobody can forge"). Each test below is an
// attack a review found, tried as the role with real SQL.

// refused checks that err is PostgreSQL's error with SQLSTATE code.
func refused(t *testing.T, what string, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Errorf("%s: got %v, want SQLSTATE %s", what, err, code)
	}
}

// slotOf is the slot of key among the 2 of group g.
func (e *env) slotOf(key string) int {
	e.t.Helper()
	var s int
	if err := e.admin.QueryRow(e.ctx, `select (hashtextextended($1, 0) % 2 + 2) % 2`, key).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func consumerOf(slot int) string { return fmt.Sprintf("g#%d/2", slot) }

// openBatchWith opens, as the worker pool wp, the batch of key's slot that
// holds event evID (the batches before it are finished), the way a worker
// would, and returns its id.
// own makes a worker (a row of partitionq.worker whose lease does not run
// out) the owner of slot at a new epoch, as a takeover does, and returns
// the epoch.
func (e *env) own(slot int) int64 {
	e.t.Helper()
	var epoch int64
	if err := e.admin.QueryRow(e.ctx, `with w as (insert into partitionq.worker (identity, lease_until, schema_version)
		values ($2, 'infinity', (select max(version) from partitionq.schema_version)) returning id)
		update partitionq.slot s set worker_id = w.id, epoch = s.epoch + 1 from w
		 where s.queue = 'q' and s.grp = 'g' and s.slot = $1 returning s.epoch`, slot, fmt.Sprintf("owner of slot %d", slot)).Scan(&epoch); err != nil {
		e.t.Fatal(err)
	}
	return epoch
}

func (e *env) openBatchWith(wp *pgxpool.Pool, key string, evID int64) int64 {
	e.t.Helper()
	consumer := consumerOf(e.slotOf(key))
	var got int64
	pgtest.WaitFor(e.t, 20*time.Second, "a batch holding the event", func() (bool, error) {
		var batch *int64
		if err := wp.QueryRow(e.ctx, e.db.SQL(`select pgq.next_batch('q', $1)`), consumer).Scan(&batch); err != nil || batch == nil {
			return false, err
		}
		var n int
		if err := e.admin.QueryRow(e.ctx, e.db.SQL(`select count(*) from pgq.get_batch_events($1) where ev_id = $2`), *batch, evID).Scan(&n); err != nil {
			return false, err
		}
		if n == 1 {
			got = *batch
			return true, nil
		}
		_, err := wp.Exec(e.ctx, e.db.SQL(`select pgq.finish_batch($1)`), *batch)
		return false, err
	})
	return got
}

// Finding 1: the operator could insert an audit row naming any role and
// actor. Now no role may write partitionq.audit; record_action records the
// caller's session_user whatever it is given, and refuses to record a skip,
// quarantine, replay or purge (those are recorded by the functions that do
// them).
func TestAuditTrailCannotBeForged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	op, wk := e.pool("operator", 2), e.pool("worker", 2)
	var before int
	if err := e.admin.QueryRow(e.ctx, `select count(*) from partitionq.audit`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for role, p := range map[string]*pgxpool.Pool{"operator": op, "worker": wk} {
		for _, sql := range []string{
			`insert into partitionq.audit (db_role, actor, action, queue, grp, outcome) values ('postgres', 'root', 'skip', 'q', 'g', 'skipped')`,
			`update partitionq.audit set db_role = 'postgres'`,
			`delete from partitionq.audit`,
			`truncate partitionq.audit`,
		} {
			_, err := p.Exec(e.ctx, sql)
			denied(t, role+": "+sql, err)
		}
	}
	_, err := wk.Exec(e.ctx, `select partitionq.record_action('root', 'retry', 'q', 'g', 'k', null, '', 'retry_scheduled')`)
	denied(t, "worker: record_action", err)

	// The operator's own entry carries its login role, not one it names.
	var id int64
	if err := op.QueryRow(e.ctx, `select partitionq.record_action('root', 'retry', 'q', 'g', 'k', 7, 'why', 'retry_scheduled')`).Scan(&id); err != nil {
		t.Fatalf("operator: record_action: %v", err)
	}
	var role, actor string
	if err := e.admin.QueryRow(e.ctx, `select db_role, actor from partitionq.audit where id = $1`, id).Scan(&role, &actor); err != nil {
		t.Fatal(err)
	}
	if role != e.login("operator") || actor != "root" {
		t.Errorf("audit entry by the operator: db_role %q, actor %q; want db_role %q (the actor is free text)", role, actor, e.login("operator"))
	}
	// Records of actions that change records are written by the functions
	// that make the change, never on their own.
	for _, args := range []string{
		`'skip', 'q', 'g', 'k', 7, '', 'skipped'`,
		`'quarantine', 'q', 'g', 'k', 7, '', 'quarantined'`,
		`'replay', 'q', 'g', 'k', 7, '', 'replayed'`,
		`'purge', 'q', 'g', null, null, '', 'purged 100'`,
		`'drop_group', 'q', 'g', null, null, '', 'dropped 2 slots, 0 events set aside dropped'`, // g still has its slots
	} {
		_, err := op.Exec(e.ctx, `select partitionq.record_action('root', `+args+`)`)
		refused(t, "operator: record_action("+args+")", err, "PQ002")
	}
	var after int
	if err := e.admin.QueryRow(e.ctx, `select count(*) from partitionq.audit`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Errorf("audit entries: %d -> %d, want one more (the operator's own)", before, after)
	}
	// What the command shows is what the database recorded.
	es, err := e.ac.Audit(e.ctx, "q", "g", 10)
	if err != nil || len(es) != after || es[0].DBRole != e.login("operator") {
		t.Errorf("Audit: %+v, %v", es, err)
	}
}

// Finding 2: the worker could insert a dead letter attributed to an
// operator, which the operator could then replay. Now no role may write
// partitionq.dead_letter; give_up stores the worker's dead letters with its
// session_user and actor "worker", for a worker's reasons only, of events
// that are its slot's to give up (in its open batch or its retry queue),
// with the engine's copy of the event; set_aside (the operator's) only
// takes events parked for the slot.
func TestDeadLettersCannotBeForged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	op, wk := e.pool("operator", 2), e.pool("worker", 2)
	const key = "tenant-1"
	slot := e.slotOf(key)
	other := "tenant-2"
	for e.slotOf(other) == slot {
		other += "x"
	}
	evIDSent, err := e.ac.Send(e.ctx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte("real payload")})
	if err != nil {
		t.Fatal(err)
	}
	evID := evIDSent.ID
	otherIDSent, err := e.ac.Send(e.ctx, "q", partitionq.Message{Key: other, Type: "T", Payload: []byte("other slot")})
	if err != nil {
		t.Fatal(err)
	}
	otherID := otherIDSent.ID
	// The worker owns the slot at an epoch (as a worker that took it does),
	// and gives events up at it.
	epoch := e.own(slot)
	giveUpAt := func(p *pgxpool.Pool, slot int, epoch, id int64, reason string) error {
		_, err := p.Exec(e.ctx, `select partitionq.give_up($1, 'q', 'g', $2, $3, $4, array[$5::int8], array[3], array['boom'], array[$6])`,
			e.db.Schema, slot, epoch, consumerOf(slot), id, reason)
		return err
	}
	giveUp := func(p *pgxpool.Pool, slot int, id int64, reason string) error {
		return giveUpAt(p, slot, epoch, id, reason)
	}
	deadLetters := func() int {
		var n int
		if err := e.admin.QueryRow(e.ctx, `select count(*) from partitionq.dead_letter`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("no direct writes", func(t *testing.T) {
		for role, p := range map[string]*pgxpool.Pool{"worker": wk, "operator": op} {
			for _, sql := range []string{
				fmt.Sprintf(`insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor, db_role)
				 values ('q', 'g', %d, %d, now(), 'T', 'forged', '%s', 1, 'skip: forged by alice', 'alice', '%s')`, slot, evID, key, e.login("operator")),
				`update partitionq.dead_letter set reason = 'forged'`,
				`delete from partitionq.dead_letter`,
				`truncate partitionq.dead_letter`,
			} {
				_, err := p.Exec(e.ctx, sql)
				denied(t, role+": "+sql, err)
			}
		}
	})
	t.Run("not the worker's to give up", func(t *testing.T) {
		// No batch of the slot is open: the event is nobody's to give up yet.
		refused(t, "give_up without an open batch", giveUp(wk, slot, evID, "handler"), "PQ002")
		e.openBatchWith(wk, key, evID)
		// An event of another slot, or one that does not exist.
		refused(t, "give_up of another slot's event", giveUp(wk, slot, otherID, "handler"), "PQ002")
		refused(t, "give_up of no event", giveUp(wk, slot, evID+1000, "handler"), "PQ002")
		// The consumer must be the slot's.
		_, err := wk.Exec(e.ctx, `select partitionq.give_up($1, 'q', 'g', $2, $3, 'other#0/2', array[$4::int8], array[1], array[''], array['handler'])`,
			e.db.Schema, slot, epoch, evID)
		refused(t, "give_up naming another consumer", err, "22023")
		// A zombie: the slot was taken over (a new epoch) while its old owner
		// still ran; its dead letter is refused like its finish.
		refused(t, "give_up at an old epoch", giveUpAt(wk, slot, epoch-1, evID, "handler"), "PQ001")
		refused(t, "give_up of a slot of nobody's", giveUpAt(wk, (slot+1)%2, 1, otherID, "handler"), "PQ001")
		// An operator's reason.
		refused(t, "give_up with reason skip", giveUp(wk, slot, evID, "skip: forged by alice"), "22023")
		// The operator gives up only parked events.
		_, err = op.Exec(e.ctx, `select partitionq.set_aside($1, 'q', 'g', $2, $3, 'skip', array[$4::int8], 'forged', 'alice')`,
			e.db.Schema, slot, consumerOf(slot), evID)
		refused(t, "set_aside of an event not parked", err, "PQ002")
		// The other roles may not call it at all.
		for _, r := range []string{"operator", "viewer", "producer"} {
			denied(t, r+": give_up", giveUp(e.pool(r, 1), slot, evID, "handler"))
		}
		if n := deadLetters(); n != 0 {
			t.Fatalf("%d dead letters after refused calls", n)
		}
	})
	t.Run("the worker's own dead letter", func(t *testing.T) {
		if err := giveUp(wk, slot, evID, "handler"); err != nil {
			t.Fatalf("give_up of an event of the open batch: %v", err)
		}
		dls, err := e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g"})
		if err != nil || len(dls) != 1 {
			t.Fatalf("DeadLetters: %+v, %v", dls, err)
		}
		d := dls[0]
		if d.EventID != evID || d.Key != key || string(d.Payload) != "real payload" || d.Type != "T" || d.Slot != slot ||
			d.Reason != "handler" || d.Actor != "worker" || d.DBRole != e.login("worker") || d.Attempts != 3 || d.LastError != "boom" {
			t.Errorf("dead letter %+v: want event %d of key %s with the engine's type and payload, reason handler, actor worker, role %s",
				d, evID, key, e.login("worker"))
		}
		// Giving it up again (a batch replayed after a crash) changes nothing.
		if err := giveUp(wk, slot, evID, "max_attempts"); err != nil {
			t.Fatalf("give_up again: %v", err)
		}
		if n := deadLetters(); n != 1 {
			t.Errorf("%d dead letters after giving the event up twice, want 1", n)
		}
	})
}

// Finding 3: the operator could mark a dead letter replayed without a
// replay (update ... set replayed_at = now(), replay_ev_id = 1), dropping
// it from --pending unaudited. Now record_replay is the only way, and it
// wants the replay's event: inserted into the queue by the same
// transaction, with the dead letter's key, type and payload.
func TestReplayedNeedsAReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	op, wk := e.pool("operator", 2), e.pool("worker", 2)
	const key = "tenant-1"
	evIDSent, err := e.ac.Send(e.ctx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte("lost order")})
	if err != nil {
		t.Fatal(err)
	}
	evID := evIDSent.ID
	// The owner may write the records directly (TestDeadLettersCannotBeForged
	// makes one the worker's way).
	var dlID int64
	if err := e.admin.QueryRow(e.ctx, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor)
		values ('q', 'g', $1, $2, now(), 'T', 'lost order', $3, 5, 'max_attempts', 'worker') returning id`, e.slotOf(key), evID, key).Scan(&dlID); err != nil {
		t.Fatal(err)
	}
	// An event sent earlier, in another transaction, with the same content.
	earlierSent, err := e.ac.Send(e.ctx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte("lost order")})
	if err != nil {
		t.Fatal(err)
	}
	earlier := earlierSent.ID
	oc := e.client("operator", 2, nil)
	recordReplay := func(tx pgx.Tx, ev int64) error {
		_, err := tx.Exec(e.ctx, `select partitionq.record_replay($1, 'q', 'g', array[$2::int8], array[$3::int8], 'r', 'alice', null)`, e.db.Schema, dlID, ev)
		return err
	}
	inTx := func(f func(tx pgx.Tx) error) error {
		tx, err := op.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(e.ctx)
		return f(tx)
	}

	_, err = op.Exec(e.ctx, `update partitionq.dead_letter set replayed_at = now(), replay_ev_id = 1`)
	denied(t, "operator: update dead_letter set replayed_at", err)
	refused(t, "record_replay as event 1", inTx(func(tx pgx.Tx) error { return recordReplay(tx, 1) }), "PQ002")
	refused(t, "record_replay as an event of another transaction", inTx(func(tx pgx.Tx) error { return recordReplay(tx, earlier) }), "PQ002")
	refused(t, "record_replay as an event of this transaction with other content", inTx(func(tx pgx.Tx) error {
		evSent, err := oc.SendTx(e.ctx, tx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte("something else")})
		if err != nil {
			return err
		}
		ev := evSent.ID
		return recordReplay(tx, ev)
	}), "PQ002")
	_, err = wk.Exec(e.ctx, `select partitionq.record_replay($1, 'q', 'g', array[$2::int8], array[1::int8], '', '', null)`, e.db.Schema, dlID)
	denied(t, "worker: record_replay", err)

	pending, err := e.ac.DeadLetters(e.ctx, partitionq.DeadLetterQuery{Queue: "q", Group: "g", Pending: true})
	if err != nil || len(pending) != 1 {
		t.Fatalf("after refused replays the dead letter must still be pending: %+v, %v", pending, err)
	}

	// A real replay is recorded, once, with its event and an audit entry
	// under the operator's role.
	res, err := oc.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: dlID, Reason: "fixed", Actor: "alice"})
	if err != nil || res.Outcome != partitionq.OutcomeReplayed {
		t.Fatalf("Replay: %+v, %v", res, err)
	}
	d, err := e.ac.DeadLetterByID(e.ctx, "q", "g", dlID)
	if err != nil || d.ReplayID == nil || *d.ReplayID != res.NewEventID {
		t.Fatalf("dead letter after replay: %+v, %v", d, err)
	}
	again, err := oc.Replay(e.ctx, partitionq.ReplayRequest{Queue: "q", Group: "g", ID: dlID, Reason: "again", Actor: "alice"})
	if err != nil || again.Outcome != partitionq.OutcomeAlreadyReplayed || again.NewEventID != res.NewEventID {
		t.Fatalf("Replay again: %+v, %v", again, err)
	}
	refused(t, "record_replay of a replayed dead letter", inTx(func(tx pgx.Tx) error {
		evSent, err := oc.SendTx(e.ctx, tx, "q", partitionq.Message{Key: key, Type: "T", Payload: []byte("lost order")})
		if err != nil {
			return err
		}
		ev := evSent.ID
		return recordReplay(tx, ev)
	}), "PQ004")
	es, err := e.ac.Audit(e.ctx, "q", "g", 10)
	if err != nil || len(es) != 2 {
		t.Fatalf("Audit: %+v, %v", es, err)
	}
	for i, want := range []partitionq.Outcome{partitionq.OutcomeAlreadyReplayed, partitionq.OutcomeReplayed} {
		if a := es[i]; a.Action != "replay" || a.Outcome != want || a.DBRole != e.login("operator") || a.Key != key || a.EventID != evID {
			t.Errorf("audit entry %d: %+v, want replay %s of event %d by %s", i, a, want, evID, e.login("operator"))
		}
	}
}

// Purge deletes dead letters by ids or by age and is one audited action
// with its count, the owner's unless a DBA grants the function to the
// operator role (docs/security.md).
func TestPurgeIsOneAuditedAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []int64
	for i := range 3 {
		var id int64
		if err := e.admin.QueryRow(e.ctx, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor)
			values ('q', 'g', 0, $1, now(), 'T', 'x', 'k', 1, 'handler', 'worker') returning id`, 100+i).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	op := e.pool("operator", 1)
	purge := `select purged from partitionq.purge_dead_letters('q', 'g', $1, $2, 'cleanup', 'alice', null)`
	var n int64
	err := op.QueryRow(e.ctx, purge, ids[:2], nil).Scan(&n)
	denied(t, "operator: purge_dead_letters", err)

	var owner string
	if err := e.admin.QueryRow(e.ctx, `select session_user`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.QueryRow(e.ctx, purge, ids[:2], nil).Scan(&n); err != nil || n != 2 {
		t.Fatalf("owner: purge of 2 ids: %d, %v", n, err)
	}
	if err := e.admin.QueryRow(e.ctx, purge, nil, time.Now().Add(-time.Hour)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("owner: purge of those dead an hour ago: %d, %v", n, err)
	}
	// A DBA lets the operator purge.
	if _, err := e.admin.Exec(e.ctx, `grant execute on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) to `+e.group("operator")); err != nil {
		t.Fatal(err)
	}
	if err := op.QueryRow(e.ctx, purge, nil, time.Now().Add(time.Hour)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("operator granted purge: purge of all before now: %d, %v", n, err)
	}
	es, err := e.ac.Audit(e.ctx, "q", "g", 10)
	if err != nil || len(es) != 3 {
		t.Fatalf("Audit: %+v, %v", es, err)
	}
	for i, want := range []struct{ role, outcome string }{{e.login("operator"), "purged 1"}, {owner, "purged 0"}, {owner, "purged 2"}} {
		if a := es[i]; a.Action != "purge" || a.DBRole != want.role || a.OutcomeText() != want.outcome || a.Actor != "alice" || a.Reason != "cleanup" {
			t.Errorf("audit entry %d: %+v, want purge by %s, %s", i, a, want.role, want.outcome)
		}
	}
}

// The dedup records are written only through dedup_claim and dedup_record,
// by the producer, in its sending transaction: a record names an event the
// same transaction inserted with the claim's key, or none is written. No
// other role may claim; no role writes the table.
func TestDedupRecordsCannotBeForged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pp := e.pool("producer", 2)
	owners, err := e.ac.Send(e.ctx, "q", partitionq.Message{Key: "a", Payload: []byte("the owner's")})
	if err != nil {
		t.Fatal(err)
	}
	inTx := func(fn func(tx pgx.Tx) error) error {
		tx, err := pp.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(e.ctx)
		return fn(tx)
	}
	claim := func(tx pgx.Tx, id, key string) {
		t.Helper()
		var claimed bool
		if err := tx.QueryRow(e.ctx, `select claimed from partitionq.dedup_claim('q', array[$1], array[$2], array[1], array[null::bigint])`, id, key).Scan(&claimed); err != nil || !claimed {
			t.Fatalf("producer: dedup_claim(%s): %v, %v", id, claimed, err)
		}
	}
	insert := func(tx pgx.Tx, key string) int64 {
		t.Helper()
		var id int64
		if err := tx.QueryRow(e.ctx, e.db.SQL(`select pgq.insert_event('q', 'T', 'x', $1, null, null, null)`), key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	record := func(tx pgx.Tx, id string, ev int64) error {
		_, err := tx.Exec(e.ctx, `select partitionq.dedup_record($1, 'q', array[$2], array[$3::int8])`, e.db.Schema, id, ev)
		return err
	}
	refused(t, "dedup_record of another transaction's event", inTx(func(tx pgx.Tx) error {
		claim(tx, "x", "a")
		return record(tx, "x", owners.ID)
	}), "PQ002")
	refused(t, "dedup_record of an event with another key", inTx(func(tx pgx.Tx) error {
		claim(tx, "y", "a")
		return record(tx, "y", insert(tx, "b"))
	}), "PQ002")
	refused(t, "dedup_record of an id not claimed", inTx(func(tx pgx.Tx) error {
		return record(tx, "z", insert(tx, "a"))
	}), "PQ002")
	refused(t, "dedup_record of an event that does not exist", inTx(func(tx pgx.Tx) error {
		claim(tx, "w", "a")
		return record(tx, "w", owners.ID+1000)
	}), "PQ002")
	if err := inTx(func(tx pgx.Tx) error {
		claim(tx, "v", "a")
		if err := record(tx, "v", insert(tx, "a")); err != nil {
			return err
		}
		return tx.Commit(e.ctx)
	}); err != nil {
		t.Fatalf("producer: a true record: %v", err)
	}
	for _, r := range []string{"worker", "operator", "viewer"} {
		_, err := e.pool(r, 1).Exec(e.ctx, `select * from partitionq.dedup_claim('q', array['u'], array['a'], array[1], array[null::bigint])`)
		denied(t, r+": dedup_claim", err)
		_, err = e.pool(r, 1).Exec(e.ctx, `update partitionq.dedup set ev_id = 1`)
		denied(t, r+": update the dedup records", err)
	}
	var ids []string
	rows, err := e.admin.Query(e.ctx, `select dedup_id from partitionq.dedup order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) != 1 || ids[0] != "v" {
		t.Fatalf("dedup records after the attempts: %v, %v; want only v", ids, err)
	}
}
