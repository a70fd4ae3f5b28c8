package tui

import (
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// historyLen is how many refreshes of read rates the slots view keeps: five
// minutes at the default refresh.
const historyLen = 300

// throughput derives, from successive Status snapshots, how fast each slot
// reads the queue's stream.
//
// The library offers no per-slot counter of handled events readable from
// another process (Worker.Stats is in-process only), so the rate is an
// estimate. Between two snapshots, slot s's pending count changes by
// arrivals - read(s), where arrivals (events the ticker added to the
// stream) are the same for every slot of the queue but not reported. Since
// read(s) >= 0, arrivals >= the largest pending increase of any slot, and
// read(s) is estimated as max(0, that - Δpending(s)). The estimate is
// exact as soon as one slot does not advance (the incident case: the
// others' rates are then true) and reads 0 while every slot keeps up
// (pending stays near zero). To still tell an idle slot from a working
// one, an interval in which the slot took or finished a batch (LastSeen
// shorter than the interval) never draws blank. The rate counts stream
// events of all keys the slot reads past (each slot reads the whole
// stream and handles its own hash class, about 1/N of it).
type throughput struct {
	prev    *partitionq.GroupStatus
	prevAt  time.Time
	samples map[int][]float64 // by slot; -1: no batch in the interval
	last    map[int]float64   // the latest estimate, by slot
	active  map[int]bool      // the slot did a batch in the latest interval
}

func newThroughput() *throughput {
	return &throughput{samples: map[int][]float64{}, last: map[int]float64{}, active: map[int]bool{}}
}

// add records a snapshot taken at at.
func (t *throughput) add(st partitionq.GroupStatus, at time.Time) {
	defer func() { t.prev, t.prevAt = &st, at }()
	if t.prev == nil || len(t.prev.SlotStatus) != len(st.SlotStatus) || !at.After(t.prevAt) {
		return
	}
	dt := at.Sub(t.prevAt)
	var arrivals int64
	for i, s := range st.SlotStatus {
		arrivals = max(arrivals, s.QueuePending-t.prev.SlotStatus[i].QueuePending)
	}
	for i, s := range st.SlotStatus {
		read := max(0, arrivals-(s.QueuePending-t.prev.SlotStatus[i].QueuePending))
		r := float64(read) / dt.Seconds()
		active := s.LastSeen < dt || read > 0
		sample := r
		if !active {
			sample = -1
		}
		h := append(t.samples[s.Slot], sample)
		if len(h) > historyLen {
			h = h[len(h)-historyLen:]
		}
		t.samples[s.Slot], t.last[s.Slot], t.active[s.Slot] = h, r, active
	}
}

// history returns the samples of a slot, oldest first.
func (t *throughput) history(slot int) []float64 { return t.samples[slot] }

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
