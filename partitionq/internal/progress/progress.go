// Package progress records which events of a slot's open batch are
// resolved, so that after a fault the slot's next owner runs again only
// what was not: a watermark (every event of the slot's share at or below it
// is resolved) and the resolved event ids above it, delta-encoded as
// varints (a few bytes per event). It is state per slot, not a row per
// event; see docs/guarantees.md, "What repeats after a crash".
package progress

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"sync"
)

// Set is a recorded progress: the events at or below Below, and those in
// Above (ascending), are resolved.
type Set struct {
	Below int64
	Above []int64
}

// Has reports whether event id is recorded as resolved.
func (s Set) Has(id int64) bool {
	if id <= s.Below {
		return true
	}
	i := sort.Search(len(s.Above), func(i int) bool { return s.Above[i] >= id })
	return i < len(s.Above) && s.Above[i] == id
}

// Len is how many ids Above holds.
func (s Set) Len() int { return len(s.Above) }

// Add records event id as resolved too (Above stays ascending).
func (s *Set) Add(id int64) {
	if s.Has(id) {
		return
	}
	i := sort.Search(len(s.Above), func(i int) bool { return s.Above[i] > id })
	s.Above = append(s.Above, 0)
	copy(s.Above[i+1:], s.Above[i:])
	s.Above[i] = id
}

// Encode returns Above as varint deltas (the first from Below).
func (s Set) Encode() []byte {
	out := make([]byte, 0, 2*len(s.Above))
	prev := s.Below
	for _, id := range s.Above {
		out = binary.AppendUvarint(out, uint64(id-prev))
		prev = id
	}
	return out
}

// ErrCorrupt reports an encoding that Encode did not write.
var ErrCorrupt = errors.New("progress: corrupt encoding")

// Decode reads a Set written by Encode.
func Decode(below int64, b []byte) (Set, error) {
	s := Set{Below: below}
	prev := below
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || d == 0 {
			return Set{}, ErrCorrupt
		}
		prev += int64(d)
		s.Above = append(s.Above, prev)
		b = b[n:]
	}
	return s, nil
}

// Tracker follows one batch's share of a slot as it is handed out (in ev_id
// order) and resolved (in any order). It is safe for concurrent use.
type Tracker struct {
	max int // the most ids above the watermark a snapshot records

	mu     sync.Mutex
	ids    []int64 // handed out and not below the watermark, ascending
	done   []bool  // done[i]: ids[i] is resolved
	pinned []bool  // pinned[i]: ids[i] is resolved and every snapshot records it
	below  int64
	nAbove int  // resolved ids in ids
	nPin   int  // pinned ids in ids
	dirty  bool // changed since the last snapshot
}

// NewTracker returns a tracker for a batch whose recorded progress is from
// (the zero Set for a fresh batch), recording at most max ids above the
// watermark. Every event of the share above from.Below must then be Added
// in ev_id order, resolved (from.Has) or not: the watermark only passes
// events it was told of.
func NewTracker(from Set, max int) *Tracker {
	return &Tracker{max: max, below: from.Below}
}

// Add records that event id is handed out, resolved already or not. Ids
// must come in ascending order; one at or below the watermark, or not above
// the last one added, is ignored.
func (t *Tracker) Add(id int64, resolved bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.add(id, resolved)
}

// AddAll is Add of ids[i], resolved[i], in order, with the lock taken once.
func (t *Tracker) AddAll(ids []int64, resolved []bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, id := range ids {
		t.add(id, resolved[i])
	}
}

func (t *Tracker) add(id int64, resolved bool) {
	if id <= t.below {
		return
	}
	if n := len(t.ids); n > 0 && id <= t.ids[n-1] {
		return
	}
	t.ids = append(t.ids, id)
	t.done = append(t.done, resolved)
	t.pinned = append(t.pinned, false)
	if resolved {
		t.nAbove++
		t.advance()
	}
}

// Resolve records that event id is resolved.
func (t *Tracker) Resolve(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resolve(id, false)
}

// ResolvePinned records that the events ids are resolved, and that every
// snapshot must record them (above the watermark) whatever the bound: a
// snapshot with them (SnapshotWith) was committed, and one without them
// would let a next owner run them again. The caller keeps the pinned ids
// within the bound (Room).
func (t *Tracker) ResolvePinned(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.resolve(id, true)
	}
}

func (t *Tracker) resolve(id int64, pin bool) {
	i := sort.Search(len(t.ids), func(i int) bool { return t.ids[i] >= id })
	if i == len(t.ids) || t.ids[i] != id || t.done[i] {
		return
	}
	t.done[i] = true
	t.nAbove++
	if pin {
		t.pinned[i] = true
		t.nPin++
	}
	t.advance()
}

// Room reports whether n more ids may be pinned: pinned ids stay within
// the bound on ids a snapshot records.
func (t *Tracker) Room(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nPin+n <= t.max
}

// advance moves the watermark over the resolved prefix.
func (t *Tracker) advance() {
	k := 0
	for k < len(t.ids) && t.done[k] {
		k++
	}
	if k > 0 {
		for _, p := range t.pinned[:k] {
			if p {
				t.nPin--
			}
		}
		t.below = t.ids[k-1]
		t.nAbove -= k
		t.ids = t.ids[k:]
		t.done = t.done[k:]
		t.pinned = t.pinned[k:]
	}
	t.dirty = true
}

// Touch marks the tracker changed (a snapshot that could not be recorded).
func (t *Tracker) Touch() {
	t.mu.Lock()
	t.dirty = true
	t.mu.Unlock()
}

// Snapshot returns the progress to record, and whether it changed since the
// last snapshot.
func (t *Tracker) Snapshot() (Set, bool) { return t.SnapshotWith(nil) }

// SnapshotWith is Snapshot with the events extra (handed out, not resolved
// in the tracker) recorded as resolved too, for a write that resolves them
// in the same transaction; after it commits, the caller pins them
// (ResolvePinned). Pinned and extra ids are always recorded; the others
// up to the bound, less those.
func (t *Tracker) SnapshotWith(extra []int64) (Set, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Set{Below: t.below}
	x := append([]int64(nil), extra...)
	slices.Sort(x)
	budget := t.max - t.nPin - len(x)
	others := 0
	for i, id := range t.ids {
		for len(x) > 0 && x[0] < id {
			if x[0] > t.below {
				s.Above = append(s.Above, x[0])
			}
			x = x[1:]
		}
		if len(x) > 0 && x[0] == id {
			x = x[1:]
			s.Above = append(s.Above, id)
			continue
		}
		switch {
		case t.pinned[i]:
			s.Above = append(s.Above, id)
		case t.done[i] && others < budget:
			others++
			s.Above = append(s.Above, id)
		}
	}
	for _, id := range x {
		if id > t.below && (len(s.Above) == 0 || id > s.Above[len(s.Above)-1]) {
			s.Above = append(s.Above, id)
		}
	}
	changed := t.dirty || len(extra) > 0
	t.dirty = false
	return s, changed
}
