package tui

import (
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// historyLen is how many refreshes of read rates the slots view keeps: five
// minutes at the default refresh.
const historyLen = 300

// RateWindow is the span the read rates are averaged over.
const RateWindow = 10 * time.Second

// throughput derives, from successive Status snapshots, how fast each slot
// reads the queue's stream, and how fast events arrive.
//
// A slot's Position is the queue's event sequence at the last tick it
// finished: it moves by every event of the stream (all keys) the slot read
// past, but only when the slot finishes a batch, so between two refreshes
// it may not move at all and then jump by the events of several ticks. The
// rate is therefore the change of Position over the last RateWindow of
// snapshots (or as much of it as the console has seen), divided by the
// time between them: every slot that keeps up reads about the arrival
// rate (the change of the group's Head, over the same window), and a slot
// that falls behind reads less. A slot handles its own hash class of what
// it reads, about 1/N of it. The library has no counter of handled events
// readable from another process (Worker.Stats is in-process only); rates
// from the database are for later work.
type throughput struct {
	seen    map[int][]mark    // by slot: the snapshots of the last RateWindow
	head    []mark            // the group's Head over the same window
	samples map[int][]float64 // by slot, one per refresh; -1: no batch in the interval
}

// mark is a Position (or Head) at a time.
type mark struct {
	at  time.Time
	pos int64
}

func newThroughput() *throughput {
	return &throughput{seen: map[int][]mark{}, samples: map[int][]float64{}}
}

// keep appends m to ms and drops the marks older than the window, keeping
// the newest of those so that the window is covered.
func keep(ms []mark, m mark) []mark {
	switch n := len(ms); {
	case n > 0 && m.pos < ms[n-1].pos:
		ms = nil // the sequence went back: the group was made again
	case n > 0 && !m.at.After(ms[n-1].at):
		return ms // the same moment again: nothing new
	}
	ms = append(ms, m)
	i := 0
	for i+1 < len(ms) && m.at.Sub(ms[i+1].at) >= RateWindow {
		i++
	}
	return ms[i:]
}

// perSecond is the change over the marks, per second, or -1 with fewer
// than two.
func perSecond(ms []mark) float64 {
	if len(ms) < 2 {
		return -1
	}
	first, last := ms[0], ms[len(ms)-1]
	return float64(last.pos-first.pos) / last.at.Sub(first.at).Seconds()
}

// add records a snapshot taken at at.
func (t *throughput) add(st partitionq.GroupStatus, at time.Time) {
	t.head = keep(t.head, mark{at: at, pos: st.Head})
	for _, s := range st.SlotStatus {
		ms := keep(t.seen[s.Slot], mark{at: at, pos: s.Position})
		t.seen[s.Slot] = ms
		r := perSecond(ms)
		if r < 0 || !ms[len(ms)-1].at.Equal(at) {
			continue // not two snapshots yet, or this moment was seen already
		}
		// The interval since the previous refresh draws blank when the slot
		// neither moved nor took a batch in it.
		dt := at.Sub(ms[len(ms)-2].at)
		sample := r
		if ms[len(ms)-1].pos == ms[len(ms)-2].pos && s.LastSeen >= dt {
			sample = -1
		}
		h := append(t.samples[s.Slot], sample)
		if len(h) > historyLen {
			h = h[len(h)-historyLen:]
		}
		t.samples[s.Slot] = h
	}
}

// history returns the samples of a slot, oldest first.
func (t *throughput) history(slot int) []float64 { return t.samples[slot] }

// rateOf is a slot's read rate over the window, or -1 before two snapshots.
func (t *throughput) rateOf(slot int) float64 { return perSecond(t.seen[slot]) }

// rateText is a slot's read rate for the table: "…" until it is known.
func (t *throughput) rateText(slot int) string {
	if r := t.rateOf(slot); r >= 0 {
		return rate(r)
	}
	return "…"
}

// arrivals is the rate at which events arrive on the queue, over the
// window, or -1 before two snapshots.
func (t *throughput) arrivals() float64 { return perSecond(t.head) }

// seenTraffic says whether any slot read anything in the kept history.
func (t *throughput) seenTraffic() bool {
	for _, h := range t.samples {
		for _, v := range h {
			if v > 0 {
				return true
			}
		}
	}
	return false
}
