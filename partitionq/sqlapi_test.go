package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// The SQL API for handlers and producers in any language (schema version 15,
// docs/handlers.md): partitionq.send by the rules of Client.Send, and
// partitionq.fence as CheckOwner.

// sqlSend calls partitionq.send with m's fields (nil for the empty ones).
func (b *bundle) sqlSend(ctx context.Context, q pgx.Tx, queue string, m partitionq.Message) (partitionq.SendResult, error) {
	var typ, payload, dedupID *string
	var window *time.Duration
	if m.Type != "" {
		typ = &m.Type
	}
	if m.Payload != nil {
		s := string(m.Payload)
		payload = &s
	}
	if m.DedupID != "" {
		dedupID = &m.DedupID
	}
	if m.DedupWindow != 0 {
		window = &m.DedupWindow
	}
	var r partitionq.SendResult
	const sql = `select * from partitionq.send($1, $2, $3, $4, dedup_id => $5, dedup_window => $6)`
	var err error
	if q != nil {
		err = q.QueryRow(ctx, sql, queue, m.Key, typ, payload, dedupID, window).Scan(&r.ID, &r.Duplicate)
	} else {
		err = b.pool.QueryRow(ctx, sql, queue, m.Key, typ, payload, dedupID, window).Scan(&r.ID, &r.Duplicate)
	}
	return r, err
}

// storedEvent reads an event's key, type and payload from the engine.
func (b *bundle) storedEvent(t *testing.T, id int64) (key, typ, data string) {
	t.Helper()
	var pfx string
	if err := b.pool.QueryRow(b.ctx, b.db.SQL(`select queue_data_pfx from pgq.queue where queue_name = 'q'`)).Scan(&pfx); err != nil {
		t.Fatal(err)
	}
	var k, ty, d *string
	if err := b.pool.QueryRow(b.ctx, `select ev_extra1, ev_type, ev_data from `+pfx+` where ev_id = $1`, id).Scan(&k, &ty, &d); err != nil {
		t.Fatal(err)
	}
	deref := func(s *string) string {
		if s == nil {
			return "<null>"
		}
		return *s
	}
	return deref(k), deref(ty), deref(d)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// partitionq.send takes and refuses what Send does, and stores the same
// event.
func TestSQLSendIsSend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	long := func(n int) string { return strings.Repeat("k", n) }
	for _, m := range []partitionq.Message{
		{Key: "tenant-42", Type: "FileCreated", Payload: []byte(`{"path":"/a"}`)},
		{Key: "tenant-42"},
		{Key: "multi\nline ü", Type: long(partitionq.MaxTypeLen), Payload: []byte("plain text")},
		{Key: long(partitionq.MaxKeyLen)},
		{Key: ""},
		{Key: long(partitionq.MaxKeyLen + 1)},
		{Key: "k", Type: long(partitionq.MaxTypeLen + 1)},
		{Key: "k", DedupWindow: time.Minute},
		{Key: "k", DedupID: long(partitionq.MaxDedupIDLen + 1)},
		{Key: "k", DedupID: "d", DedupWindow: partitionq.MaxDedupWindow + time.Second},
		{Key: "k", DedupID: "d", DedupWindow: time.Microsecond},
	} {
		name := fmt.Sprintf("key %.20q type %.20q dedup %.20q window %s", m.Key, m.Type, m.DedupID, m.DedupWindow)
		goRes, goErr := b.client.Send(b.ctx, "q", m)
		sqlRes, sqlErr := b.sqlSend(b.ctx, nil, "q", m)
		switch {
		case goErr != nil && sqlErr != nil:
			if !errors.Is(goErr, partitionq.ErrInvalid) || sqlState(sqlErr) != "22023" {
				t.Errorf("%s: Send %v, partitionq.send %v: want a validation error (22023) from both", name, goErr, sqlErr)
			}
			continue
		case goErr != nil || sqlErr != nil:
			t.Errorf("%s: Send %v, partitionq.send %v: want both to take it or both to refuse it", name, goErr, sqlErr)
			continue
		}
		gk, gt, gd := b.storedEvent(t, goRes.ID)
		sk, st, sd := b.storedEvent(t, sqlRes.ID)
		if gk != sk || gt != st || gd != sd || gk != m.Key {
			t.Errorf("%s: Send stored (%q, %q, %q), partitionq.send (%q, %q, %q)", name, gk, gt, gd, sk, st, sd)
		}
	}
	for _, bad := range []string{"", "bad name", strings.Repeat("q", partitionq.MaxNameLen+1)} {
		_, goErr := b.client.Send(b.ctx, bad, partitionq.Message{Key: "k"})
		_, sqlErr := b.sqlSend(b.ctx, nil, bad, partitionq.Message{Key: "k"})
		if !errors.Is(goErr, partitionq.ErrInvalid) || sqlState(sqlErr) != "22023" {
			t.Errorf("queue %q: Send %v, partitionq.send %v: want both to refuse the name", bad, goErr, sqlErr)
		}
	}
	_, goErr := b.client.Send(b.ctx, "nosuch", partitionq.Message{Key: "k"})
	_, sqlErr := b.sqlSend(b.ctx, nil, "nosuch", partitionq.Message{Key: "k"})
	if !errors.Is(goErr, partitionq.ErrNoSuchQueue) || sqlState(sqlErr) != "42704" || !strings.Contains(sqlErr.Error(), `no such queue 'nosuch'`) {
		t.Errorf("no such queue: Send %v, partitionq.send %v", goErr, sqlErr)
	}
	if _, err := b.pool.Exec(b.ctx, `select * from partitionq.send('q', 'k', engine => 'kafka')`); sqlState(err) != "22023" {
		t.Errorf("an unknown engine: %v, want 22023", err)
	}
	var id int64
	if err := b.pool.QueryRow(b.ctx, `select event_id from partitionq.send('q', 'k', engine => $1)`, b.db.Schema).Scan(&id); err != nil || id == 0 {
		t.Errorf("the engine named: %d, %v", id, err)
	}
}

