package partitionq_test

import (
	"fmt"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// HotKeys counts every pending event by key below HotKeysExactMax: the
// hot key first with its exact count, each slot's busiest key, the key of
// each slot's oldest pending event. Forced to sample (the function called
// with an exact bound of 0), a sample of every page gives the same counts,
// and a smaller one an estimate whose stated error holds the true count.
func TestHotKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 3
	b.group(t, n)
	want := map[string]int64{}
	for round := range 20 {
		var ms []partitionq.Message
		for i := range 500 {
			key := "hot"
			if i%5 == 0 {
				key = fmt.Sprintf("tenant-%d", (round*500+i)%37)
			}
			want[key]++
			ms = append(ms, partitionq.Message{Key: key, Payload: []byte(`{"pad":"` + fmt.Sprint(i) + `"}`)})
		}
		if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
		if err := b.client.TickOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	hk, err := b.client.HotKeys(b.ctx, "q", "g", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !hk.Exact || hk.Pending != 10_000 || len(hk.Top) != 5 || hk.Top[0].Key != "hot" || hk.Top[0].Pending != want["hot"] || hk.Top[0].Error != 0 {
		t.Fatalf("HotKeys = %+v, want exact with hot first at %d", hk, want["hot"])
	}
	for _, k := range hk.Top {
		if k.Pending != want[k.Key] {
			t.Errorf("key %s: %d pending, sent %d", k.Key, k.Pending, want[k.Key])
		}
		s, err := b.client.SlotOf(b.ctx, k.Key, n)
		if err != nil || s != k.Slot {
			t.Errorf("key %s: slot %d, routed to %d (%v)", k.Key, k.Slot, s, err)
		}
	}
	if len(hk.Busiest) != n {
		t.Fatalf("busiest by slot: %+v", hk.Busiest)
	}
	for s, k := range hk.Busiest {
		var best int64
		for key, c := range want {
			if ks, _ := b.client.SlotOf(b.ctx, key, n); ks == s && c > best {
				best = c
			}
		}
		if k.Slot != s || k.Pending != best {
			t.Errorf("slot %d's busiest key %+v, want %d pending", s, k, best)
		}
	}
	if len(hk.Oldest) != n {
		t.Errorf("the oldest key of each slot: %+v", hk.Oldest)
	}
	for _, o := range hk.Oldest {
		s, _ := b.client.SlotOf(b.ctx, o.Key, n)
		if s != o.Slot || o.Age <= 0 {
			t.Errorf("oldest %+v: the key routes to slot %d", o, s)
		}
	}

	// Sampled.
	sample := func(size int64) map[string][2]int64 {
		rows, err := b.pool.Query(b.ctx, `select key, pending, err from partitionq.group_keys($1, 'q', 'g', $3, 50, 10000, 0, $2, 100) where kind = 'key'`, b.db.Schema, size, n)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string][2]int64{}
		for rows.Next() {
			var k string
			var p, e int64
			if err := rows.Scan(&k, &p, &e); err != nil {
				t.Fatal(err)
			}
			out[k] = [2]int64{p, e}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := b.pool.Exec(b.ctx, "analyze"); err != nil {
		t.Fatal(err)
	}
	if got := sample(1_000_000)["hot"]; got[0] != want["hot"] {
		t.Errorf("a sample of every page: hot %d ± %d, sent %d", got[0], got[1], want["hot"])
	}
	got := sample(3000)["hot"]
	if got[1] <= 0 || got[0]-4*got[1] > want["hot"] || got[0]+4*got[1] < want["hot"] {
		t.Errorf("a sample of about 3000 events: hot %d ± %d (95%%), sent %d", got[0], got[1], want["hot"])
	}
}
