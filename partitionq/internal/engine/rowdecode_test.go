package engine_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/dbtest"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

var shared dbtest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Close(m.Run())) }

// sameEvent reports how a differs from b ("" when it does not): times by
// instant and zone, the rest field by field.
func sameEvent(a, b engine.SlotEvent) string {
	if !a.Time.Equal(b.Time) || a.Time.Location().String() != b.Time.Location().String() {
		return fmt.Sprintf("time %v against %v", a.Time, b.Time)
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("%+v against %+v", a, b)
	}
	return ""
}

// TestReadRowsDecodeAsScanned: the read's rows decoded from their wire
// values are what pgx's Scan makes of them, for every kind of value the
// columns hold; a value the decoder does not expect (NULL where the read
// has none, an infinite time) is left to Scan.
func TestReadRowsDecodeAsScanned(t *testing.T) {
	pool, _ := shared.Get(t)
	ctx := context.Background()
	long := strings.Repeat("ü{\"x\":1}", 20000)
	rows, err := pool.Query(ctx, `
		select slot::bigint, id::bigint, at::timestamptz, retry::int4, typ::text, data::text, key::text,
		       x2::text, x3::text, x4::text, nokey::bool
		  from (values
		    (0, 1, now(), 0, 'FileCreated', '{}', 'tenant-1', null, null, null, false),
		    (255, 9007199254740993, '1999-12-31 23:59:59.999999+00', 7, '', '', '', 'a', '', 'ç', true),
		    (3, 42, '1970-01-01 00:00:00+00', 2147483647, 'FileCreated', $1, 'k', null, 'b', null, false),
		    (1, 43, '2038-01-19 03:14:08.5+05:30', 1, 'FileDeleted', 'x', 'k', 'p', 'q', 'r', false)
		  ) v(slot, id, at, retry, typ, data, key, x2, x3, x4, nokey)`, long)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !engine.RawReadable(rows) {
		t.Fatalf("the read's column types in binary are not taken for the read's: %+v", rows.FieldDescriptions())
	}
	n := 0
	for rows.Next() {
		var raw, scanned engine.SlotEvent
		if !engine.DecodeRaw(rows.RawValues(), &raw) {
			t.Fatalf("row %d: not decoded", n)
		}
		if err := engine.ScanRead(rows, &scanned); err != nil {
			t.Fatal(err)
		}
		if d := sameEvent(raw, scanned); d != "" {
			t.Errorf("row %d: decoded %s", n, d)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d rows", n)
	}

	for _, odd := range []string{
		`select 0::bigint, 1::bigint, 'infinity'::timestamptz, 0::int4, 't'::text, 'd'::text, 'k'::text, null::text, null::text, null::text, false`,
		`select 0::bigint, null::bigint, now(), 0::int4, 't'::text, 'd'::text, 'k'::text, null::text, null::text, null::text, false`,
		`select 0::bigint, 1::bigint, now(), 0::int4, 't'::text, null::text, 'k'::text, null::text, null::text, null::text, false`,
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, odd)
			if err != nil {
				return err
			}
			defer rows.Close()
			if !rows.Next() {
				return fmt.Errorf("no row: %v", rows.Err())
			}
			var ev engine.SlotEvent
			if engine.DecodeRaw(rows.RawValues(), &ev) {
				return fmt.Errorf("decoded %+v", ev)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", odd, err)
		}
	}
}

// TestAReadDecodesItsRowsDirectly: a batch's read (the cursor's fetch)
// has the shape the decoder knows, so its rows are decoded without Scan,
// with every column as sent, on the engine under test.
func TestAReadDecodesItsRowsDirectly(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, consumer = "rowdecode", "g#0/1"
	sc := eng.Schema()
	newQueue(t, pool, eng, queue, consumer)
	type sent struct {
		typ, data string
		key       *string
		x2, x3    *string
	}
	str := func(s string) *string { return &s }
	want := []sent{
		{"FileCreated", `{"size":1}`, str("tenant-1"), nil, nil},
		{"FileDeleted", "", str("tenant-2"), str("trace"), str("")},
		{"FileCreated", "ünïcode", nil, nil, str("x")},
	}
	for _, w := range want {
		if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, $2, $3, $4, $5, $6, null)`, queue, w.typ, w.data, w.key, w.x2, w.x3); err != nil {
			t.Fatal(err)
		}
	}
	tx, info := openBatch(t, pool, eng, queue, consumer)
	subs, err := eng.Subscriptions(ctx, tx, queue, consumer)
	if err != nil || len(subs) != 1 {
		t.Fatalf("the consumer's subscription: %v, %v", subs, err)
	}
	sub := subs[0].SubID
	cur, evs, err := eng.OpenRead(ctx, tx, engine.ReadSpec{Batch: info.ID, Sub: sub, Subs: []int32{sub}, N: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	more, err := cur.Next(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, more...)
	if len(evs) != len(want) {
		t.Fatalf("read %d events, %d were sent", len(evs), len(want))
	}
	if d := engine.Decoded(cur); d != len(want) {
		t.Errorf("%d of the %d rows decoded directly (the rest scanned)", d, len(want))
	}
	deref := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	for i, w := range want {
		ev := evs[i]
		key := ""
		if w.key != nil {
			key = *w.key
		}
		if ev.Type != w.typ || ev.Data != w.data || ev.Key != key || ev.NoKey != (w.key == nil) ||
			deref(ev.Extra2) != deref(w.x2) || deref(ev.Extra3) != deref(w.x3) || ev.Extra4 != nil || ev.Slot != 0 || ev.Retry != 0 {
			t.Errorf("event %d read as %+v (extras %s, %s), sent %+v", i, ev, deref(ev.Extra2), deref(ev.Extra3), w)
		}
		if time.Since(ev.Time) > time.Minute || time.Since(ev.Time) < 0 {
			t.Errorf("event %d: time %v", i, ev.Time)
		}
		if i > 0 && ev.ID <= evs[i-1].ID {
			t.Errorf("event %d: id %d after %d", i, ev.ID, evs[i-1].ID)
		}
	}
}