// A dedup id is one record whichever API sends it: a duplicate names the
// first event, another key is refused, the window is the message's.
func TestSQLSendShareDedupRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	first, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "a", DedupID: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.sqlSend(b.ctx, nil, "q", partitionq.Message{Key: "a", DedupID: "one"}); err != nil || !r.Duplicate || r.ID != first.ID {
		t.Errorf("partitionq.send of Send's dedup id: %+v, %v; want a duplicate of %d", r, err, first.ID)
	}
	sqlFirst, err := b.sqlSend(b.ctx, nil, "q", partitionq.Message{Key: "b", DedupID: "two", DedupWindow: 50 * time.Millisecond})
	if err != nil || sqlFirst.Duplicate {
		t.Fatalf("partitionq.send of a new dedup id: %+v, %v", sqlFirst, err)
	}
	if r, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "b", DedupID: "two"}); err != nil || !r.Duplicate || r.ID != sqlFirst.ID {
		t.Errorf("Send of partitionq.send's dedup id: %+v, %v; want a duplicate of %d", r, err, sqlFirst.ID)
	}
	var dk *partitionq.DedupKeyError
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "other", DedupID: "two"}); !errors.As(err, &dk) {
		t.Errorf("Send with another key: %v, want a *DedupKeyError", err)
	}
	if _, err := b.sqlSend(b.ctx, nil, "q", partitionq.Message{Key: "other", DedupID: "one"}); sqlState(err) != "PQ010" ||
		!strings.Contains(err.Error(), fmt.Sprintf("dedup id 'one' of queue 'q' was sent with key 'a' as event %d, not with key 'other'", first.ID)) {
		t.Errorf("partitionq.send with another key: %v, want PQ010 naming both keys", err)
	}
	var hits int64
	if err := b.pool.QueryRow(b.ctx, `select hits from partitionq.dedup where queue = 'q' and dedup_id = 'one'`).Scan(&hits); err != nil || hits != 1 {
		t.Errorf("hits of 'one': %d, %v; want the one duplicate (a refused send counts none)", hits, err)
	}
	// The message's window: 50 ms, after which the id is free again.
	pgtest.WaitFor(t, 10*time.Second, "the 50 ms window to pass", func() (bool, error) {
		r, err := b.sqlSend(b.ctx, nil, "q", partitionq.Message{Key: "b", DedupID: "two"})
		return err == nil && !r.Duplicate && r.ID != sqlFirst.ID, err
	})
	// In the caller's transaction: rolled back, nothing stays.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.sqlSend(b.ctx, tx, "q", partitionq.Message{Key: "c", DedupID: "three"}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(b.ctx)
	if r, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "c", DedupID: "three"}); err != nil || r.Duplicate {
		t.Errorf("a dedup id whose send was rolled back: %+v, %v; want it free", r, err)
	}
}

