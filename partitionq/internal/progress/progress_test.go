package progress

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	for _, s := range []Set{{}, {Below: 7}, {Below: 10, Above: []int64{12, 13, 400, 1 << 40}}} {
		got, err := Decode(s.Below, s.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if got.Below != s.Below || !slices.Equal(got.Above, s.Above) {
			t.Fatalf("round trip of %+v gave %+v", s, got)
		}
	}
	if _, err := Decode(0, []byte{0x80}); err == nil {
		t.Fatal("a truncated varint decoded")
	}
	if _, err := Decode(0, []byte{0}); err == nil {
		t.Fatal("a zero delta decoded")
	}
}

// The watermark covers exactly the resolved prefix, the ids above it are the
// other resolved ones, and a tracker started from a snapshot agrees with it.
func TestTrackerAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		n := 1 + rng.IntN(300)
		ids := make([]int64, n)
		next := int64(rng.IntN(50))
		for i := range ids {
			next += 1 + int64(rng.IntN(8))
			ids[i] = next
		}
		tr := NewTracker(Set{}, 1<<20)
		resolved := map[int64]bool{}
		added := 0
		for added < n || len(resolved) < n {
			if added < n && (rng.IntN(2) == 0 || len(resolved) == added) {
				tr.Add(ids[added], false)
				added++
				continue
			}
			// resolve a random added, unresolved id
			var open []int64
			for _, id := range ids[:added] {
				if !resolved[id] {
					open = append(open, id)
				}
			}
			id := open[rng.IntN(len(open))]
			resolved[id] = true
			tr.Resolve(id)
			s, _ := tr.Snapshot()
			// model
			var below int64
			for _, x := range ids[:added] {
				if !resolved[x] {
					break
				}
				below = x
			}
			if s.Below != below {
				t.Fatalf("round %d: watermark %d, want %d", round, s.Below, below)
			}
			for _, x := range ids[:added] {
				if s.Has(x) != resolved[x] {
					t.Fatalf("round %d: Has(%d) = %v, want %v", round, x, s.Has(x), resolved[x])
				}
			}
			// a new owner starting from this snapshot sees the same, and its
			// watermark never passes an event it has not resolved
			tr2 := NewTracker(s, 1<<20)
			var open2 []int64
			for _, x := range ids[:added] {
				tr2.Add(x, s.Has(x))
				if !s.Has(x) {
					open2 = append(open2, x)
				}
			}
			s2, _ := tr2.Snapshot()
			if s2.Below != s.Below || !slices.Equal(s2.Above, s.Above) {
				t.Fatalf("round %d: restarted tracker %+v, want %+v", round, s2, s)
			}
			for len(open2) > 0 {
				j := rng.IntN(len(open2))
				tr2.Resolve(open2[j])
				open2 = slices.Delete(open2, j, j+1)
				s3, _ := tr2.Snapshot()
				for _, x := range open2 {
					if s3.Has(x) {
						t.Fatalf("round %d: after a restart, unresolved event %d is recorded as resolved (%+v)", round, x, s3)
					}
				}
			}
		}
	}
}

func TestSnapshotCapAndDirty(t *testing.T) {
	tr := NewTracker(Set{}, 2)
	for _, id := range []int64{1, 2, 3, 4, 5} {
		tr.Add(id, false)
	}
	if _, changed := tr.Snapshot(); changed {
		t.Fatal("a tracker with nothing resolved reports a change")
	}
	for _, id := range []int64{3, 4, 5} {
		tr.Resolve(id)
	}
	s, changed := tr.Snapshot()
	if !changed || s.Below != 0 || !slices.Equal(s.Above, []int64{3, 4}) {
		t.Fatalf("snapshot %+v (changed %v), want below 0 above [3 4] (capped at 2)", s, changed)
	}
	if _, changed := tr.Snapshot(); changed {
		t.Fatal("a second snapshot without news reports a change")
	}
	tr.Resolve(1)
	tr.Resolve(2)
	if s, _ := tr.Snapshot(); s.Below != 5 || len(s.Above) != 0 {
		t.Fatalf("snapshot %+v, want everything below 5", s)
	}
}

func TestSetAdd(t *testing.T) {
	s := Set{Below: 10, Above: []int64{12, 15}}
	for _, id := range []int64{14, 9, 20, 12, 11, 14} {
		s.Add(id)
	}
	want := []int64{11, 12, 14, 15, 20} // 9 is below: already resolved; repeats are kept once
	if len(s.Above) != len(want) {
		t.Fatalf("Above = %v, want %v", s.Above, want)
	}
	for i := range want {
		if s.Above[i] != want[i] {
			t.Fatalf("Above = %v, want %v", s.Above, want)
		}
	}
}

// Events written early as parked (resolved with the progress that records
// them) are recorded by that snapshot and, pinned, by every later one,
// whatever the bound: a snapshot without them would let a next owner park
// them a second time.
func TestPinnedIdsAreAlwaysRecorded(t *testing.T) {
	tr := NewTracker(Set{}, 3)
	for id := int64(1); id <= 10; id++ {
		tr.Add(id, false)
	}
	if !tr.Room(3) || tr.Room(4) {
		t.Fatal("room for pinned ids is not the bound")
	}
	// 1 is in flight: the watermark stays at 0.
	set, changed := tr.SnapshotWith([]int64{8, 9})
	if !changed || set.Below != 0 || !slices.Equal(set.Above, []int64{8, 9}) {
		t.Fatalf("snapshot with 8, 9 = %+v, %v", set, changed)
	}
	if set, _ := tr.Snapshot(); len(set.Above) != 0 {
		t.Fatalf("ids not committed were recorded later: %+v", set)
	}
	tr.ResolvePinned([]int64{8, 9})
	for _, id := range []int64{2, 3, 4, 5} {
		tr.Resolve(id)
	}
	// The bound is 3: the pinned 8 and 9 and one other, the lowest.
	if set, _ := tr.Snapshot(); !slices.Equal(set.Above, []int64{2, 8, 9}) {
		t.Fatalf("snapshot after more resolved = %+v, want 2, 8, 9 above 0", set)
	}
	if !tr.Room(1) || tr.Room(2) {
		t.Fatal("room after pinning 2 of 3")
	}
	// The watermark passes the pinned ids: they no longer count.
	for _, id := range []int64{1, 6, 7} {
		tr.Resolve(id)
	}
	if set, _ := tr.Snapshot(); set.Below != 9 || len(set.Above) != 0 || !tr.Room(3) {
		t.Fatalf("after every id up to 9 resolved: %+v, room for 3: %v", set, tr.Room(3))
	}
}
