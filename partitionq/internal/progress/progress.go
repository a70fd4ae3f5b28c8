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
	below  int64
	nAbove int  // resolved ids in ids
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
	if id <= t.below {
		return
	}
	if n := len(t.ids); n > 0 && id <= t.ids[n-1] {
		return
	}
	t.ids = append(t.ids, id)
	t.done = append(t.done, resolved)
	if resolved {
		t.nAbove++
		t.advance()
	}
}

// Resolve records that event id is resolved.
func (t *Tracker) Resolve(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.ids), func(i int) bool { return t.ids[i] >= id })
	if i == len(t.ids) || t.ids[i] != id || t.done[i] {
		return
	}
	t.done[i] = true
	t.nAbove++
	t.advance()
}

// advance moves the watermark over the resolved prefix.
func (t *Tracker) advance() {
	k := 0
	for k < len(t.ids) && t.done[k] {
		k++
	}
	if k > 0 {
		t.below = t.ids[k-1]
		t.nAbove -= k
		t.ids = t.ids[k:]
		t.done = t.done[k:]
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
func (t *Tracker) Snapshot() (Set, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Set{Below: t.below}
	for i, id := range t.ids {
		if len(s.Above) >= t.max {
			break
		}
		if t.done[i] {
			s.Above = append(s.Above, id)
		}
	}
	changed := t.dirty
	t.dirty = false
	return s, changed
}