// Events sent in SQL are routed as the Go client's are: one key's events,
// sent by both in turns, are handled in the order sent, in one slot.
func TestSQLSendRoutesAsSend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	var mu sync.Mutex
	got := map[string][]string{}
	slots := map[string]int{}
	done := make(chan struct{})
	total := 0
	b.worker(t, partitionq.WorkerConfig{Handler: partitionq.HandlerFunc(func(_ context.Context, ev *partitionq.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got[ev.Key] = append(got[ev.Key], string(ev.Payload))
		slots[ev.Key] = ev.Slot
		if total++; total == 80 {
			close(done)
		}
		return nil
	})})
	for i := range 10 {
		for k := range 8 {
			m := partitionq.Message{Key: fmt.Sprintf("k%d", k), Payload: []byte(fmt.Sprint(i))}
			var err error
			if (i+k)%2 == 0 {
				_, err = b.client.Send(b.ctx, "q", m)
			} else {
				_, err = b.sqlSend(b.ctx, nil, "q", m)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for 80 events")
	}
	mu.Lock()
	defer mu.Unlock()
	for k, ps := range got {
		if strings.Join(ps, ",") != "0,1,2,3,4,5,6,7,8,9" {
			t.Errorf("key %s handled %v", k, ps)
		}
		want, err := b.client.SlotOf(b.ctx, k, 4)
		if err != nil || slots[k] != want {
			t.Errorf("key %s handled in slot %d, its slot is %d (%v)", k, slots[k], want, err)
		}
	}
}

// A handler's own write checked with partitionq.fence, in SQL, fails once
// the slot was taken over, as CheckOwner's does.
func TestFenceInSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	if _, err := b.pool.Exec(b.ctx, `create table effects (ev_id bigint primary key)`); err != nil {
		t.Fatal(err)
	}
	write := func(ev *partitionq.Event) error {
		return pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), `insert into effects values ($1)`, ev.ID); err != nil {
				return err
			}
			_, err := tx.Exec(context.Background(), `select partitionq.fence($1)`, ev.Fence())
			return err
		})
	}
	result := make(chan error, 2)
	g := newGate(func(_ context.Context, ev *partitionq.Event) error {
		err := write(ev)
		result <- err
		return err
	})
	b.worker(t, partitionq.WorkerConfig{Handler: g, Ownership: partitionq.OwnershipConfig{LeaseDuration: time.Hour}})
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("free")}); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatalf("the owner's fenced write: %v", err)
	}
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "k", Payload: []byte("gated")}); err != nil {
		t.Fatal(err)
	}
	ev := <-g.inside
	if !strings.HasPrefix(ev.Fence(), "q/g/1/0/") {
		t.Fatalf("fence %q", ev.Fence())
	}
	b.takeOver(t)
	close(g.release)
	err := <-result
	if sqlState(err) != "PQ001" || !strings.Contains(err.Error(), "slot 0 of 1 of group g on queue q is no longer owned at epoch") {
		t.Fatalf("the zombie's fenced write: %v, want PQ001", err)
	}
	if n := b.count(t, `select count(*) from effects`); n != 1 {
		t.Fatalf("%d writes committed, want the owner's one", n)
	}
	for _, bad := range []string{"", "q/g/1/0", "q/g/x/0/1", "q/g/1/0/1/2", "//1/0/1"} {
		if _, err := b.pool.Exec(b.ctx, `select partitionq.fence($1)`, bad); sqlState(err) != "22023" {
			t.Errorf("fence %q: %v, want 22023", bad, err)
		}
	}
}
