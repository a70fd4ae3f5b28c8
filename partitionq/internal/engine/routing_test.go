package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/test/pgtest"
)

// upstream is upstream PgQue's partition routing (its partition-keys API),
// written out as it is there: slot k of n holds the events for which it is k.
// $2 is N.
const upstream = `case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) % $2 + $2) % $2 end`

// Slots are pinned, so that a change of hash function, of sign handling or
// of where a NULL key goes cannot pass unnoticed: an event without a key
// (NULL ev_extra1) goes to slot 0, the empty string is hashed like any key.
func TestSlotExprPinned(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	null := (*string)(nil)
	str := func(s string) *string { return &s }
	cases := []struct {
		key  *string
		want map[int]int // n -> slot
	}{
		{null, map[int]int{1: 0, 2: 0, 4: 0, 16: 0, 256: 0}},
		{str(""), map[int]int{1: 0, 2: 1, 4: 1, 16: 13, 256: 109}},
		{str("tenant-1"), map[int]int{1: 0, 2: 1, 4: 1, 16: 9, 256: 137}},
		{str("tenant-2"), map[int]int{1: 0, 2: 1, 4: 3, 16: 11, 256: 235}},
		{str("acme"), map[int]int{1: 0, 2: 0, 4: 2, 16: 14, 256: 110}},
		{str("ключ"), map[int]int{1: 0, 2: 0, 4: 0, 16: 0, 256: 128}},
	}
	for _, c := range cases {
		for n, want := range c.want {
			var got, up int
			err := conn.QueryRow(context.Background(),
				`select `+engine.SlotExpr("ev_extra1", n)+`, `+upstream+` from (select $1::text as ev_extra1) e`, c.key, int64(n)).Scan(&got, &up)
			if err != nil {
				t.Fatal(err)
			}
			name := "NULL"
			if c.key != nil {
				name = "'" + *c.key + "'"
			}
			if got != want || up != want {
				t.Errorf("key %s at N=%d: SlotExpr gives %d, upstream %d, pinned %d", name, n, got, up, want)
			}
		}
	}
}

// SlotExpr agrees with upstream's routing for every key, not only the
// pinned ones: 20,000 keys of every shape at the slot counts above.
func TestSlotExprIsUpstreams(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, n := range []int{1, 2, 3, 4, 16, 256} {
		var differ, total int
		err := conn.QueryRow(context.Background(), `
			select count(*) filter (where `+engine.SlotExpr("ev_extra1", n)+` <> `+strings.ReplaceAll(upstream, "$2", "$1")+`), count(*)
			  from (select case when i % 1000 = 0 then null else md5(i::text) || repeat('é', i % 7) end as ev_extra1
			          from generate_series(1, 20000) i) e`, int64(n)).Scan(&differ, &total)
		if err != nil {
			t.Fatal(err)
		}
		if differ != 0 || total != 20000 {
			t.Errorf("N=%d: %d of %d keys routed differently from upstream", n, differ, total)
		}
	}
}
