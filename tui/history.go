package tui

import (
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// HistorySpan is how far back the sparklines of backlog and rates reach.
const HistorySpan = 5 * time.Minute

// history keeps, from successive Status snapshots, each slot's and the
// group's pending events and handler rates, for the sparklines. The rates
// themselves come from the database (GroupStatus.Rates: every worker's
// handler calls over the last 10 s), so a refresh never derives a rate from
// two snapshots; the console only remembers what it was shown.
type history struct {
	slots map[int][]sample
	group []sample
}

// sample is what one refresh showed of a slot (or of the group).
type sample struct {
	at      time.Time
	pending int64
	handled float64 // per second, over the last 10 s
	failed  float64
}

func newHistory() *history { return &history{slots: map[int][]sample{}} }

// add records a snapshot taken at at.
func (h *history) add(st partitionq.GroupStatus, at time.Time) {
	h.group = keepSince(h.group, sample{at: at, pending: st.Pending, handled: st.Rates.Handled10s, failed: st.Rates.Failed10s})
	for _, s := range st.SlotStatus {
		h.slots[s.Slot] = keepSince(h.slots[s.Slot], sample{at: at, pending: s.Pending, handled: s.Rates.Handled10s, failed: s.Rates.Failed10s})
	}
}

// keepSince appends x and drops the samples older than HistorySpan.
func keepSince(xs []sample, x sample) []sample {
	if n := len(xs); n > 0 && !x.at.After(xs[n-1].at) {
		return xs // the same moment again (or the clock went back): nothing new
	}
	xs = append(xs, x)
	i := 0
	for i < len(xs) && x.at.Sub(xs[i].at) >= HistorySpan {
		i++
	}
	return xs[i:]
}

// of returns the samples of a slot, or of the group for slot -1.
func (h *history) of(slot int) []sample {
	if slot < 0 {
		return h.group
	}
	return h.slots[slot]
}

// cells spreads the last HistorySpan before at over width cells, oldest
// first, each the value of the samples in its span (the largest backlog,
// or the mean rate); -1 where the console saw nothing (drawn blank).
func cells(xs []sample, at time.Time, width int, value func(sample) float64, peak bool) []float64 {
	if width <= 0 {
		return nil
	}
	out := make([]float64, width)
	n := make([]int, width)
	for i := range out {
		out[i] = -1
	}
	from := at.Add(-HistorySpan)
	for _, x := range xs {
		if !x.at.After(from) || x.at.After(at) {
			continue
		}
		i := min(width-1, int(x.at.Sub(from)*time.Duration(width)/HistorySpan))
		v := value(x)
		switch {
		case n[i] == 0:
			out[i] = v
		case peak:
			out[i] = max(out[i], v)
		default:
			out[i] += v
		}
		n[i]++
	}
	if !peak {
		for i := range out {
			if n[i] > 1 {
				out[i] /= float64(n[i])
			}
		}
	}
	return out
}

// pendingLine is the sparkline of a slot's (or the group's, -1) pending
// events over HistorySpan, the peak of each cell.
func (h *history) pendingLine(slot int, at time.Time, width int) string {
	return sparkline(cells(h.of(slot), at, width, func(x sample) float64 { return float64(x.pending) }, true), width)
}

// handledLine is the sparkline of a slot's (or the group's, -1) handled
// events per second over HistorySpan, the mean of each cell.
func (h *history) handledLine(slot int, at time.Time, width int) string {
	return sparkline(cells(h.of(slot), at, width, func(x sample) float64 { return x.handled }, false), width)
}
